#include "backend/cuda/local_shape.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace layertap::cuda {

std::string unsupported_parts(const ModelConfig& c) {
  if (c.mla) return "MLA attention";
  if (c.moe) return "MoE layers";
  if (c.quant.method != QuantConfig::Method::None) return "quantized weights (" + c.quant.describe() + ")";
  if (c.rope.type == RopeConfig::Type::Yarn) return "YaRN RoPE";
  return "";
}

LocalShape LocalShape::of(const ModelConfig& c, const TpShard& s) {
  const std::string missing = unsupported_parts(c);
  LT_CHECK(missing.empty(), "cuda backend: ", c.architecture, " needs ", missing,
           ", which the CUDA backend does not implement yet; use --backend cpu");
  check_tp_divisibility(c, s);
  LocalShape l;
  l.hidden = c.hidden_size;
  l.layers = c.num_layers;
  l.vocab = c.vocab_size;
  l.head_dim = c.head_dim;
  l.heads = c.num_heads / s.size;
  l.kv_heads = std::max<std::int64_t>(1, c.num_kv_heads / s.size);  // replicated when kv heads < ranks
  l.inter = c.intermediate_size / s.size;
  l.qkv_bias = c.qkv_bias;
  l.o_bias = c.o_bias && s.rank == 0;
  l.mlp_bias = c.mlp_bias;
  l.down_bias = c.mlp_bias && s.rank == 0;
  l.qk_norm = c.qk_norm;
  return l;
}

std::int64_t LocalShape::layer_matmul_params() const {
  return layers * (qkv_dim() * hidden + hidden * q_dim() + 3 * inter * hidden);
}

}  // namespace layertap::cuda
