#include "backend/cuda/device.hpp"

#include <cuda_runtime_api.h>

#include <cstdio>

#include "core/error.hpp"
#include "kernels/cuda_check.hpp"

namespace layertap::cuda {

int visible_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();  // clear the error so later checked calls do not see it
    return 0;
  }
  return count;
}

int local_rank_device(int local_rank, int local_size) {
  LT_CHECK(local_rank >= 0 && local_rank < local_size, "local rank ", local_rank, " is outside 0..", local_size - 1);
  const int count = visible_device_count();
  LT_CHECK(count > 0, "no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES, driver?); use "
                      "--backend cpu to run without a GPU");
  LT_CHECK(local_size <= count, local_size, " ranks on this node but only ", count,
           " visible GPU(s): start at most one rank per GPU (CUDA_VISIBLE_DEVICES limits the GPUs seen)");
  return local_rank;
}

void select_device(int device) { LT_CUDA_CHECK(cudaSetDevice(device)); }

std::string describe_device(int device) {
  cudaDeviceProp p{};
  LT_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  char mem[32];
  std::snprintf(mem, sizeof mem, "%.1f", double(p.totalGlobalMem) / double(1ull << 30));
  return cat(p.name, " (device ", device, ", sm_", p.major, p.minor, ", ", mem, " GiB)");
}

}  // namespace layertap::cuda
