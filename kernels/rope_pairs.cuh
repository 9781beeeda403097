// The rotation of RoPE pairs as cpu::Rope::apply computes it, one home for kernels/rope.cu (the
// q/k heads) and kernels/mla.cu (MLA's rope dims). Device code: for .cu files only.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace layertap::kernels {

// (a, b) rotated by the angle p * inv_freq, float32, with cos and sin times `af` (YaRN's
// attention factor; 1 otherwise) first: (a c - b s, b c + a s).
__device__ __forceinline__ void rotate_pair(float& a, float& b, float p, float inv_freq, float af) {
  float s, c;
  sincosf(p * inv_freq, &s, &c);  // full-range accurate sincos (no fast-math)
  c *= af;
  s *= af;
  const float rotated_a = a * c - b * s;
  b = b * c + a * s;
  a = rotated_a;
}

constexpr int kRopePairsPerLane = 4;  // the pairs one lane of rope_warp holds in registers
constexpr std::int64_t kRopeWarpMaxDim = 2 * 32 * kRopePairsPerLane;

// RoPE of one vector v[0:dim] (dim even, at most kRopeWarpMaxDim) by the calling warp, all 32
// lanes: lane l rotates the pairs i = l, l + 32, ... < dim/2, read interleaved (v[2i], v[2i+1])
// or half-split (v[i], v[i + dim/2]), and writes them half-split (v[i], v[i + dim/2]), one bf16
// rounding each. Every lane reads its pairs before any lane writes (in place across lanes).
__device__ __forceinline__ void rope_warp(__nv_bfloat16* v, std::int64_t dim, bool interleaved, float p,
                                          const float* inv_freq, float af) {
  const int lane = threadIdx.x % 32;
  const std::int64_t half = dim / 2;
  float a[kRopePairsPerLane], b[kRopePairsPerLane];
#pragma unroll
  for (int r = 0; r < kRopePairsPerLane; ++r) {
    const std::int64_t i = lane + 32 * r;
    if (i < half) {
      a[r] = __bfloat162float(interleaved ? v[2 * i] : v[i]);
      b[r] = __bfloat162float(interleaved ? v[2 * i + 1] : v[i + half]);
    }
  }
  __syncwarp();
#pragma unroll
  for (int r = 0; r < kRopePairsPerLane; ++r) {
    const std::int64_t i = lane + 32 * r;
    if (i < half) {
      rotate_pair(a[r], b[r], p, inv_freq[i], af);
      v[i] = __float2bfloat16_rn(a[r]);
      v[i + half] = __float2bfloat16_rn(b[r]);
    }
  }
}

}  // namespace layertap::kernels
