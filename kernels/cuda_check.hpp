// One check macro for every GPU library: the failing statement's text, file:line and the
// library's own error string become a layertap::Error (see src/core/error.hpp).
//
//   LT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
//
// cuBLAS and NCCL specialisations live in cublas_check.hpp and nccl_check.hpp, so that kernel
// translation units include neither cublas_v2.h nor nccl.h.
#pragma once
#include <cuda_runtime_api.h>

#include "core/error.hpp"

// The generic form: `expr` is evaluated once; `ok` is the library's success value and
// `to_string(status)` its error string.
#define LT_GPU_CHECK(lib, expr, ok, to_string)                                                \
  do {                                                                                        \
    const auto lt_gpu_status_ = (expr);                                                       \
    if (lt_gpu_status_ != (ok)) {                                                             \
      LT_FAIL(lib, " error at ", __FILE__, ":", __LINE__, ": '", #expr, "' returned ",        \
              to_string(lt_gpu_status_), " (", static_cast<long long>(lt_gpu_status_), ")"); \
    }                                                                                         \
  } while (0)

#define LT_CUDA_CHECK(expr) LT_GPU_CHECK("CUDA", expr, cudaSuccess, cudaGetErrorString)

// After a kernel launch: launch-configuration errors (and sticky errors from earlier work).
#define LT_CUDA_CHECK_LAUNCH() LT_CUDA_CHECK(cudaGetLastError())
