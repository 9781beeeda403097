#include "backend/cuda/local_shape.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace layertap::cuda {

LocalShape LocalShape::of(const ModelConfig& c, const TpShard& s) {
  // MLA and MoE parts exist on the CPU backend only, so far.
  LT_CHECK(!c.mla && !c.moe, "cuda backend: ", c.architecture, " (", c.mla ? "MLA attention" : "MoE",
           ") runs on the CPU backend only in this version; use --backend cpu");
  LT_CHECK(c.quant.method == QuantConfig::Method::None, "cuda backend: quantized checkpoints (",
           c.quant.describe(), ") run on the CPU backend only in this version; use --backend cpu");
  // The rope kernel does not apply YaRN's attention factor to cos/sin.
  LT_CHECK(c.rope.type != RopeConfig::Type::Yarn, "cuda backend: YaRN RoPE runs on the CPU backend only in this "
           "version; use --backend cpu");
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
