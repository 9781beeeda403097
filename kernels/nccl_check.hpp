// LT_NCCL_CHECK: the NCCL form of LT_GPU_CHECK (cuda_check.hpp). Only host code that talks to
// NCCL (the TP communicator, device_info.cpp) includes this; kernel files never do.
#pragma once
#include <nccl.h>

#include "cuda_check.hpp"

#define LT_NCCL_CHECK(expr) LT_GPU_CHECK("NCCL", expr, ncclSuccess, ncclGetErrorString)
