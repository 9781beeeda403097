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

int rank_device(int local_rank, int visible) {
  LT_CHECK(local_rank >= 0, "local rank ", local_rank, " is negative");
  LT_CHECK(visible > 0, "no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES, driver?); use "
                        "--backend cpu to run without a GPU");
  return local_rank % visible;
}

std::string shared_gpu(const std::vector<std::string>& bus_ids) {
  for (std::size_t a = 0; a < bus_ids.size(); ++a)
    for (std::size_t b = a + 1; b < bus_ids.size(); ++b)
      if (bus_ids[a] == bus_ids[b])
        return cat("local ranks ", a, " and ", b, " would share the GPU at ", bus_ids[a]);
  return "";
}

std::string pci_bus_id(int device) {
  char id[32] = {};
  LT_CUDA_CHECK(cudaDeviceGetPCIBusId(id, int(sizeof id), device));
  return id;
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
