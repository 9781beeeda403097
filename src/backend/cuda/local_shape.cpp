#include "backend/cuda/local_shape.hpp"

#include <algorithm>

#include "backend/route_params.hpp"
#include "core/error.hpp"
#include "model/packed_weights.hpp"

namespace layertap::cuda {

std::string unsupported_parts(const ModelConfig& c) {

  if (c.mla) {
    const MlaConfig& m = *c.mla;
    if (m.qk_head_dim() > 512 || m.v_head_dim > 512)
      return cat("MLA heads of qk dim ", m.qk_head_dim(), " and v dim ", m.v_head_dim,
                 " (the attention kernels take up to 512)");
    if (m.qk_rope_head_dim > 256 || m.qk_rope_head_dim % 2 != 0)
      return cat("an MLA rope dim of ", m.qk_rope_head_dim, " (the rope kernel takes even dims up to 256)");
  }
  if (c.moe) {
    const MoeConfig& m = *c.moe;
    if (m.experts_per_token > 64) return cat("MoE top-", m.experts_per_token, " routing (the kernels take up to 64)");
    if (m.routing == MoeConfig::Routing::SigmoidGroupedTopk && m.n_group > kernels::kMaxRouteGroups)
      return cat("MoE routing over ", m.n_group, " groups (the router kernel takes up to ", kernels::kMaxRouteGroups,
                 ")");
  }
  return "";
}

std::int64_t LocalShape::moe_layers_before(std::int64_t layer) const {
  return std::int64_t(std::count(moe_layer.begin(), moe_layer.begin() + layer, true));
}

bool LocalShape::any_moe() const { return std::find(moe_layer.begin(), moe_layer.end(), true) != moe_layer.end(); }

bool LocalShape::any_dense_ffn() const {
  return std::find(moe_layer.begin(), moe_layer.end(), false) != moe_layer.end();
}

std::int64_t LocalShape::max_routed_rows(std::int64_t tokens) const {
  return any_moe() ? tokens * std::min(top_k, local_experts) : 0;
}

std::string LocalShape::module(std::int64_t layer, const std::string& suffix) const {
  return cat(prefix, "layers.", layer, ".", suffix);
}

LinearStorage LocalShape::storage(const std::string& name) const {
  const auto it = packed.find(name);
  return it == packed.end() ? LinearStorage{} : it->second;
}

namespace {

kernels::ScaleType scale_type_of(DType d) {
  switch (d) {
    case DType::BF16: return kernels::ScaleType::BF16;
    case DType::F16: return kernels::ScaleType::F16;
    default: return kernels::ScaleType::F32;
  }
}

}  // namespace

LocalShape LocalShape::of(const ModelConfig& c, const TpShard& s, PackedSource packed, const Checkpoint* ckpt) {
  const std::string missing = unsupported_parts(c);
  LT_CHECK(missing.empty(), "cuda backend: ", c.architecture, " needs ", missing,
           ", which the CUDA backend does not implement; use --backend cpu");
  LT_CHECK(packed != PackedSource::Checkpoint || ckpt != nullptr, "cuda backend: packed weights from a checkpoint "
           "need the checkpoint");
  check_tp_divisibility(c, s);
  LocalShape l;
  l.hidden = c.hidden_size;
  l.layers = c.num_layers;
  l.vocab = c.vocab_size;
  l.head_dim = c.head_dim;
  l.qkv_bias = c.qkv_bias;
  l.mlp_bias = c.mlp_bias;
  l.qk_norm = c.qk_norm;
  l.sinks = c.attention_sinks;
  l.prefix = c.tensor_prefix;
  l.tp_rank = s.rank;
  l.config = c;
  l.shard = s;
  if (c.mla) {
    const MlaConfig& m = *c.mla;
    l.mla = true;
    l.q_lora = m.q_lora_rank;
    l.kv_lora = m.kv_lora_rank;
    l.nope = m.qk_nope_head_dim;
    l.rope_dim = m.qk_rope_head_dim;
    l.v_dim = m.v_head_dim;
    l.rope_interleave = m.rope_interleave;
    l.mla_bias = m.bias;
    l.softmax_scale = float(m.softmax_scale);
  }
  l.moe_layer.assign(std::size_t(c.num_layers), false);
  for (std::int64_t i = 0; i < c.num_layers; ++i) l.moe_layer[std::size_t(i)] = c.is_moe_layer(i);
  if (l.any_moe()) {
    const MoeConfig& m = *c.moe;
    const bool whole = s.moe_split == MoeSplit::Experts;
    l.moe_whole = whole;
    l.experts = m.num_experts;
    l.top_k = m.experts_per_token;
    l.score_bias = m.score_bias;
    l.router_bias = m.router_bias;
    l.experts_interleaved = m.names.experts == MoeTensorNames::Experts::StackedInterleaved;
    l.route = route_params(m);
  }
  l.block_rows = c.quant.block_rows;
  l.block_cols = c.quant.block_cols;
  l.group = c.quant.group_size;
  // The rank's counts, read off its layout (every layer of a kind holds the same shapes).
  const LayerSlices first = l.layer_slices(0);
  if (const auto* g = std::get_if<GqaSlices>(&first.attn)) {
    l.heads = g->heads;
    l.kv_heads = g->kv_heads;
    l.o_bias = g->o.bias;
  } else {
    const MlaSlices& a = std::get<MlaSlices>(first.attn);
    l.heads = l.kv_heads = a.heads;
    l.o_bias = a.o.bias;
  }
  bool dense_seen = false, moe_seen = false;
  for (std::int64_t i = 0; i < c.num_layers && !(dense_seen && moe_seen); ++i) {
    if (l.moe_layer[std::size_t(i)] ? moe_seen : dense_seen) continue;
    const LayerSlices ls = i == 0 ? first : l.layer_slices(i);
    if (const auto* d = std::get_if<MlpSlices>(&ls.ffn)) {
      dense_seen = true;
      l.inter = intermediate(*d);
      l.down_bias = d->down.bias;
    } else {
      moe_seen = true;
      const MoeSlices& e = std::get<MoeSlices>(ls.ffn);
      l.local_experts = std::int64_t(e.routed.size());
      l.first_expert = e.first_expert;
      l.expert_inter = e.routed.empty() ? 0 : intermediate(e.routed.front());
      l.shared_inter = e.shared ? e.shared->gate.rows() : 0;
    }
  }
  if (packed != PackedSource::None && c.quant.method != QuantConfig::Method::None) {
    for (std::int64_t i = 0; i < c.num_layers; ++i) {
      l.layer_slices(i).for_each_linear([&](const LinearSlice& slice) {
        const std::string& name = slice.module;
        LinearStorage st;
        if (packed == PackedSource::Checkpoint) {
          const auto f = packed_format(*ckpt, c.quant, name, slice.expert);
          if (!f) return;
          st.kind = *f == PackedLinear::Format::Fp8Block ? LinearStorage::Kind::Fp8Block : LinearStorage::Kind::Int4Group;
          if (*f == PackedLinear::Format::Mxfp4)
            st.scale = kernels::ScaleType::E8M0;
          else if (st.kind == LinearStorage::Kind::Int4Group)
            st.scale = scale_type_of(ckpt->info(name + ".weight_scale").dtype);
        } else if (c.quant.method == QuantConfig::Method::Mxfp4) {
          if (slice.expert < 0) return;  // only the stacked experts are MXFP4
          st = {LinearStorage::Kind::Int4Group, kernels::ScaleType::E8M0};
        } else if (c.quant.method == QuantConfig::Method::Int4Group) {
          if (!c.quant.int4_packed(name)) return;
          st.kind = LinearStorage::Kind::Int4Group;
        } else {
          st.kind = LinearStorage::Kind::Fp8Block;
        }
        l.packed.emplace(name, st);
      });
    }
  }
  return l;
}

std::int64_t LocalShape::layer_matmul_params() const {
  std::int64_t n = 0;
  for (std::int64_t i = 0; i < layers; ++i) {
    if (mla) {
      const std::int64_t qk = mla_qk();
      n += q_lora > 0 ? q_lora * hidden + heads * qk * q_lora : heads * qk * hidden;
      n += (kv_lora + rope_dim) * hidden + heads * (nope + v_dim) * kv_lora + hidden * heads * v_dim;
    } else {
      n += qkv_dim() * hidden + hidden * q_dim();
    }
    if (!moe_layer.empty() && moe_layer[std::size_t(i)]) {
      n += experts * hidden;  // the router (replicated: every rank multiplies all of it)
      // Routed, on average: top_k experts per token, this rank's share of them (whole experts:
      // local/E of the choices at the full size; intermediate split: every choice at its slice).
      n += top_k * 3 * expert_inter * hidden * local_experts / experts;
      n += 3 * shared_inter * hidden;
    } else {
      n += 3 * inter * hidden;
    }
  }
  return n;
}

}  // namespace layertap::cuda
