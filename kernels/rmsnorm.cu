// Fused residual add + RMSNorm, bf16 in and out, float32 arithmetic (see rmsnorm.cuh).
// One block per row (grid-stride over rows); any C, not only multiples of the block size.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_check.hpp"
#include "launch.cuh"
#include "rmsnorm.cuh"

namespace layertap::kernels {
namespace {

// ----------------------------------------------------------------------------------------------
// kernels

constexpr int kBlock = 256;  // threads per row; a multiple of 32
constexpr int kWarps = kBlock / 32;

__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Sum of `v` over the block, returned to every thread. `shared` holds kWarps floats.
__device__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < kWarps ? shared[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();  // `shared` may be reused by the caller's next row
  return v;
}

__global__ void __launch_bounds__(kBlock)
    fused_residual_rmsnorm_kernel(__nv_bfloat16* out,             // (N, C)
                                  __nv_bfloat16* __restrict__ residual,  // (N, C)
                                  const __nv_bfloat16* x,          // (N, C) or null
                                  const __nv_bfloat16* __restrict__ weight,  // (C)
                                  float eps, std::int64_t N, std::int64_t C, float weight_offset) {
  __shared__ float shared[kWarps];
  for (std::int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    __nv_bfloat16* res = residual + row * C;
    __nv_bfloat16* o = out + row * C;
    const __nv_bfloat16* xr = x != nullptr ? x + row * C : nullptr;

    // Pass 1: residual += x, rounded to bf16 (PyTorch's bf16 add: float add, round to nearest
    // even); sum the squares of the rounded values in float32.
    float ss = 0.0f;
    for (std::int64_t i = threadIdx.x; i < C; i += kBlock) {
      __nv_bfloat16 r = res[i];
      if (xr != nullptr) {
        r = __float2bfloat16_rn(__bfloat162float(r) + __bfloat162float(xr[i]));
        res[i] = r;
      }
      const float rf = __bfloat162float(r);
      ss += rf * rf;
    }
    // mean then rsqrt as HF does on the CPU: sum / C, then 1 / sqrt (IEEE division and square
    // root: nvcc's defaults -prec-div=true -prec-sqrt=true; not the approximate rsqrtf).
    const float rstd = 1.0f / sqrtf(block_sum(ss, shared) / static_cast<float>(C) + eps);

    // Pass 2: HF's order of rounding, `weight * hidden.to(input_dtype)`: the normalised value is
    // rounded to bf16 first, then multiplied by the weight in float32 and rounded again.
    // Each thread reads back only the elements it wrote in pass 1, and every read of x happened
    // before block_sum's barrier, so `out` may alias `x`.
    for (std::int64_t i = threadIdx.x; i < C; i += kBlock) {
      const float normed = __bfloat162float(__float2bfloat16_rn(__bfloat162float(res[i]) * rstd));
      o[i] = __float2bfloat16_rn((weight_offset + __bfloat162float(weight[i])) * normed);
    }
  }
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// launchers

void fused_residual_rmsnorm(__nv_bfloat16* out, __nv_bfloat16* residual, const __nv_bfloat16* x,
                            const __nv_bfloat16* weight, float eps, std::int64_t N, std::int64_t C,
                            cudaStream_t stream, float weight_offset) {
  LT_CHECK(N >= 0 && C > 0, "fused_residual_rmsnorm: bad shape N=", N, " C=", C);
  LT_CHECK(out != nullptr && residual != nullptr && weight != nullptr,
           "fused_residual_rmsnorm: null out, residual or weight pointer");
  LT_CHECK(static_cast<const void*>(out) != static_cast<const void*>(residual),
           "fused_residual_rmsnorm: out must not alias residual");
  if (N == 0) return;
  constexpr std::int64_t kMaxGrid = 1 << 16;  // rows beyond this are grid-strided
  const unsigned grid = static_cast<unsigned>(N < kMaxGrid ? N : kMaxGrid);
  // Reads residual, x (if any) and weight, writes out and (with x) residual; ~20 lane instructions
  // per element over the two passes (loads, bf16 widen/round, add, FMA, stores, loop).
  const double e = sizeof(__nv_bfloat16), NC = double(N) * double(C), xs = x != nullptr ? 1 : 0;
  const Work work{e * (NC * (1 + xs) + double(C)), e * NC * (1 + xs), 0, 20 * NC};
  launch<fused_residual_rmsnorm_kernel>(Grid{grid, kBlock, 0, stream, work}, out, residual, x, weight, eps, N, C,
                                        weight_offset);
  LT_CUDA_CHECK_LAUNCH();
}

}  // namespace layertap::kernels
