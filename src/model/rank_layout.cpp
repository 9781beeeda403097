#include "model/rank_layout.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace layertap {

MoeSplit parse_moe_split(const std::string& s) {
  if (s == "experts") return MoeSplit::Experts;
  if (s == "intermediate") return MoeSplit::Intermediate;
  LT_FAIL("--moe-split must be 'experts' or 'intermediate', got '", s, "'");
}

const char* moe_split_name(MoeSplit s) { return s == MoeSplit::Experts ? "experts" : "intermediate"; }

namespace {

void check_divides(int64_t n, const TpShard& s, const char* what) {
  LT_CHECK(n % s.size == 0, "tensor parallel size ", s.size, " does not divide ", what, " ", n);
}

LinearSlice whole(std::string module, int64_t out, int64_t in, bool bias) {
  return {std::move(module), out, in, {0, out, 0, in}, Split::Whole, bias};
}
// Rows [row0, row0 + rows) of a [out_full, in] weight, and of its bias.
LinearSlice rows_of(std::string module, int64_t out_full, int64_t in, int64_t row0, int64_t rows, bool bias) {
  return {std::move(module), out_full, in, {row0, rows, 0, in}, Split::Column, bias};
}
// Columns [col0, col0 + cols) of an [out, in_full] weight; the bias on rank 0 only.
LinearSlice cols_of(std::string module, int64_t out, int64_t in_full, int64_t col0, int64_t cols, bool bias,
                    const TpShard& s) {
  return {std::move(module), out, in_full, {0, out, col0, cols}, Split::Row, bias && s.rank == 0};
}

// A SwiGLU MLP of intermediate size `inter` under `base` (its projections named by `names`),
// sliced over the group when `sliced`.
MlpSlices mlp(const ModelConfig& c, const TpShard& s, const std::string& base, int64_t inter, bool sliced, bool bias,
              const MoeTensorNames& names = {}) {
  const int64_t H = c.hidden_size;
  const std::string gate = base + names.gate, up = base + names.up, down = base + names.down;
  if (!sliced) return {whole(gate, inter, H, bias), whole(up, inter, H, bias), whole(down, H, inter, bias)};
  const int64_t local = inter / s.size, i0 = s.rank * local;
  return {rows_of(gate, inter, H, i0, local, bias), rows_of(up, inter, H, i0, local, bias),
          cols_of(down, H, inter, i0, local, bias, s)};
}

// Routed expert `e` of stacked tensors, gate and up in one module [2I, H]: GPT-OSS's interleaved
// (this rank's intermediate indices are 2 rows each, contiguous: one slice), or Llama-4's halves
// (gate rows [0, I), up rows [I, 2I): two slices, stored transposed); down [H, I].
MlpSlices stacked_expert(const ModelConfig& c, const TpShard& s, const std::string& block, int64_t e, bool sliced) {
  const MoeConfig& m = *c.moe;
  const int64_t H = c.hidden_size, inter = m.expert_intermediate_size;
  const std::string gate_up = block + "experts." + m.names.gate, down = block + "experts." + m.names.down;
  const int64_t local = sliced ? inter / s.size : inter, i0 = sliced ? s.rank * local : 0;
  const Split split = sliced ? Split::Column : Split::Whole;
  MlpSlices x;
  if (m.names.experts == MoeTensorNames::Experts::StackedInterleaved) {
    x.gate = {gate_up, 2 * inter, H, {2 * i0, 2 * local, 0, H}, split, m.expert_bias};
  } else {
    x.gate = {gate_up, 2 * inter, H, {i0, local, 0, H}, split, m.expert_bias};
    x.up = {gate_up, 2 * inter, H, {inter + i0, local, 0, H}, split, m.expert_bias};
  }
  x.down = sliced ? cols_of(down, H, inter, i0, local, m.expert_bias, s) : whole(down, H, inter, m.expert_bias);
  const bool transposed = m.names.experts == MoeTensorNames::Experts::StackedTransposed;
  for (LinearSlice* l : {&x.gate, &x.up, &x.down}) {
    l->expert = e;
    l->transposed = transposed;
  }
  if (x.up.module.empty()) x.up = LinearSlice{};  // interleaved: no up slice
  return x;
}

GqaSlices gqa(const ModelConfig& c, const TpShard& s, const std::string& p) {
  const int64_t H = c.hidden_size, hd = c.head_dim;
  GqaSlices a;
  a.heads = c.num_heads / s.size;
  a.kv_heads = std::max<int64_t>(1, c.num_kv_heads / s.size);
  // With replication, ranks r*rep..(r+1)*rep-1 share kv head r.
  a.first_kv_head = c.num_kv_heads >= s.size ? s.rank * a.kv_heads : s.rank / (s.size / c.num_kv_heads);
  a.q = rows_of(p + "self_attn.q_proj", c.q_dim(), H, s.rank * a.heads * hd, a.heads * hd, c.qkv_bias);
  a.k = rows_of(p + "self_attn.k_proj", c.kv_dim(), H, a.first_kv_head * hd, a.kv_heads * hd, c.qkv_bias);
  a.v = rows_of(p + "self_attn.v_proj", c.kv_dim(), H, a.first_kv_head * hd, a.kv_heads * hd, c.qkv_bias);
  a.o = cols_of(p + "self_attn.o_proj", H, c.q_dim(), s.rank * a.heads * hd, a.heads * hd, c.o_bias, s);
  if (c.qk_norm) {
    a.q_norm = VectorSlice{p + "self_attn.q_norm.weight", hd};
    a.k_norm = VectorSlice{p + "self_attn.k_norm.weight", hd};
  }
  if (c.attention_sinks) a.sinks = VectorSlice{p + "self_attn.sinks", a.heads, s.rank * a.heads, c.num_heads};
  return a;
}

MlaSlices mla(const ModelConfig& c, const TpShard& s, const std::string& p) {
  const MlaConfig& m = *c.mla;
  const int64_t H = c.hidden_size, nh = c.num_heads, qk = m.qk_head_dim(), kvd = m.qk_nope_head_dim + m.v_head_dim;
  MlaSlices a;
  a.heads = nh / s.size;
  const int64_t h0 = s.rank * a.heads;
  if (m.q_lora_rank > 0) {
    a.q_a = whole(p + "self_attn.q_a_proj", m.q_lora_rank, H, m.bias);
    a.q_a_norm = VectorSlice{p + "self_attn.q_a_layernorm.weight", m.q_lora_rank};
    a.q_b = rows_of(p + "self_attn.q_b_proj", nh * qk, m.q_lora_rank, h0 * qk, a.heads * qk, false);
  } else {
    a.q = rows_of(p + "self_attn.q_proj", nh * qk, H, h0 * qk, a.heads * qk, false);
  }
  a.kv_a = whole(p + "self_attn.kv_a_proj_with_mqa", m.kv_lora_rank + m.qk_rope_head_dim, H, m.bias);
  a.kv_a_norm = {p + "self_attn.kv_a_layernorm.weight", m.kv_lora_rank};
  a.kv_b = rows_of(p + "self_attn.kv_b_proj", nh * kvd, m.kv_lora_rank, h0 * kvd, a.heads * kvd, false);
  a.o = cols_of(p + "self_attn.o_proj", H, nh * m.v_head_dim, h0 * m.v_head_dim, a.heads * m.v_head_dim, m.bias, s);
  return a;
}

MoeSlices moe(const ModelConfig& c, const TpShard& s, const std::string& p) {
  const MoeConfig& m = *c.moe;
  const std::string block = p + m.names.block;
  MoeSlices e;
  e.router = whole(block + m.names.router, m.num_experts, c.hidden_size, m.router_bias);
  e.experts = m.num_experts;
  // Required, never defaulted: a checkpoint without it would route with a zero bias silently.
  if (m.score_bias) e.score_bias = VectorSlice{block + m.names.router + ".e_score_correction_bias", m.num_experts};
  const bool whole_experts = s.moe_split == MoeSplit::Experts;
  const int64_t count = whole_experts ? m.num_experts / s.size : m.num_experts;
  e.first_expert = whole_experts ? s.rank * count : 0;
  e.routed.reserve(std::size_t(count));
  for (int64_t x = e.first_expert; x < e.first_expert + count; ++x)
    e.routed.push_back(m.names.experts != MoeTensorNames::Experts::PerExpert
                           ? stacked_expert(c, s, block, x, !whole_experts)
                                       : mlp(c, s, cat(block, "experts.", x, "."), m.expert_intermediate_size,
                                             !whole_experts, m.expert_bias, m.names));
  if (m.num_shared_experts > 0)
    e.shared = mlp(c, s, block + m.names.shared, m.expert_intermediate_size * m.num_shared_experts, true, false);
  return e;
}

}  // namespace

void check_tp_counts(const ModelConfig& c, const TpShard& s) {
  LT_CHECK(s.size >= 1 && s.rank >= 0 && s.rank < s.size, "invalid tensor-parallel rank ", s.rank, " of ", s.size);
  check_divides(c.num_heads, s, "num_attention_heads");
  if (!c.mla) {
    LT_CHECK(c.num_kv_heads % s.size == 0 || s.size % c.num_kv_heads == 0, "tensor parallel size ", s.size,
             " and num_key_value_heads ", c.num_kv_heads, " must divide one another");
  }
  bool any_dense = false;
  for (int64_t i = 0; i < c.num_layers; ++i) any_dense |= !c.is_moe_layer(i);
  if (any_dense) check_divides(c.intermediate_size, s, "intermediate_size");
  if (c.moe) {
    const MoeConfig& m = *c.moe;
    if (s.moe_split == MoeSplit::Experts)
      check_divides(m.num_experts, s, "the routed experts (--moe-split experts) of");
    else
      check_divides(m.expert_intermediate_size, s, "moe_intermediate_size (--moe-split intermediate)");
    if (m.num_shared_experts > 0)
      check_divides(m.expert_intermediate_size * m.num_shared_experts, s, "the shared experts' intermediate size");
  }
}

ModelSlices model_slices(const ModelConfig& c) {
  return {c.tensor_prefix + "embed_tokens.weight", {c.tensor_prefix + "norm.weight", c.hidden_size}};
}

LayerSlices layer_slices(const ModelConfig& c, const TpShard& s, int64_t i) {
  const std::string p = cat(c.tensor_prefix, "layers.", i, ".");
  LayerSlices l;
  l.input_norm = {p + "input_layernorm.weight", c.hidden_size};
  if (c.sandwich_norms) {  // Gemma: post_attention_layernorm norms the attention's output
    l.post_attn_norm = VectorSlice{p + "post_attention_layernorm.weight", c.hidden_size};
    l.pre_ffn_norm = {p + "pre_feedforward_layernorm.weight", c.hidden_size};
    l.post_ffn_norm = VectorSlice{p + "post_feedforward_layernorm.weight", c.hidden_size};
  } else {
    l.pre_ffn_norm = {p + "post_attention_layernorm.weight", c.hidden_size};
  }
  if (c.mla)
    l.attn = mla(c, s, p);
  else
    l.attn = gqa(c, s, p);
  if (c.is_moe_layer(i))
    l.ffn = moe(c, s, p);
  else
    l.ffn = mlp(c, s, p + c.ffn_block, c.intermediate_size, true, c.mlp_bias);
  return l;
}

}  // namespace layertap
