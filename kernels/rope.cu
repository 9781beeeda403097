// Per-head q/k RMSNorm + RoPE (see rope.cuh). One warp per (token, head); each lane owns the
// pairs (i, i + rd/2) for i = lane, lane + 32, ..., and the unrotated values rd + lane, ...;
// any even rd <= hd.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_check.hpp"
#include "launch.cuh"
#include "rope.cuh"

namespace layertap::kernels {
namespace {

// ----------------------------------------------------------------------------------------------
// kernels

constexpr int kBlock = 128;
constexpr int kWarpsPerBlock = kBlock / 32;

__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

__global__ void __launch_bounds__(kBlock)
    qk_norm_rope_kernel(__nv_bfloat16* __restrict__ qkv,          // (T, (hq + 2 hkv) * hd)
                        const std::int32_t* __restrict__ pos,     // (T)
                        const float* __restrict__ inv_freq,       // (rd / 2)
                        const __nv_bfloat16* __restrict__ q_norm,  // (hd) or null
                        const __nv_bfloat16* __restrict__ k_norm,  // (hd) or null
                        float eps, std::int64_t T, std::int64_t hq, std::int64_t hkv, std::int64_t hd,
                        std::int64_t rd, float attention_factor, float weight_offset) {
  const int lane = threadIdx.x % 32;
  const std::int64_t heads = hq + hkv;  // rotated heads per token
  const std::int64_t warp = std::int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (warp >= T * heads) return;  // whole warps exit together: no shuffle sees a missing lane
  const std::int64_t t = warp / heads, head = warp % heads;
  __nv_bfloat16* x = qkv + t * (hq + 2 * hkv) * hd + head * hd;  // (hd)
  const std::int64_t half = rd / 2;

  float rstd = 0.0f;
  const __nv_bfloat16* w = head < hq ? q_norm : k_norm;
  if (w != nullptr) {
    float ss = 0.0f;
    for (std::int64_t i = lane; i < hd; i += 32) {
      const float v = __bfloat162float(x[i]);
      ss += v * v;
    }
    // IEEE division and square root, as in the fused RMSNorm kernel (not the approximate rsqrtf).
    rstd = 1.0f / sqrtf(warp_sum(ss) / static_cast<float>(hd) + eps);
  }
  // Every read of x above happened before warp_sum's shuffles, which every lane passes before
  // any lane writes below.
  if (w != nullptr)  // the values partial rotary leaves in place are normed all the same
    for (std::int64_t i = rd + lane; i < hd; i += 32)
      x[i] = __float2bfloat16_rn((weight_offset + __bfloat162float(w[i])) * round_bf16(__bfloat162float(x[i]) * rstd));
  const float p = static_cast<float>(pos[t]);
  for (std::int64_t i = lane; i < half; i += 32) {
    float a = __bfloat162float(x[i]);
    float b = __bfloat162float(x[i + half]);
    if (w != nullptr) {
      a = round_bf16((weight_offset + __bfloat162float(w[i])) * round_bf16(a * rstd));
      b = round_bf16((weight_offset + __bfloat162float(w[i + half])) * round_bf16(b * rstd));
    }
    float s, c;
    sincosf(p * inv_freq[i], &s, &c);  // full-range accurate sincos (no fast-math)
    c *= attention_factor;             // as cpu::Rope: cos(angle) * factor, in float32
    s *= attention_factor;
    x[i] = __float2bfloat16_rn(a * c - b * s);
    x[i + half] = __float2bfloat16_rn(b * c + a * s);
  }
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// launchers

void qk_norm_rope(__nv_bfloat16* qkv, const std::int32_t* pos, const float* inv_freq,
                  const __nv_bfloat16* q_norm, const __nv_bfloat16* k_norm, float eps, std::int64_t T,
                  std::int64_t hq, std::int64_t hkv, std::int64_t hd, std::int64_t rd, cudaStream_t stream,
                  float attention_factor, float weight_offset) {
  LT_CHECK(T >= 0 && hq > 0 && hkv > 0 && hd > 0 && rd > 0 && rd % 2 == 0 && rd <= hd, "qk_norm_rope: bad shape T=",
           T, " hq=", hq, " hkv=", hkv, " hd=", hd, " rd=", rd, " (the rotary dim rd must be even and at most hd)");
  LT_CHECK(qkv != nullptr && pos != nullptr && inv_freq != nullptr, "qk_norm_rope: null pointer argument");
  LT_CHECK((q_norm == nullptr) == (k_norm == nullptr), "qk_norm_rope: pass both q_norm and k_norm or neither");
  if (T == 0) return;
  const std::int64_t warps = T * (hq + hkv);
  const std::int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  LT_CHECK(blocks < (std::int64_t(1) << 31), "qk_norm_rope: ", T, " tokens x ", hq + hkv, " heads is too many");
  // Reads and writes the T (hq + hkv) rotated heads of hd values in place, reads pos, inv_freq and
  // the norms; ~20 lane instructions per element (sincosf per pair, rotation, rounding, loads,
  // stores), ~10 more with the per-head norm.
  const double e = sizeof(__nv_bfloat16), n = double(warps) * double(hd);  // rotated elements
  const bool norm = q_norm != nullptr;
  const Work work{e * n + 4.0 * double(T) + 2.0 * double(hd) + (norm ? 2 * e * double(hd) : 0), e * n, 0,
                  (norm ? 30 : 20) * n};
  launch<qk_norm_rope_kernel>(Grid{static_cast<unsigned>(blocks), kBlock, 0, stream, work}, qkv, pos, inv_freq, q_norm,
                              k_norm, eps, T, hq, hkv, hd, rd, attention_factor,
                              weight_offset);
  LT_CUDA_CHECK_LAUNCH();
}

}  // namespace layertap::kernels
