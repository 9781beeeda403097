// LT_CUBLAS_CHECK: the cuBLAS form of LT_GPU_CHECK (cuda_check.hpp). Kernel files do not include this.
#pragma once
#include <cublas_v2.h>

#include "cuda_check.hpp"

#define LT_CUBLAS_CHECK(expr) \
  LT_GPU_CHECK("cuBLAS", expr, CUBLAS_STATUS_SUCCESS, cublasGetStatusString)
