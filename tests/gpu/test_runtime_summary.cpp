// cuda_runtime_summary(): devices, cuBLAS and NCCL versions (proves cuBLAS and NCCL link and load).
// Without a GPU it must throw a layertap::Error naming the failed call, and the test skips.
#include <cstdio>
#include <exception>
#include <string>

#include "core/error.hpp"
#include "gpu_test.hpp"
#include "kernels/device_info.hpp"

int main() {
  using layertap::kernels::cuda_runtime_summary;
  if (!layertap::gpu_test::gpu_visible()) {
    try {
      (void)cuda_runtime_summary();
      std::printf("FAIL: cuda_runtime_summary() returned without a device\n");
      return 1;
    } catch (const layertap::Error& e) {
      const std::string msg = e.what();
      std::printf("cuda_runtime_summary() threw as expected: %s\n", msg.c_str());
      if (msg.find("cudaGetDeviceCount") == std::string::npos &&
          msg.find("no device") == std::string::npos) {
        std::printf("FAIL: the error does not name the failed call\n");
        return 1;
      }
    }
    return layertap::gpu_test::kSkip;
  }
  try {
    const std::string s = cuda_runtime_summary();
    std::printf("%s", s.c_str());
    if (s.find("cuBLAS ") == std::string::npos || s.find("NCCL ") == std::string::npos) {
      std::printf("FAIL: summary lacks the cuBLAS or NCCL version\n");
      return 1;
    }
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  std::printf("PASS\n");
  return 0;
}
