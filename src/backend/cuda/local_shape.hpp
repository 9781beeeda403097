// The shapes one tensor-parallel rank holds of a dense decoder (heads, kv heads and intermediate
// size divided as src/model/weights.cpp slices them), and the bytes its weights need in bf16.
#pragma once
#include <cstdint>
#include <string>

#include "model/hf_config.hpp"
#include "model/weights.hpp"

namespace layertap::cuda {

// What in `c` the CUDA backend does not implement yet ("" when it runs it): MLA attention, MoE
// layers, quantized weights, YaRN RoPE (its attention factor is not in the rope kernel).
std::string unsupported_parts(const ModelConfig& c);

struct LocalShape {
  std::int64_t hidden = 0, layers = 0, vocab = 0, head_dim = 0;
  std::int64_t heads = 0, kv_heads = 0, inter = 0;  // this rank's query heads, kv heads, intermediate size
  bool qkv_bias = false;   // q/k/v biases (Qwen2, Llama attention_bias)
  bool o_bias = false;     // o_proj bias, on TP rank 0 only (added once, before the all-reduce)
  bool mlp_bias = false;   // gate/up biases
  bool down_bias = false;  // down_proj bias, on TP rank 0 only
  bool qk_norm = false;    // Qwen3 per-head q/k RMSNorm

  std::int64_t q_dim() const { return heads * head_dim; }
  std::int64_t qkv_dim() const { return (heads + 2 * kv_heads) * head_dim; }

  // Checks divisibility (check_tp_divisibility) and derives the rank's shapes.
  static LocalShape of(const ModelConfig& c, const TpShard& shard);
  // Matrix parameters of the decoder layers (q, k, v, o, gate, up, down) on this rank: the
  // GEMM-bound FLOP count is 2 x this per token (embedding, norms and biases excluded).
  std::int64_t layer_matmul_params() const;
};

}  // namespace layertap::cuda
