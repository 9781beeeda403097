#include "backend/cpu/cpu_backend.hpp"

#include <cstring>

#include "backend/cpu/mla.hpp"
#include "backend/cpu/moe.hpp"
#include "backend/cpu/ops.hpp"
#include "core/error.hpp"

namespace layertap {

namespace {
cpu::Rope::Layout rope_layout(const ModelConfig& c) {
  return c.mla && c.mla->rope_interleave ? cpu::Rope::Layout::Interleaved : cpu::Rope::Layout::HalfSplit;
}
}  // namespace

CpuBackend::CpuBackend(ModelConfig config, ModelWeights weights, TpComm& comm)
    : c_(std::move(config)), w_(std::move(weights)), comm_(comm), rope_(c_.rope, c_.head_dim, rope_layout(c_)) {
  LT_CHECK(int64_t(w_.layers.size()) == c_.num_layers, "weights hold ", w_.layers.size(),
           " layers, the config ", c_.num_layers);
}

// Self-attention of one layer on this rank's heads, then the all-reduce of the row-parallel o_proj.
// h: [T, H] normed input -> out: [T, H]
void CpuBackend::attention(const LayerWeights& l, const float* h, int64_t T, const std::vector<int64_t>& offsets,
                           int64_t window, float* out) {
  if (const auto* mla = std::get_if<MlaWeights>(&l.attn))
    cpu::mla_attention(*c_.mla, *mla, rope_, h, T, offsets, out);
  else
    gqa(std::get<AttentionWeights>(l.attn), h, T, offsets, window, out);
  comm_.all_reduce_sum(out, std::size_t(T * c_.hidden_size));
}

// Grouped-query attention: h [T, H] -> out [T, H], this rank's heads' share of o_proj.
void CpuBackend::gqa(const AttentionWeights& a, const float* h, int64_t T, const std::vector<int64_t>& offsets,
                     int64_t window, float* out) {
  const int64_t hd = c_.head_dim;
  std::vector<float> q(std::size_t(T * a.q.out)), k(std::size_t(T * a.k.out)), v(std::size_t(T * a.v.out));
  cpu::linear(h, T, a.q, q.data());  // [T, heads*hd]
  cpu::linear(h, T, a.k, k.data());  // [T, kv_heads*hd]
  cpu::linear(h, T, a.v, v.data());  // [T, kv_heads*hd]
  if (!a.q_norm.empty()) {  // Qwen3: RMSNorm over each head's hd values, before RoPE
    const float eps = float(c_.rms_norm_eps);
    cpu::rms_norm(q.data(), a.q_norm.data(), q.data(), T * a.heads, hd, eps);
    cpu::rms_norm(k.data(), a.k_norm.data(), k.data(), T * a.kv_heads, hd, eps);
  }
  rope_.apply(q.data(), a.heads, offsets);
  rope_.apply(k.data(), a.kv_heads, offsets);
  std::vector<float> ctx(std::size_t(T * a.q.out));  // [T, heads*hd]
  cpu::causal_attention(q.data(), k.data(), v.data(), ctx.data(), offsets, a.heads, a.kv_heads, hd, window);
  cpu::linear(ctx.data(), T, a.o, out);  // [T, H] partial sum over this rank's heads
}

// The FFN part on this rank's share (dense: its intermediate slice; MoE: its experts and its slice
// of the shared experts), then the one all-reduce that sums the shares. h, out: [T, H]
void CpuBackend::ffn(const LayerWeights& l, const float* h, int64_t T, float* out) {
  if (const auto* moe = std::get_if<MoeWeights>(&l.ffn))
    cpu::moe_ffn(*c_.moe, *moe, h, T, c_.hidden_size, out);
  else
    cpu::mlp(std::get<MlpWeights>(l.ffn), h, T, out);
  comm_.all_reduce_sum(out, std::size_t(T * c_.hidden_size));
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
  const bool capturing = comm_.rank() == 0;
  std::vector<std::vector<std::byte>> states(capturing ? plan.points.size() : 0);
  auto capture = [&](int64_t id, const std::vector<float>& x) {
    if (!capturing) return;
    for (std::size_t p = 0; p < plan.points.size(); ++p)
      if (plan.points[p].id == id) states[p] = store(x, dtype);
  };

  std::vector<float> x(std::size_t(T * H));  // the residual stream [T, H]
  for (int64_t t = 0; t < T; ++t) {
    const int32_t id = batch.tokens[std::size_t(t)];
    LT_CHECK(id >= 0 && id < c_.vocab_size, "token id ", id, " at batch position ", t, " is outside the vocabulary of ",
             c_.vocab_size);
    std::memcpy(&x[std::size_t(t * H)], &w_.embed[std::size_t(id) * std::size_t(H)], std::size_t(H) * sizeof(float));
  }
  std::vector<float> h(x.size()), delta(x.size());
  const float eps = float(c_.rms_norm_eps);
  for (int64_t i = 0; i < L; ++i) {
    capture(i, x);
    const LayerWeights& l = w_.layers[std::size_t(i)];
    cpu::rms_norm(x.data(), l.input_norm.data(), h.data(), T, H, eps);
    attention(l, h.data(), T, batch.offsets, c_.sliding_window[std::size_t(i)], delta.data());
    for (std::size_t j = 0; j < x.size(); ++j) x[j] += delta[j];
    cpu::rms_norm(x.data(), l.post_attn_norm.data(), h.data(), T, H, eps);
    ffn(l, h.data(), T, delta.data());
    for (std::size_t j = 0; j < x.size(); ++j) x[j] += delta[j];
  }
  capture(L, x);
  cpu::rms_norm(x.data(), w_.final_norm.data(), h.data(), T, H, eps);
  capture(L + 1, h);
  return states;
}

}  // namespace layertap
