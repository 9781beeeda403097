// Per-head q/k transforms around RoPE (see rope.cuh). One warp per (token, head). Half-split
// RoPE: each lane owns the pairs (i, i + rd/2) for i = lane, lane + 32, ..., and the unrotated
// values rd + lane, ...; any even rd <= hd. Interleaved RoPE: rope_warp (rope_pairs.cuh), rd <= 256.
// The steps after RoPE read the head back from memory, where it is held as bf16, as HF's bf16
// model holds it.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_check.hpp"
#include "launch.cuh"
#include "rope.cuh"
#include "rope_pairs.cuh"

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

// 1 / sqrt(mean(x^2) + eps) of x[0:hd] (all lanes get it); each lane reads only x[lane + 32 k].
// IEEE division and square root, as in the fused RMSNorm kernel (not the approximate rsqrtf).
__device__ float inv_rms(const __nv_bfloat16* x, std::int64_t hd, float eps) {
  float ss = 0.0f;
  for (std::int64_t i = threadIdx.x % 32; i < hd; i += 32) {
    const float v = __bfloat162float(x[i]);
    ss += v * v;
  }
  return 1.0f / sqrtf(warp_sum(ss) / static_cast<float>(hd) + eps);
}

// `heads` (hq + hkv, or hq when only the queries change) heads per token.
__global__ void __launch_bounds__(kBlock)
    qk_norm_rope_kernel(__nv_bfloat16* __restrict__ qkv,       // (T, (hq + 2 hkv) * hd)
                        const std::int32_t* __restrict__ pos,  // (T)
                        QkRope f, std::int64_t T, std::int64_t hq, std::int64_t hkv, std::int64_t hd,
                        std::int64_t heads) {
  const int lane = threadIdx.x % 32;
  const std::int64_t warp = std::int64_t(blockIdx.x) * kWarpsPerBlock + threadIdx.x / 32;
  if (warp >= T * heads) return;  // whole warps exit together: no shuffle sees a missing lane
  const std::int64_t t = warp / heads, head = warp % heads;
  __nv_bfloat16* x = qkv + t * (hq + 2 * hkv) * hd + head * hd;  // (hd)
  const std::int64_t rd = f.rotation == QkRope::Rotation::None ? 0 : f.rd, half = rd / 2;
  const float p = static_cast<float>(pos[t]);

  // 1. Weighted norm (never with interleaved RoPE: the launcher refuses it).
  const __nv_bfloat16* w = head < hq ? f.q_norm : f.k_norm;
  const float rstd = w != nullptr ? inv_rms(x, hd, f.eps) : 0.0f;
  // Every read of x above happened before inv_rms's shuffles, which every lane passes before
  // any lane writes below.
  if (w != nullptr)  // the values partial rotary leaves in place are normed all the same
    for (std::int64_t i = rd + lane; i < hd; i += 32)
      x[i] = __float2bfloat16_rn((f.weight_offset + __bfloat162float(w[i])) * round_bf16(__bfloat162float(x[i]) * rstd));

  // 2. RoPE.
  if (f.rotation == QkRope::Rotation::Interleaved) {
    rope_warp(x, rd, true, p, f.inv_freq, f.attention_factor);
  } else {
    for (std::int64_t i = lane; i < half; i += 32) {
      float a = __bfloat162float(x[i]);
      float b = __bfloat162float(x[i + half]);
      if (w != nullptr) {
        a = round_bf16((f.weight_offset + __bfloat162float(w[i])) * round_bf16(a * rstd));
        b = round_bf16((f.weight_offset + __bfloat162float(w[i + half])) * round_bf16(b * rstd));
      }
      rotate_pair(a, b, p, f.inv_freq[i], f.attention_factor);
      x[i] = __float2bfloat16_rn(a);
      x[i + half] = __float2bfloat16_rn(b);
    }
  }

  // 3, 4. Weightless norm, query temperature: on the bf16 values steps 1-2 wrote (warp-uniform).
  const bool temperature = f.temperature && head < hq;
  if (!f.l2_norm && !temperature) return;
  __syncwarp();  // interleaved RoPE wrote values other lanes read below
  const float l2_rstd = f.l2_norm ? inv_rms(x, hd, f.eps) : 0.0f;
  // fma with 0: the product rounded on its own, as torch multiplies before it adds 1 (nvcc would
  // fuse a * b + 1).
  const float scale =
      temperature ? __fmaf_rn(log1pf(floorf((p + 1.0f) / f.floor_scale)), f.attn_scale, 0.0f) + 1.0f : 1.0f;
  for (std::int64_t i = lane; i < hd; i += 32) {  // the elements inv_rms read in this lane: in place
    float v = __bfloat162float(x[i]);
    if (f.l2_norm) v = round_bf16(v * l2_rstd);
    x[i] = __float2bfloat16_rn(v * scale);
  }
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// launchers

void qk_norm_rope(__nv_bfloat16* qkv, const std::int32_t* pos, std::int64_t T, std::int64_t hq, std::int64_t hkv,
                  std::int64_t hd, const QkRope& f, cudaStream_t stream) {
  using Rotation = QkRope::Rotation;
  const bool rotate = f.rotation != Rotation::None, norm = f.q_norm != nullptr;
  LT_CHECK(T >= 0 && hq > 0 && hkv > 0 && hd > 0, "qk_norm_rope: bad shape T=", T, " hq=", hq, " hkv=", hkv,
           " hd=", hd);
  LT_CHECK(!rotate || (f.rd > 0 && f.rd % 2 == 0 && f.rd <= hd), "qk_norm_rope: rotary dim ", f.rd,
           " for head_dim ", hd, " (it must be even and at most head_dim)");
  LT_CHECK(f.rotation != Rotation::Interleaved || f.rd <= kRopeWarpMaxDim, "qk_norm_rope: interleaved rotary dim ",
           f.rd, " (at most ", kRopeWarpMaxDim, ")");
  LT_CHECK(f.rotation != Rotation::Interleaved || !norm,
           "qk_norm_rope: interleaved RoPE after a weighted q/k norm (no model has it)");
  LT_CHECK(qkv != nullptr && pos != nullptr && (!rotate || f.inv_freq != nullptr),
           "qk_norm_rope: null pointer argument");
  LT_CHECK((f.q_norm == nullptr) == (f.k_norm == nullptr), "qk_norm_rope: pass both q_norm and k_norm or neither");
  LT_CHECK(!f.temperature || f.floor_scale > 0, "qk_norm_rope: temperature floor_scale ", f.floor_scale,
           " (it must be positive)");
  const bool keys = rotate || norm || f.l2_norm;  // does anything change the key heads?
  if (T == 0 || (!keys && !f.temperature)) return;
  const std::int64_t heads = keys ? hq + hkv : hq;
  const std::int64_t warps = T * heads;
  const std::int64_t blocks = (warps + kWarpsPerBlock - 1) / kWarpsPerBlock;
  LT_CHECK(blocks < (std::int64_t(1) << 31), "qk_norm_rope: ", T, " tokens x ", heads, " heads is too many");
  // Reads and writes the T heads' hd values in place, reads pos, inv_freq and the norms; lane
  // instructions per element: ~20 for RoPE (sincosf per pair, rotation, rounding, loads, stores),
  // ~10 for the weighted norm, ~15 for the weightless one (its own pass and rewrite), ~10 for
  // the temperature (the queries' elements).
  const double e = sizeof(__nv_bfloat16), n = double(warps) * double(hd);  // elements changed
  const double qn = double(T) * double(hq) * double(hd);                    // query elements
  const Work work{e * n + 4.0 * double(T) + (rotate ? 2.0 * double(hd) : 0) + (norm ? 2 * e * double(hd) : 0), e * n,
                  0, (rotate ? 20 : 0) * n + (norm ? 10 : 0) * n + (f.l2_norm ? 15 : 0) * n + (f.temperature ? 10 : 0) * qn};
  launch<qk_norm_rope_kernel>(Grid{static_cast<unsigned>(blocks), kBlock, 0, stream, work}, qkv, pos, f, T, hq, hkv,
                              hd, heads);
  LT_CUDA_CHECK_LAUNCH();
}

}  // namespace layertap::kernels
