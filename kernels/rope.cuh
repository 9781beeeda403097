// Per-head q/k RMSNorm (Qwen3, optional) and rotary position embedding, in place on the fused
// q/k/v projection of a packed batch. Usable from host C++ (g++) and from .cu files.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace layertap::kernels {

// For each token t < T and each of the hq query heads and hkv key heads of row t of `qkv`
// (value heads untouched), with x the head's hd values widened to float32:
//   if q_norm != nullptr (Qwen3):  x = bf16((weight_offset + w) * bf16(x / sqrt(mean(x^2) + eps)))
//                                  with w = q_norm for query heads, k_norm for key heads (Gemma's
//                                  norms apply 1 + w: weight_offset 1);
//   then RoPE on the first rd values (rd = hd, or fewer for partial rotary: the rest pass
//   through), rotating halves (HF rotate_half), for i < rd/2 with a = x[i], b = x[i + rd/2]:
//     angle = float(pos[t]) * inv_freq[i];  x[i] = bf16(a cos - b sin);  x[i + rd/2] = bf16(b cos + a sin)
//   with cos and sin multiplied by `attention_factor` first (YaRN's; 1 for the other RoPE types)
// The normalised value is rounded to bf16 where Hugging Face's bf16 model holds a tensor (as the
// fused RMSNorm kernel does); the rotation itself is float32 with one rounding (HF eager rounds
// cos/sin and each product to bf16; float32 is closer to the float32 model).
//
//   qkv       (T, (hq + 2*hkv) * hd)  bf16, read and written: q heads, then k heads, then v heads
//   pos       (T)                     int32, position of each token within its sample
//   inv_freq  (rd/2)                  float32, from cpu::Rope (default, llama3 or YaRN frequencies)
//   q_norm, k_norm (hd)               bf16, both or neither
// Launches on `stream`; throws layertap::Error on bad arguments or a failed launch.
void qk_norm_rope(__nv_bfloat16* qkv, const std::int32_t* pos, const float* inv_freq,
                  const __nv_bfloat16* q_norm, const __nv_bfloat16* k_norm, float eps, std::int64_t T,
                  std::int64_t hq, std::int64_t hkv, std::int64_t hd, std::int64_t rd, cudaStream_t stream,
                  float attention_factor = 1.0f, float weight_offset = 0.0f);

}  // namespace layertap::kernels
