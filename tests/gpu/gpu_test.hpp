// Shared by the GPU tests: skip (exit code 77, ctest SKIP_RETURN_CODE) where no GPU is visible.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdio>

namespace layertap::gpu_test {

constexpr int kSkip = 77;

// True when the CUDA runtime works and reports at least one device; otherwise says why.
inline bool gpu_visible() {
  int count = 0;
  const cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess) {
    std::printf("SKIP: cudaGetDeviceCount failed: %s (%s)\n", cudaGetErrorString(e),
                cudaGetErrorName(e));
    (void)cudaGetLastError();  // clear it
    return false;
  }
  if (count == 0) {
    std::printf("SKIP: no CUDA device visible\n");
    return false;
  }
  return true;
}

}  // namespace layertap::gpu_test
