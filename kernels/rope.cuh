// Per-head q/k transforms around rotary position embedding, in place on the fused q/k/v
// projection of a packed batch: the weighted q/k RMSNorm before RoPE (Qwen3, GLM-4.5, Gemma-3),
// half-split or interleaved RoPE, Llama-4's weightless norm after RoPE and its NoPE layers' query
// temperature. Usable from host C++ (g++) and from .cu files.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace layertap::kernels {

// What qk_norm_rope does to each query and key head, in this order (each step optional).
struct QkRope {
  // 1. Weighted RMSNorm before RoPE: both or neither (hd bf16 each); Gemma's norms apply
  //    (1 + w): weight_offset 1.
  const __nv_bfloat16* q_norm = nullptr;
  const __nv_bfloat16* k_norm = nullptr;
  float weight_offset = 0.0f;
  // 2. The rotation of the first rd values (the rest pass through): HalfSplit pairs (x[i],
  //    x[i + rd/2]) (HF rotate_half); Interleaved pairs (x[2i], x[2i+1]) (Llama-4's complex
  //    multiplication, DeepSeek's rope_interleave) written back half-split [x0', x2', ..., x1',
  //    x3', ...] as cpu::Rope's Interleaved layout does; None: no rotation (Llama-4's NoPE layers;
  //    rd and inv_freq unused).
  enum class Rotation { HalfSplit, Interleaved, None };
  Rotation rotation = Rotation::HalfSplit;
  std::int64_t rd = 0;              // even, at most hd (Interleaved: at most 256)
  const float* inv_freq = nullptr;  // (rd/2) float32, from cpu::Rope (default, llama3 or YaRN)
  float attention_factor = 1.0f;    // YaRN's, on cos and sin; 1 for the other RoPE types
  // 3. Llama-4's use_qk_norm: each q and k head divided by its RMS, no weight, after RoPE.
  bool l2_norm = false;
  float eps = 1e-6f;  // of both norms
  // 4. Llama-4's attn_temperature_tuning (NoPE layers): each query head times
  //    s(p) = log1p(floor((p + 1) / floor_scale)) * attn_scale + 1.
  bool temperature = false;
  float floor_scale = 8192.0f, attn_scale = 0.1f;
};

// For each token t < T and each of the hq query heads and hkv key heads of row t of `qkv`
// (value heads untouched), with x the head's hd values widened to float32 and p = float(pos[t]):
//   1. x = bf16((weight_offset + w) * bf16(x / sqrt(mean(x^2) + eps))), w = q_norm or k_norm;
//   2. for each pair i < rd/2, (a, b) as the layout says, angle = p * inv_freq[i],
//      c = cos(angle) * attention_factor, s = sin(angle) * attention_factor:
//        x[i] = bf16(a c - b s);  x[i + rd/2] = bf16(b c + a s);
//   3. x = bf16(x / sqrt(mean(x^2) + eps));
//   4. query heads: x = bf16(x * s(p)), s(p) in float32.
// Each step rounds to bf16 where Hugging Face's bf16 model holds a tensor (the RoPE output
// before Llama-4's norm included); the arithmetic of a step is float32 with one rounding (HF eager
// rounds cos/sin and each product to bf16; float32 is closer to the float32 model).
//
//   qkv  (T, (hq + 2*hkv) * hd)  bf16, read and written: q heads, then k heads, then v heads
//   pos  (T)                     int32, position of each token within its sample
// Launches on `stream`; throws layertap::Error on bad arguments or a failed launch.
void qk_norm_rope(__nv_bfloat16* qkv, const std::int32_t* pos, std::int64_t T, std::int64_t hq, std::int64_t hkv,
                  std::int64_t hd, const QkRope& f, cudaStream_t stream);

}  // namespace layertap::kernels
