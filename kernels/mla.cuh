// Multi-head latent attention steps between its products (the products are cuBLASLt GEMMs and the
// attention itself is attention.cuh's, with qk and v head dims of their own), mirroring
// src/backend/cpu/mla.cpp. Usable from host C++ (g++) and from .cu files.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace layertap::kernels {

// RMSNorm of N rows of C values read with row stride `in_stride`, written with `out_stride`:
//   out[n] = bf16((weight_offset + weight) * bf16(x * rsqrt(mean(x^2) + eps)))  (as fused_residual_rmsnorm)
// for MLA's latent norms (q_a_layernorm on q_a_proj's output, kv_a_layernorm on the first
// kv_lora_rank values of kv_a_proj_with_mqa's) and Gemma-3's sandwich norms of a sub-layer's output.
// `out` may equal `in` when the strides agree.
void rmsnorm_rows(__nv_bfloat16* out, std::int64_t out_stride, const __nv_bfloat16* in, std::int64_t in_stride,
                  const __nv_bfloat16* weight, float eps, std::int64_t N, std::int64_t C, cudaStream_t stream,
                  float weight_offset = 0.0f);

// RoPE in place on `heads` vectors of `dim` values per token t < T, head h at
//   x + t * row_stride + h * head_stride + offset,
// at position pos[t], with cos and sin multiplied by `attention_factor` (YaRN; 1 otherwise), as
// cpu::Rope::apply: interleaved pairs (x[2i], x[2i+1]) written back half-split
// ([x0', x2', ..., x1', x3', ...]), or half-split pairs (x[i], x[i + dim/2]). float32 arithmetic,
// one rounding to bf16. dim even, at most 256.
void rope_strided(__nv_bfloat16* x, std::int64_t row_stride, std::int64_t head_stride, std::int64_t offset,
                  std::int64_t heads, std::int64_t dim, bool interleaved, const std::int32_t* pos,
                  const float* inv_freq, float attention_factor, std::int64_t T, cudaStream_t stream);

// The per-head keys and values of MLA from kv_b_proj's output and the shared rope key:
//   k (T, nh * (nope + rd))   head h = [kv[t, h, 0:nope], k_rope[t, 0:rd]]
//   v (T, nh * vd)            head h = kv[t, h, nope:nope + vd]
//   kv (T, nh * (nope + vd)), k_rope row t at k_rope + t * k_rope_stride
void mla_assemble_kv(__nv_bfloat16* k, __nv_bfloat16* v, const __nv_bfloat16* kv, const __nv_bfloat16* k_rope,
                     std::int64_t k_rope_stride, std::int64_t T, std::int64_t nh, std::int64_t nope, std::int64_t rd,
                     std::int64_t vd, cudaStream_t stream);

}  // namespace layertap::kernels
