#include "model/weights.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace layertap {

void check_tp_divisibility(const ModelConfig& c, const TpShard& s) {
  LT_CHECK(s.size >= 1 && s.rank >= 0 && s.rank < s.size, "invalid tensor-parallel rank ", s.rank, " of ", s.size);
  LT_CHECK(c.num_heads % s.size == 0, "tensor parallel size ", s.size, " does not divide num_attention_heads ",
           c.num_heads);
  // Fewer kv heads than ranks: each kv head is replicated on size/num_kv_heads ranks (as Megatron
  // and vLLM do), which needs the one to divide the other.
  LT_CHECK(c.num_kv_heads % s.size == 0 || s.size % c.num_kv_heads == 0, "tensor parallel size ", s.size,
           " and num_key_value_heads ", c.num_kv_heads, " must divide one another");
  LT_CHECK(c.intermediate_size % s.size == 0, "tensor parallel size ", s.size,
           " does not divide intermediate_size ", c.intermediate_size);
}

namespace {

// Column-parallel: rows [row0, row0 + rows) of a [full_out, in] weight (and bias).
Linear column_parallel(const Checkpoint& ck, const std::string& prefix, int64_t full_out, int64_t in,
                       int64_t row0, int64_t rows, bool bias) {
  Linear l;
  l.out = rows;
  l.in = in;
  l.w = ck.read_rows(prefix + ".weight", {full_out, in}, row0, rows);
  if (bias) {
    const std::vector<float> b = ck.read(prefix + ".bias", {full_out});
    l.b.assign(b.begin() + row0, b.begin() + row0 + rows);
  }
  return l;
}

// Row-parallel: this rank's columns of an [out, full_in] weight. The bias is added once after the
// all-reduce, so only rank 0 keeps it.
Linear row_parallel(const Checkpoint& ck, const std::string& prefix, int64_t out, int64_t full_in,
                    const TpShard& s, bool bias) {
  Linear l;
  l.out = out;
  l.in = full_in / s.size;
  l.w = ck.read_cols(prefix + ".weight", {out, full_in}, s.rank * l.in, l.in);
  if (bias && s.rank == 0) l.b = ck.read(prefix + ".bias", {out});
  return l;
}

}  // namespace

ModelWeights load_weights(const Checkpoint& ck, const ModelConfig& c, const TpShard& s) {
  check_tp_divisibility(c, s);
  const int64_t H = c.hidden_size, I = c.intermediate_size, hd = c.head_dim;
  ModelWeights m;
  m.embed = ck.read("model.embed_tokens.weight", {c.vocab_size, H});
  m.final_norm = ck.read("model.norm.weight", {H});
  m.layers.resize(std::size_t(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = cat("model.layers.", i, ".");
    LayerWeights& l = m.layers[std::size_t(i)];
    l.input_norm = ck.read(p + "input_layernorm.weight", {H});
    l.post_attn_norm = ck.read(p + "post_attention_layernorm.weight", {H});
    AttentionWeights& a = l.attn;
    a.heads = c.num_heads / s.size;
    a.kv_heads = std::max<int64_t>(1, c.num_kv_heads / s.size);
    // First kv head of this rank; with replication, ranks r*rep..(r+1)*rep-1 share kv head r.
    const int64_t kv0 = c.num_kv_heads >= s.size ? s.rank * a.kv_heads : s.rank / (s.size / c.num_kv_heads);
    a.q = column_parallel(ck, p + "self_attn.q_proj", c.q_dim(), H, s.rank * a.heads * hd, a.heads * hd, c.qkv_bias);
    a.k = column_parallel(ck, p + "self_attn.k_proj", c.kv_dim(), H, kv0 * hd, a.kv_heads * hd, c.qkv_bias);
    a.v = column_parallel(ck, p + "self_attn.v_proj", c.kv_dim(), H, kv0 * hd, a.kv_heads * hd, c.qkv_bias);
    a.o = row_parallel(ck, p + "self_attn.o_proj", H, c.q_dim(), s, c.o_bias);
    if (c.qk_norm) {
      a.q_norm = ck.read(p + "self_attn.q_norm.weight", {hd});
      a.k_norm = ck.read(p + "self_attn.k_norm.weight", {hd});
    }
    const int64_t i_local = I / s.size;
    l.mlp.gate = column_parallel(ck, p + "mlp.gate_proj", I, H, s.rank * i_local, i_local, c.mlp_bias);
    l.mlp.up = column_parallel(ck, p + "mlp.up_proj", I, H, s.rank * i_local, i_local, c.mlp_bias);
    l.mlp.down = row_parallel(ck, p + "mlp.down_proj", H, I, s, c.mlp_bias);
  }
  return m;
}

}  // namespace layertap
