#include "model/weights.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/failpoint.hpp"
#include "core/stop_request.hpp"
#include "model/linear_reader.hpp"

namespace layertap {

MoeSplit parse_moe_split(const std::string& s) {
  if (s == "experts") return MoeSplit::Experts;
  if (s == "intermediate") return MoeSplit::Intermediate;
  LT_FAIL("--moe-split must be 'experts' or 'intermediate', got '", s, "'");
}

const char* moe_split_name(MoeSplit s) { return s == MoeSplit::Experts ? "experts" : "intermediate"; }

namespace {

std::string layer_prefix(const ModelConfig& c, int64_t i) { return cat(c.tensor_prefix, "layers.", i, "."); }

// Slice boundaries a quantized format can be cut at, checked per module before any weight is read:
// a column-parallel slice cuts rows, a row-parallel slice cuts columns.
class SliceCheck {
 public:
  SliceCheck(const ModelConfig& c, const TpShard& s) : c_(c), s_(s) {}

  void rows(const std::string& module, int64_t local_rows) const {
    if (s_.size > 1 && c_.quant.method == QuantConfig::Method::Fp8Block)
      LT_CHECK(local_rows % c_.quant.block_rows == 0, "tensor parallel size ", s_.size, " gives ", module,
               " slices of ", local_rows, " rows, which do not align with the FP8 block rows (",
               c_.quant.block_rows, ")");
  }
  void cols(const std::string& module, int64_t local_cols) const {
    if (s_.size == 1) return;
    if (c_.quant.method == QuantConfig::Method::Fp8Block)
      LT_CHECK(local_cols % c_.quant.block_cols == 0, "tensor parallel size ", s_.size, " gives ", module,
               " slices of ", local_cols, " columns, which do not align with the FP8 block columns (",
               c_.quant.block_cols, ")");
    if (c_.quant.int4_packed(module))
      LT_CHECK(local_cols % c_.quant.group_size == 0, "tensor parallel size ", s_.size, " gives ", module,
               " slices of ", local_cols, " input columns, which do not align with its INT4 groups of ",
               c_.quant.group_size);
  }
  // A SwiGLU MLP sliced along its intermediate size I.
  void mlp(const std::string& base, int64_t local_inter) const {
    rows(base + "gate_proj", local_inter);
    rows(base + "up_proj", local_inter);
    cols(base + "down_proj", local_inter);
  }

 private:
  const ModelConfig& c_;
  const TpShard& s_;
};

void check_divides(int64_t n, const TpShard& s, const char* what) {
  LT_CHECK(n % s.size == 0, "tensor parallel size ", s.size, " does not divide ", what, " ", n);
}

}  // namespace

void check_tp_divisibility(const ModelConfig& c, const TpShard& s) {
  LT_CHECK(s.size >= 1 && s.rank >= 0 && s.rank < s.size, "invalid tensor-parallel rank ", s.rank, " of ", s.size);
  check_divides(c.num_heads, s, "num_attention_heads");
  if (!c.mla) {
    // Fewer kv heads than ranks: each kv head is replicated on size/num_kv_heads ranks (as Megatron
    // and vLLM do), which needs the one to divide the other.
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

  const SliceCheck check(c, s);
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = layer_prefix(c, i);
    const int64_t heads = c.num_heads / s.size;
    if (c.mla) {
      const MlaConfig& a = *c.mla;
      check.rows(p + (a.q_lora_rank ? "self_attn.q_b_proj" : "self_attn.q_proj"), heads * a.qk_head_dim());
      check.rows(p + "self_attn.kv_b_proj", heads * (a.qk_nope_head_dim + a.v_head_dim));
      check.cols(p + "self_attn.o_proj", heads * a.v_head_dim);
    } else {
      const int64_t kv_heads = std::max<int64_t>(1, c.num_kv_heads / s.size);
      check.rows(p + "self_attn.q_proj", heads * c.head_dim);
      check.rows(p + "self_attn.k_proj", kv_heads * c.head_dim);
      check.rows(p + "self_attn.v_proj", kv_heads * c.head_dim);
      check.cols(p + "self_attn.o_proj", heads * c.head_dim);
    }
    if (!c.is_moe_layer(i)) {
      check.mlp(p + "mlp.", c.intermediate_size / s.size);
      continue;
    }
    const MoeConfig& m = *c.moe;
    if (s.moe_split == MoeSplit::Intermediate)
      for (int64_t e = 0; e < m.num_experts; ++e)
        check.mlp(cat(p, "mlp.experts.", e, "."), m.expert_intermediate_size / s.size);
    if (m.num_shared_experts > 0)
      check.mlp(p + "mlp.shared_experts.", m.expert_intermediate_size * m.num_shared_experts / s.size);
  }
}

namespace {

// Reads this rank's slices of one model's modules.
class ShardLoader {
 public:
  ShardLoader(const Checkpoint& ck, const ModelConfig& c, const TpShard& s)
      : ck_(ck), reader_(ck, c.quant), c_(c), s_(s) {}

  // Rows [row0, row0 + rows) of a [full_out, in] weight (and bias): column-parallel, or the whole
  // matrix when replicated.
  Linear column(const std::string& module, int64_t full_out, int64_t in, int64_t row0, int64_t rows, bool bias) const {
    Linear l;
    l.out = rows;
    l.in = in;
    l.w = reader_.read(module, full_out, in, {row0, rows, 0, in});
    if (bias) {
      const std::vector<float> b = ck_.read(module + ".bias", {full_out});
      l.b.assign(b.begin() + row0, b.begin() + row0 + rows);
    }
    return l;
  }
  Linear replicated(const std::string& module, int64_t out, int64_t in, bool bias) const {
    return column(module, out, in, 0, out, bias);
  }
  // Columns [col0, col0 + cols) of an [out, full_in] weight: row-parallel. The bias is added once
  // after the all-reduce, so only rank 0 keeps it.
  Linear row(const std::string& module, int64_t out, int64_t full_in, int64_t col0, int64_t cols, bool bias) const {
    Linear l;
    l.out = out;
    l.in = cols;
    l.w = reader_.read(module, out, full_in, {0, out, col0, cols});
    if (bias && s_.rank == 0) l.b = ck_.read(module + ".bias", {out});
    return l;
  }

  AttentionWeights gqa(const std::string& p) const {
    const int64_t H = c_.hidden_size, hd = c_.head_dim;
    AttentionWeights a;
    a.heads = c_.num_heads / s_.size;
    a.kv_heads = std::max<int64_t>(1, c_.num_kv_heads / s_.size);
    // First kv head of this rank; with replication, ranks r*rep..(r+1)*rep-1 share kv head r.
    const int64_t kv0 = c_.num_kv_heads >= s_.size ? s_.rank * a.kv_heads : s_.rank / (s_.size / c_.num_kv_heads);
    a.q = column(p + "self_attn.q_proj", c_.q_dim(), H, s_.rank * a.heads * hd, a.heads * hd, c_.qkv_bias);
    a.k = column(p + "self_attn.k_proj", c_.kv_dim(), H, kv0 * hd, a.kv_heads * hd, c_.qkv_bias);
    a.v = column(p + "self_attn.v_proj", c_.kv_dim(), H, kv0 * hd, a.kv_heads * hd, c_.qkv_bias);
    a.o = row(p + "self_attn.o_proj", H, c_.q_dim(), s_.rank * a.heads * hd, a.heads * hd, c_.o_bias);
    if (c_.qk_norm) {
      a.q_norm = ck_.read(p + "self_attn.q_norm.weight", {hd});
      a.k_norm = ck_.read(p + "self_attn.k_norm.weight", {hd});
    }
    return a;
  }

  // MLA: heads split (q_b/q_proj and kv_b by head rows, o_proj by head columns); the latent
  // projections and their norms replicated.
  MlaWeights mla(const std::string& p) const {
    const MlaConfig& m = *c_.mla;
    const int64_t H = c_.hidden_size, nh = c_.num_heads, qk = m.qk_head_dim(), kvd = m.qk_nope_head_dim + m.v_head_dim;
    MlaWeights a;
    a.heads = nh / s_.size;
    const int64_t h0 = s_.rank * a.heads;
    if (m.q_lora_rank > 0) {
      a.q_a = replicated(p + "self_attn.q_a_proj", m.q_lora_rank, H, m.bias);
      a.q_a_norm = ck_.read(p + "self_attn.q_a_layernorm.weight", {m.q_lora_rank});
      a.q_b = column(p + "self_attn.q_b_proj", nh * qk, m.q_lora_rank, h0 * qk, a.heads * qk, false);
    } else {
      a.q = column(p + "self_attn.q_proj", nh * qk, H, h0 * qk, a.heads * qk, false);
    }
    a.kv_a = replicated(p + "self_attn.kv_a_proj_with_mqa", m.kv_lora_rank + m.qk_rope_head_dim, H, m.bias);
    a.kv_a_norm = ck_.read(p + "self_attn.kv_a_layernorm.weight", {m.kv_lora_rank});
    a.kv_b = column(p + "self_attn.kv_b_proj", nh * kvd, m.kv_lora_rank, h0 * kvd, a.heads * kvd, false);
    a.o = row(p + "self_attn.o_proj", H, nh * m.v_head_dim, h0 * m.v_head_dim, a.heads * m.v_head_dim, m.bias);
    return a;
  }

  // A SwiGLU MLP of intermediate size `inter`, sliced over the group when `sliced`.
  MlpWeights mlp(const std::string& base, int64_t inter, bool sliced, bool bias) const {
    const int64_t H = c_.hidden_size;
    const int64_t local = sliced ? inter / s_.size : inter, i0 = sliced ? s_.rank * local : 0;
    MlpWeights m;
    m.gate = column(base + "gate_proj", inter, H, i0, local, bias);
    m.up = column(base + "up_proj", inter, H, i0, local, bias);
    m.down = row(base + "down_proj", H, inter, i0, local, bias);
    return m;
  }

  MoeWeights moe(const std::string& p) const {
    const MoeConfig& m = *c_.moe;
    const int64_t H = c_.hidden_size, E = m.num_experts, I = m.expert_intermediate_size;
    MoeWeights w;
    w.router.out = E;
    w.router.in = H;
    w.router.w = ck_.read(p + "mlp.gate.weight", {E, H});
    // Required, never defaulted: a checkpoint without it would route with a zero bias silently.
    if (m.score_bias) w.score_bias = ck_.read(p + "mlp.gate.e_score_correction_bias", {E});
    const bool whole = s_.moe_split == MoeSplit::Experts;
    const int64_t count = whole ? E / s_.size : E;
    w.first_expert = whole ? s_.rank * count : 0;
    for (int64_t e = w.first_expert; e < w.first_expert + count; ++e)
      w.experts.push_back(mlp(cat(p, "mlp.experts.", e, "."), I, !whole, false));
    if (m.num_shared_experts > 0) {
      w.has_shared = true;
      w.shared = mlp(p + "mlp.shared_experts.", I * m.num_shared_experts, true, false);
    }
    return w;
  }

 private:
  const Checkpoint& ck_;
  const LinearReader reader_;
  const ModelConfig& c_;
  const TpShard& s_;
};

}  // namespace

ModelWeights load_weights(const Checkpoint& ck, const ModelConfig& c, const TpShard& s) {
  check_tp_divisibility(c, s);
  const ShardLoader load(ck, c, s);
  const int64_t H = c.hidden_size;
  ModelWeights m;
  m.embed = ck.read(c.tensor_prefix + "embed_tokens.weight", {c.vocab_size, H});
  m.final_norm = ck.read(c.tensor_prefix + "norm.weight", {H});
  m.layers.resize(std::size_t(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    failpoint("load-layer");
    stop_point("loading the weights");
    const std::string p = layer_prefix(c, i);
    LayerWeights& l = m.layers[std::size_t(i)];
    l.input_norm = ck.read(p + "input_layernorm.weight", {H});
    l.post_attn_norm = ck.read(p + "post_attention_layernorm.weight", {H});
    if (c.mla)
      l.attn = load.mla(p);
    else
      l.attn = load.gqa(p);
    if (c.is_moe_layer(i))
      l.ffn = load.moe(p);
    else
      l.ffn = load.mlp(p + "mlp.", c.intermediate_size, true, c.mlp_bias);
  }
  return m;
}

int64_t host_weight_bytes(const ModelConfig& c, const TpShard& s) {
  // Mirrors ShardLoader. Counted in double: a hostile config's total can pass int64 (4096 layers of
  // 65536 experts), and below 2^53 elements (every real model) the count is exact.
  const double H = double(c.hidden_size);
  const int64_t T = s.size;
  const bool rank0 = s.rank == 0;  // row-parallel biases are kept by rank 0 only
  const auto mlp = [&](int64_t inter, bool sliced, bool bias) {
    const double local = double(sliced ? inter / T : inter);
    return 3 * local * H + (bias ? 2 * local + (rank0 ? H : 0) : 0);
  };
  double n = double(c.vocab_size) * H + H;  // embedding, final norm
  for (int64_t i = 0; i < c.num_layers; ++i) {
    n += 2 * H;  // the two norms
    if (c.mla) {
      const MlaConfig& m = *c.mla;
      const double heads = double(c.num_heads / T), qk = double(m.qk_head_dim()),
                   kvd = double(m.qk_nope_head_dim + m.v_head_dim), q_lora = double(m.q_lora_rank),
                   kv_lora = double(m.kv_lora_rank), kv_a = double(m.kv_lora_rank + m.qk_rope_head_dim);
      if (m.q_lora_rank > 0)
        n += q_lora * H + (m.bias ? q_lora : 0) + q_lora + heads * qk * q_lora;
      else
        n += heads * qk * H;
      n += kv_a * H + (m.bias ? kv_a : 0) + kv_lora + heads * kvd * kv_lora;
      n += H * heads * double(m.v_head_dim) + (m.bias && rank0 ? H : 0);
    } else {
      const double heads = double(c.num_heads / T), kv_heads = double(std::max<int64_t>(1, c.num_kv_heads / T)),
                   hd = double(c.head_dim);
      n += (heads + 2 * kv_heads) * hd * H + H * heads * hd;
      if (c.qkv_bias) n += (heads + 2 * kv_heads) * hd;
      if (c.o_bias && rank0) n += H;
      if (c.qk_norm) n += 2 * hd;
    }
    if (c.is_moe_layer(i)) {
      const MoeConfig& m = *c.moe;
      const bool whole = s.moe_split == MoeSplit::Experts;
      n += double(m.num_experts) * H + (m.score_bias ? double(m.num_experts) : 0);
      n += double(whole ? m.num_experts / T : m.num_experts) * mlp(m.expert_intermediate_size, !whole, false);
      if (m.num_shared_experts > 0) n += mlp(m.expert_intermediate_size * m.num_shared_experts, true, false);
    } else {
      n += mlp(c.intermediate_size, true, c.mlp_bias);
    }
  }
  const double bytes = n * double(sizeof(float));
  return bytes < 0x1p62 ? int64_t(bytes) : int64_t(1) << 62;
}

}  // namespace layertap
