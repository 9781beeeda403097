#include "device_info.hpp"

#include <cuda_runtime_api.h>

#include <sstream>

#include "core/error.hpp"
#include "cublas_check.hpp"
#include "cuda_check.hpp"
#include "nccl_check.hpp"

namespace layertap::kernels {

namespace {

// CUDA encodes versions as 1000 * major + 10 * minor; NCCL as 10000 * major + 100 * minor + patch.
std::string cuda_version_string(int v) { return cat(v / 1000, ".", (v % 1000) / 10); }

}  // namespace

std::string cuda_runtime_summary() {
  int driver = 0;
  int runtime = 0;
  LT_CUDA_CHECK(cudaDriverGetVersion(&driver));
  LT_CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
  int count = 0;
  LT_CUDA_CHECK(cudaGetDeviceCount(&count));
  LT_CHECK(count > 0, "cuda_runtime_summary: the CUDA runtime reports no device");

  std::ostringstream os;
  os << "CUDA driver " << (driver == 0 ? std::string("none") : cuda_version_string(driver))
     << ", runtime " << cuda_version_string(runtime) << ", " << count << " device(s)\n";
  for (int d = 0; d < count; ++d) {
    cudaDeviceProp p{};
    LT_CUDA_CHECK(cudaGetDeviceProperties(&p, d));
    os << "  device " << d << ": " << p.name << ", sm_" << p.major << p.minor << ", "
       << p.multiProcessorCount << " SMs, " << (p.totalGlobalMem >> 20) << " MiB\n";
  }

  int current = 0;
  LT_CUDA_CHECK(cudaGetDevice(&current));
  cublasHandle_t handle = nullptr;
  LT_CUBLAS_CHECK(cublasCreate(&handle));
  int cublas_version = 0;
  const cublasStatus_t st = cublasGetVersion(handle, &cublas_version);
  LT_CUBLAS_CHECK(cublasDestroy(handle));
  LT_CUBLAS_CHECK(st);
  // cuBLAS 13: 10000 * major + 100 * minor + patch.
  os << "cuBLAS " << cublas_version / 10000 << "." << (cublas_version / 100) % 100 << "."
     << cublas_version % 100 << " (handle created on device " << current << ")\n";

  int nccl_version = 0;
  LT_NCCL_CHECK(ncclGetVersion(&nccl_version));
  os << "NCCL " << nccl_version / 10000 << "." << (nccl_version / 100) % 100 << "."
     << nccl_version % 100 << "\n";
  return os.str();
}

}  // namespace layertap::kernels
