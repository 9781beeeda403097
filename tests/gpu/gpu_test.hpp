// Shared by the GPU tests: skip (exit code 77, ctest SKIP_RETURN_CODE) where no GPU is visible.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdio>
#include <exception>

#include "core/error.hpp"
#include "kernels/cuda_check.hpp"

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

// Host-side argument check: counts a failure unless `f()` throws layertap::Error.
template <class F>
void expect_throw(int& failures, const char* what, F&& f) {
  try {
    f();
    std::printf("FAIL: %s did not throw\n", what);
    ++failures;
  } catch (const layertap::Error& e) {
    std::printf("ok   %s throws: %s\n", what, e.what());
  }
}

// The op table's main (test_ops.cpp): host failures (checks run before this) fail the test even
// where no GPU is visible; otherwise skips there. Runs `body(stream)` on a non-blocking stream,
// adds the failure count it returns, prints PASS or FAILED (n); an exception prints FAIL and fails.
template <class Body>
int run_kernel_test(int host_failures, Body&& body) {
  if (!gpu_visible()) return host_failures != 0 ? 1 : kSkip;
  int failures = host_failures;
  try {
    cudaStream_t stream = nullptr;
    LT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    failures += body(stream);
    LT_CUDA_CHECK(cudaStreamDestroy(stream));
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  std::printf(failures == 0 ? "PASS\n" : "FAILED (%d)\n", failures);
  return failures == 0 ? 0 : 1;
}

}  // namespace layertap::gpu_test
