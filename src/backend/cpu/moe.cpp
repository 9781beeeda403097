#include "backend/cpu/moe.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "backend/cpu/ops.hpp"
#include "core/error.hpp"
// The route order (NaN last) and its NaN test, shared with the CUDA router; plain C++ off nvcc.
#include "kernels/moe_routing.hpp"

namespace layertap::cpu {

namespace {

// Indices of the k largest values of v[0..n), largest first (ties: lower index first; NaN after
// every number, NaNs by index: kernels::route_before, a strict total order even with NaN).
std::vector<int32_t> top_k(const float* v, int64_t n, int64_t k) {
  std::vector<int32_t> idx(static_cast<std::size_t>(n));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return kernels::route_before(v[a], a, v[b], b); });
  idx.resize(static_cast<std::size_t>(k));
  return idx;
}

// DeepSeek noaux_tc for one token: scores = sigmoid(logits); the bias steers the choice only;
// groups ranked by the sum of their top 2 biased scores, the best topk_group kept, the others
// masked to -inf; top-k experts of what is left, weighted by their unbiased scores.
void route_sigmoid_grouped(const MoeConfig& m, const float* logits, const float* bias, int32_t* experts,
                           float* weights) {
  const int64_t E = m.num_experts, per_group = E / m.n_group, k = m.experts_per_token;
  std::vector<float> scores(static_cast<std::size_t>(E)), choice(static_cast<std::size_t>(E));
  for (int64_t e = 0; e < E; ++e) {
    scores[std::size_t(e)] = 1.0f / (1.0f + std::exp(-logits[e]));
    choice[std::size_t(e)] = scores[std::size_t(e)] + bias[e];
  }
  std::vector<float> group_scores(std::size_t(m.n_group));
  for (int64_t g = 0; g < m.n_group; ++g) {
    const auto best = top_k(choice.data() + g * per_group, per_group, 2);
    group_scores[std::size_t(g)] = choice[std::size_t(g * per_group + best[0])] + choice[std::size_t(g * per_group + best[1])];
  }
  std::vector<bool> kept(std::size_t(m.n_group), false);
  for (int32_t g : top_k(group_scores.data(), m.n_group, m.topk_group)) kept[std::size_t(g)] = true;
  for (int64_t e = 0; e < E; ++e)
    if (!kept[std::size_t(e / per_group)]) choice[std::size_t(e)] = -std::numeric_limits<float>::infinity();
  const auto chosen = top_k(choice.data(), E, k);
  float sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    experts[j] = chosen[std::size_t(j)];
    weights[j] = scores[std::size_t(chosen[std::size_t(j)])];
    sum += weights[j];
  }
  const float denominator = sum + 1e-20f;
  for (int64_t j = 0; j < k; ++j) {
    if (m.norm_topk_prob) weights[j] /= denominator;
    weights[j] *= float(m.routed_scaling_factor);
  }
}

// Qwen3-MoE for one token: softmax over all experts, top-k, optionally renormalised. The max and
// the sum skip NaN (as kernels::route_token): a NaN logit gets a NaN probability, ranked last.
void route_softmax(const MoeConfig& m, const float* logits, int32_t* experts, float* weights) {
  const int64_t E = m.num_experts, k = m.experts_per_token;
  std::vector<float> probs(static_cast<std::size_t>(E));
  float mx = -std::numeric_limits<float>::infinity();
  for (int64_t e = 0; e < E; ++e) mx = logits[e] > mx ? logits[e] : mx;
  float sum = 0.0f;
  for (int64_t e = 0; e < E; ++e) {
    probs[std::size_t(e)] = std::exp(logits[e] - mx);
    if (!kernels::route_isnan(probs[std::size_t(e)])) sum += probs[std::size_t(e)];
  }
  for (float& p : probs) p /= sum;
  const auto chosen = top_k(probs.data(), E, k);
  float top_sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    experts[j] = chosen[std::size_t(j)];
    top_sum += weights[j] = probs[std::size_t(chosen[std::size_t(j)])];
  }
  if (m.norm_topk_prob)
    for (int64_t j = 0; j < k; ++j) weights[j] /= top_sum;
}

}  // namespace

Routing route(const MoeConfig& m, const MoeWeights& w, const float* h, int64_t T, int64_t H) {
  const int64_t E = m.num_experts, k = m.experts_per_token;
  LT_CHECK(w.router.out == E && w.router.in == H, "MoE router holds [", w.router.out, ", ", w.router.in, "], expected [",
           E, ", ", H, "]");
  std::vector<float> logits(std::size_t(T * E));  // float32 router logits [T, E]
  linear(h, T, w.router, logits.data());
  Routing r;
  r.k = k;
  r.experts.resize(std::size_t(T * k));
  r.weights.resize(std::size_t(T * k));
  for (int64_t t = 0; t < T; ++t) {
    const float* lt = logits.data() + t * E;
    if (m.routing == MoeConfig::Routing::SigmoidGroupedTopk)
      route_sigmoid_grouped(m, lt, w.score_bias.data(), r.experts.data() + t * k, r.weights.data() + t * k);
    else
      route_softmax(m, lt, r.experts.data() + t * k, r.weights.data() + t * k);
  }
  return r;
}

Routing moe_ffn(const MoeConfig& m, const MoeWeights& w, const float* h, int64_t T, int64_t H, float* out) {
  LT_CHECK(m.routing != MoeConfig::Routing::SigmoidGroupedTopk || int64_t(w.score_bias.size()) == m.num_experts,
           "MoE layer: e_score_correction_bias holds ", w.score_bias.size(), " values for ", m.num_experts, " experts");
  const Routing r = route(m, w, h, T, H);
  std::fill(out, out + T * H, 0.0f);
  // The (token, weight) pairs routed to each expert this rank holds, in token order.
  const int64_t held = int64_t(w.experts.size());
  std::vector<std::vector<std::pair<int64_t, float>>> routed(w.experts.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < r.k; ++j) {
      const int64_t local = r.experts[std::size_t(t * r.k + j)] - w.first_expert;
      if (local >= 0 && local < held) routed[std::size_t(local)].emplace_back(t, r.weights[std::size_t(t * r.k + j)]);
    }
  std::vector<float> x, y;
  for (std::size_t i = 0; i < w.experts.size(); ++i) {
    const auto& tokens = routed[i];
    if (tokens.empty()) continue;
    const int64_t n = int64_t(tokens.size());
    x.resize(std::size_t(n * H));  // [n, H] the tokens routed to this expert
    y.resize(std::size_t(n * H));
    for (int64_t a = 0; a < n; ++a) {
      const int64_t t = tokens[std::size_t(a)].first;
      std::copy(h + t * H, h + (t + 1) * H, x.data() + a * H);
    }
    mlp(w.experts[i], x.data(), n, y.data());
    for (int64_t a = 0; a < n; ++a) {
      const auto [t, weight] = tokens[std::size_t(a)];
      float* o = out + t * H;
      const float* ya = y.data() + a * H;
      for (int64_t c = 0; c < H; ++c) o[c] += ya[c] * weight;
    }
  }
  if (w.has_shared) {
    std::vector<float> shared(std::size_t(T * H));
    mlp(w.shared, h, T, shared.data());
    for (int64_t i = 0; i < T * H; ++i) out[i] += shared[std::size_t(i)];
  }
  return r;
}

}  // namespace layertap::cpu
