#include "backend/cpu/cpu_backend.hpp"

#include <cmath>
#include <cstring>

#include "backend/cpu/mla.hpp"
#include "backend/cpu/moe.hpp"
#include "backend/cpu/ops.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "model/routing_record.hpp"

namespace layertap {

namespace {
std::vector<std::optional<cpu::Rope>> layer_ropes(const ModelConfig& c) {
  const bool interleaved = c.mla ? c.mla->rope_interleave : c.rope_interleave;
  const auto layout = interleaved ? cpu::Rope::Layout::Interleaved : cpu::Rope::Layout::HalfSplit;
  LT_CHECK(int64_t(c.layers.size()) == c.num_layers, "config holds ", c.layers.size(), " layer entries for ",
           c.num_layers, " layers");
  // Each head's values in the rows RoPE is applied to: GQA's q/k heads (their first rotary_dim
  // rotate), MLA's gathered rope parts (all rotate).
  const int64_t span = c.mla ? c.mla->qk_rope_head_dim : c.head_dim;
  std::vector<std::optional<cpu::Rope>> ropes(c.layers.size());
  for (std::size_t i = 0; i < ropes.size(); ++i)
    if (c.layers[i].rope) ropes[i].emplace(*c.layers[i].rope, c.rotary_dim, layout, span);
  return ropes;
}
}  // namespace

CpuBackend::CpuBackend(ModelConfig config, ModelWeights weights, TpComm& comm)
    : c_(std::move(config)),
      w_(std::move(weights)),
      comm_(comm),
      rope_(layer_ropes(c_)),
      kept_(std::size_t(c_.num_layers)) {
  LT_CHECK(int64_t(w_.layers.size()) == c_.num_layers, "weights hold ", w_.layers.size(),
           " layers, the config ", c_.num_layers);
}

// Self-attention of one layer on this rank's heads: its share of the row-parallel o_proj.
// h: [T, H] normed input -> out: [T, H]
void CpuBackend::attention(int64_t layer, const float* h, const PackedBatch& batch, float* out) {
  const LayerWeights& l = w_.layers[std::size_t(layer)];
  KeptRows& kept = kept_[std::size_t(layer)];
  if (const auto* mla = std::get_if<MlaWeights>(&l.attn))
    cpu::mla_attention(*c_.mla, *mla, rope_[std::size_t(layer)].value(), h, batch, kept.k, out);
  else
    gqa(layer, std::get<GqaWeights>(l.attn), h, batch, kept, out);
}

// Grouped-query attention: h [T, H] -> out [T, H], this rank's heads' share of o_proj.
void CpuBackend::gqa(int64_t layer, const GqaWeights& a, const float* h, const PackedBatch& batch,
                     KeptRows& kept, float* out) {
  const LayerConfig& spec = c_.layers[std::size_t(layer)];
  const std::optional<cpu::Rope>& rope = rope_[std::size_t(layer)];
  const int64_t hd = c_.head_dim, T = batch.num_tokens();
  const std::vector<int64_t>& offsets = batch.offsets;
  std::vector<float> q(std::size_t(T * a.q.out)), k(std::size_t(T * a.k.out)), v(std::size_t(T * a.v.out));
  cpu::linear(h, T, a.q, q.data());  // [T, heads*hd]
  cpu::linear(h, T, a.k, k.data());  // [T, kv_heads*hd]
  cpu::linear(h, T, a.v, v.data());  // [T, kv_heads*hd]
  if (a.q_norm) {  // Qwen3, GLM-4.5, Gemma-3: RMSNorm over each head's hd values, before RoPE
    const float eps = float(c_.rms_norm_eps), offset = c_.norm_weight_offset;
    cpu::rms_norm(q.data(), a.q_norm->data(), q.data(), T * a.heads, hd, eps, offset);
    cpu::rms_norm(k.data(), a.k_norm->data(), k.data(), T * a.kv_heads, hd, eps, offset);
  }
  if (rope) {
    rope->apply(q.data(), a.heads, offsets, batch.first_position);
    rope->apply(k.data(), a.kv_heads, offsets, batch.first_position);
    if (c_.qk_l2_norm) {  // Llama-4: after RoPE, without a weight
      cpu::rms_norm(q.data(), nullptr, q.data(), T * a.heads, hd, float(c_.rms_norm_eps));
      cpu::rms_norm(k.data(), nullptr, k.data(), T * a.kv_heads, hd, float(c_.rms_norm_eps));
    }
  } else if (c_.nope_temperature.on) {  // Llama-4's NoPE layers
    cpu::attention_temperature(q.data(), a.q.out, offsets, batch.first_position, c_.nope_temperature);
  }
  // K and V of the sample in flight's earlier chunks in front of the batch's own.
  const cpu::KeyRows keys = cpu::with_kept_rows(kept.k, k.data(), batch, a.k.out);
  const cpu::KeyRows values = cpu::with_kept_rows(kept.v, v.data(), batch, a.v.out);
  std::vector<float> ctx(std::size_t(T * a.q.out));  // [T, heads*hd]
  cpu::causal_attention(q.data(), offsets, keys.rows, values.rows, keys.offsets, ctx.data(),
                        {a.heads, a.kv_heads, hd, hd, c_.attention_scale(), spec.window,
                         a.sinks ? a.sinks->data() : nullptr, spec.chunk});
  kept.k = cpu::rows_to_keep(keys, batch, a.k.out);
  kept.v = cpu::rows_to_keep(values, batch, a.v.out);
  cpu::linear(ctx.data(), T, a.o, out);  // [T, H] partial sum over this rank's heads
}

// The FFN part on this rank's share (dense: its intermediate slice; MoE: its experts and its slice
// of the shared experts). h, out: [T, H]
void CpuBackend::ffn(int64_t layer, const float* h, int64_t T, float* out) {
  const LayerWeights& l = w_.layers[std::size_t(layer)];
  if (const auto* moe = std::get_if<MoeWeights>(&l.ffn)) {
    std::size_t m = 0;  // this layer's place among the MoE layers
    for (int64_t i = 0; i < layer; ++i) m += c_.is_moe_layer(i);
    const int64_t H = c_.hidden_size;
    cpu::Routing r;
    if (replay_.empty()) {
      r = cpu::route(*c_.moe, *moe, h, T, H);
    } else {
      LT_CHECK(m < replay_.size() && int64_t(replay_[m].size()) == T * c_.moe->experts_per_token,
               "replayed routing does not cover MoE layer ", layer, " of a batch of ", T, " tokens");
      r = cpu::route_given(*c_.moe, *moe, h, T, H, replay_[m].data());
      if (implausible_.empty())
        if (const std::string why = cpu::implausible_choice(*c_.moe, *moe, h, T, H, replay_[m].data(), replay_bound_);
            !why.empty())
          implausible_ = cat("layer ", layer, ", ", why);
    }
    cpu::moe_ffn(*moe, r, h, T, H, out, c_.activation, c_.moe->weight_input);
    routing_[std::size_t(layer)] = std::move(r);
  } else {
    cpu::mlp(std::get<MlpWeights>(l.ffn), h, T, out, c_.activation);
  }
}

namespace {
// Copies a float32 [T, H] state into the requested storage type.
std::vector<std::byte> store(const std::vector<float>& x, DType dtype) {
  std::vector<std::byte> out(x.size() * dtype_size(dtype));
  if (dtype == DType::F32) {
    std::memcpy(out.data(), x.data(), out.size());
  } else {
    LT_CHECK(dtype == DType::BF16, "cpu backend: cannot store states as ", dtype_name(dtype));
    auto* o = reinterpret_cast<uint16_t*>(out.data());
    for (std::size_t i = 0; i < x.size(); ++i) o[i] = float_to_bf16(x[i]);
  }
  return out;
}
}  // namespace

std::vector<std::vector<std::byte>> CpuBackend::forward(const PackedBatch& batch, const CapturePlan& plan,
                                                        DType dtype) {
  const int64_t T = batch.num_tokens(), H = c_.hidden_size, L = c_.num_layers;
  LT_CHECK(plan.num_layers == L, "capture plan resolved for ", plan.num_layers, " layers, model has ", L);
  LT_CHECK(batch.num_samples() > 0 && batch.offsets.front() == 0 && batch.offsets.back() == T,
           "packed batch offsets do not span its ", T, " tokens");
  LT_CHECK(batch.first_position == kept_positions_, "chunked prefill: the batch continues a sample at position ",
           batch.first_position, " but ", kept_positions_, " positions of the sample in flight are kept");
  const bool capturing = comm_.rank() == 0;
  std::vector<std::vector<std::byte>> states(capturing ? plan.points.size() : 0);
  auto capture = [&](int64_t id, const std::vector<float>& x) {
    if (!capturing) return;
    for (std::size_t p = 0; p < plan.points.size(); ++p)
      if (plan.points[p].id == id) states[p] = store(x, dtype);
  };

  routing_.assign(std::size_t(L), cpu::Routing{});
  implausible_.clear();
  std::vector<float> x(std::size_t(T * H));  // the residual stream [T, H]
  for (int64_t t = 0; t < T; ++t) {
    const int32_t id = batch.tokens[std::size_t(t)];
    LT_CHECK(id >= 0 && id < c_.vocab_size, "token id ", id, " at batch position ", t, " is outside the vocabulary of ",
             c_.vocab_size);
    std::memcpy(&x[std::size_t(t * H)], &w_.embed[std::size_t(id) * std::size_t(H)], std::size_t(H) * sizeof(float));
  }
  if (c_.embed_scale != 1)
    for (float& v : x) v *= c_.embed_scale;
  std::vector<float> h(x.size()), delta(x.size());
  const float eps = float(c_.rms_norm_eps), offset = c_.norm_weight_offset;
  // The end of a sub-layer: delta, this rank's share, summed over the group; normed under
  // sandwich norms (Gemma-3); added to x.
  const auto residual_add = [&](const std::optional<std::vector<float>>& post_norm) {
    comm_.all_reduce_sum(delta.data(), delta.size());
    if (post_norm) cpu::rms_norm(delta.data(), post_norm->data(), delta.data(), T, H, eps, offset);
    for (std::size_t j = 0; j < x.size(); ++j) x[j] += delta[j];
  };
  for (int64_t i = 0; i < L; ++i) {
    capture(i, x);
    const LayerWeights& l = w_.layers[std::size_t(i)];
    cpu::rms_norm(x.data(), l.input_norm.data(), h.data(), T, H, eps, offset);
    attention(i, h.data(), batch, delta.data());
    residual_add(l.post_attn_norm);
    cpu::rms_norm(x.data(), l.pre_ffn_norm.data(), h.data(), T, H, eps, offset);
    ffn(i, h.data(), T, delta.data());
    residual_add(l.post_ffn_norm);
  }
  capture(L, x);
  cpu::rms_norm(x.data(), w_.final_norm.data(), h.data(), T, H, eps, offset);
  capture(L + 1, h);
  const int64_t last = batch.offsets[batch.offsets.size() - 2];  // the last segment's first row
  kept_positions_ = batch.last_continues ? T - last + (batch.num_samples() == 1 ? batch.first_position : 0) : 0;
  replay_.clear();
  last_tokens_ = T;
  return states;
}

std::vector<int16_t> CpuBackend::routed_experts() const {
  if (comm_.rank() != 0 || !c_.moe || routing_.empty()) return {};
  std::vector<std::vector<int32_t>> per_layer;  // [M][T * k]
  for (const int64_t i : moe_layer_ids(c_)) per_layer.push_back(routing_[std::size_t(i)].experts);
  return token_major_routing(per_layer, last_tokens_, c_.moe->experts_per_token);
}

void CpuBackend::replay_routing(std::vector<int16_t> experts, double state_bound) {
  LT_CHECK(c_.moe.has_value(), "cpu backend: a dense model has no routing to replay");
  replay_ = layer_major_routing(experts, int64_t(moe_layer_ids(c_).size()), c_.moe->experts_per_token);
  replay_bound_ = state_bound;
}

}  // namespace layertap
