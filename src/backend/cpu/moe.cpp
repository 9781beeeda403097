#include "backend/cpu/moe.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <numeric>

#include "backend/cpu/ops.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
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
  std::vector<float> probs(logits, logits + E);
  kernels::route_softmax(probs.data(), int32_t(E));
  const auto chosen = top_k(probs.data(), E, k);
  float top_sum = 0.0f;
  for (int64_t j = 0; j < k; ++j) {
    experts[j] = chosen[std::size_t(j)];
    top_sum += weights[j] = probs[std::size_t(chosen[std::size_t(j)])];
  }
  if (m.norm_topk_prob)
    for (int64_t j = 0; j < k; ++j) weights[j] /= top_sum;
}

// GPT-OSS for one token: the top-k of the logits, their softmax (kernels::route_softmax).
void route_topk_softmax(const MoeConfig& m, const float* logits, int32_t* experts, float* weights) {
  const auto chosen = top_k(logits, m.num_experts, m.experts_per_token);
  for (int64_t j = 0; j < m.experts_per_token; ++j) {
    experts[j] = chosen[std::size_t(j)];
    weights[j] = logits[chosen[std::size_t(j)]];
  }
  kernels::route_softmax(weights, int32_t(m.experts_per_token));
}

// Llama-4 for one token: the top-k of the logits, each weighted by the sigmoid of its logit.
void route_topk_sigmoid(const MoeConfig& m, const float* logits, int32_t* experts, float* weights) {
  const auto chosen = top_k(logits, m.num_experts, m.experts_per_token);
  for (int64_t j = 0; j < m.experts_per_token; ++j) {
    experts[j] = chosen[std::size_t(j)];
    weights[j] = kernels::route_sigmoid(logits[chosen[std::size_t(j)]]);
  }
}

// Float32 router logits [T, E] of h [T, H] (transformers computes them in float32).
std::vector<float> router_logits(const MoeConfig& m, const MoeWeights& w, const float* h, int64_t T, int64_t H) {
  const int64_t E = m.num_experts;
  LT_CHECK(w.router.out == E && w.router.in == H, "MoE router holds [", w.router.out, ", ", w.router.in, "], expected [",
           E, ", ", H, "]");
  LT_CHECK(m.routing != MoeConfig::Routing::SigmoidGroupedTopk || (w.score_bias && int64_t(w.score_bias->size()) == E),
           "MoE layer: e_score_correction_bias holds ", w.score_bias ? w.score_bias->size() : 0, " values for ", E,
           " experts");
  std::vector<float> logits(std::size_t(T * E));
  linear(h, T, w.router, logits.data());
  return logits;
}

// One token's scores (sigmoid or softmax probabilities, as route weights them) and choice values
// (what the top-k ranks: sigmoid + bias, or the probability) from its logits [E].
void scores_of(const MoeConfig& m, const MoeWeights& w, const float* logits, std::vector<float>& scores,
               std::vector<float>& choice) {
  const int64_t E = m.num_experts;
  scores.resize(std::size_t(E));
  choice.resize(std::size_t(E));
  if (m.routing == MoeConfig::Routing::SigmoidGroupedTopk) {
    for (int64_t e = 0; e < E; ++e) {
      scores[std::size_t(e)] = 1.0f / (1.0f + std::exp(-logits[e]));
      choice[std::size_t(e)] = scores[std::size_t(e)] + (*w.score_bias)[std::size_t(e)];
    }
    return;
  }
  scores.assign(logits, logits + E);
  kernels::route_softmax(scores.data(), int32_t(E));
  choice = scores;
}

}  // namespace

Routing route(const MoeConfig& m, const MoeWeights& w, const float* h, int64_t T, int64_t H) {
  const int64_t E = m.num_experts, k = m.experts_per_token;
  const std::vector<float> logits = router_logits(m, w, h, T, H);  // [T, E]
  Routing r;
  r.k = k;
  r.experts.resize(std::size_t(T * k));
  r.weights.resize(std::size_t(T * k));
  for (int64_t t = 0; t < T; ++t) {
    const float* lt = logits.data() + t * E;
    int32_t* experts = r.experts.data() + t * k;
    float* weights = r.weights.data() + t * k;
    switch (m.routing) {
      case MoeConfig::Routing::SigmoidGroupedTopk: route_sigmoid_grouped(m, lt, w.score_bias->data(), experts, weights); break;
      case MoeConfig::Routing::SoftmaxTopk: route_softmax(m, lt, experts, weights); break;
      case MoeConfig::Routing::TopkSoftmax: route_topk_softmax(m, lt, experts, weights); break;
      case MoeConfig::Routing::TopkSigmoid: route_topk_sigmoid(m, lt, experts, weights); break;
    }
  }
  return r;
}

Routing route_given(const MoeConfig& m, const MoeWeights& w, const float* h, int64_t T, int64_t H,
                    const int32_t* experts) {
  const int64_t E = m.num_experts, k = m.experts_per_token;
  const std::vector<float> logits = router_logits(m, w, h, T, H);  // [T, E]
  Routing r;
  r.k = k;
  r.experts.assign(experts, experts + T * k);
  r.weights.resize(std::size_t(T * k));
  // The top-k-of-logits routers weight the chosen logits; the others the scores.
  const bool of_logits = m.routing == MoeConfig::Routing::TopkSoftmax || m.routing == MoeConfig::Routing::TopkSigmoid;
  std::vector<float> scores, choice;
  for (int64_t t = 0; t < T; ++t) {
    const float* lt = logits.data() + t * E;
    if (!of_logits) scores_of(m, w, lt, scores, choice);
    const int32_t* et = experts + t * k;
    float* wt = r.weights.data() + t * k;
    float sum = 0.0f;
    for (int64_t j = 0; j < k; ++j) {
      LT_CHECK(et[j] >= 0 && et[j] < E, "token ", t, ": recorded expert ", et[j], " is outside [0, ", E, ")");
      for (int64_t i = 0; i < j; ++i)
        LT_CHECK(et[i] != et[j], "token ", t, ": recorded expert ", et[j], " is chosen twice");
      sum += wt[j] = of_logits ? lt[et[j]] : scores[std::size_t(et[j])];
    }
    if (m.routing == MoeConfig::Routing::TopkSoftmax) {  // as route_topk_softmax
      kernels::route_softmax(wt, int32_t(k));
    } else if (m.routing == MoeConfig::Routing::TopkSigmoid) {  // as route_topk_sigmoid
      for (int64_t j = 0; j < k; ++j) wt[j] = kernels::route_sigmoid(wt[j]);
    } else if (m.routing == MoeConfig::Routing::SigmoidGroupedTopk) {  // as route_sigmoid_grouped
      const float denominator = sum + 1e-20f;
      for (int64_t j = 0; j < k; ++j) {
        if (m.norm_topk_prob) wt[j] /= denominator;
        wt[j] *= float(m.routed_scaling_factor);
      }
    } else if (m.norm_topk_prob) {  // as route_softmax
      for (int64_t j = 0; j < k; ++j) wt[j] /= sum;
    }
  }
  return r;
}

std::string implausible_choice(const MoeConfig& m, const MoeWeights& w, const float* h, int64_t T, int64_t H,
                               const int32_t* experts, double state_bound) {
  const int64_t E = m.num_experts, k = m.experts_per_token;
  const bool sigmoid = m.routing == MoeConfig::Routing::SigmoidGroupedTopk;
  const int64_t groups = sigmoid && m.n_group > 1 ? m.n_group : 1, per_group = E / groups;
  const std::vector<float> logits = router_logits(m, w, h, T, H);  // [T, E]
  std::vector<double> w_norm(static_cast<std::size_t>(E));  // |w_e|: the router row's length
  for (int64_t e = 0; e < E; ++e) {
    double s = 0;
    for (int64_t c = 0; c < H; ++c) s += double(w.router.w[std::size_t(e * H + c)]) * w.router.w[std::size_t(e * H + c)];
    w_norm[std::size_t(e)] = std::sqrt(s);
  }
  // A bf16 forward's error in h is spread over its H dimensions, not aligned with a router row:
  // its projection on w_e is about bound * |h| * |w_e| / sqrt(H); six times that is allowed. The
  // choice value moves by at most 1/4 of the logit for a sigmoid router; a softmax router and a
  // top-k of the logits (GPT-OSS, Llama-4) rank as the logits do, so logits are compared.
  const double slope = sigmoid ? 0.25 : 1.0, spread = 6.0 * state_bound / std::sqrt(double(H));
  std::vector<double> value(static_cast<std::size_t>(E)), delta(static_cast<std::size_t>(E));
  std::vector<double> group_score(static_cast<std::size_t>(groups)), group_delta(static_cast<std::size_t>(groups));
  std::vector<bool> surely_kept(static_cast<std::size_t>(groups));
  for (int64_t t = 0; t < T; ++t) {
    const float* lt = logits.data() + t * E;
    double h_norm = 0;
    for (int64_t c = 0; c < H; ++c) h_norm += double(h[t * H + c]) * h[t * H + c];
    h_norm = std::sqrt(h_norm);
    for (int64_t e = 0; e < E; ++e) {
      value[std::size_t(e)] = sigmoid ? 1.0 / (1.0 + std::exp(-double(lt[e]))) + (*w.score_bias)[std::size_t(e)] : lt[e];
      delta[std::size_t(e)] = slope * spread * h_norm * w_norm[std::size_t(e)];
    }
    // Groups (DeepSeek noaux_tc): ranked by the sum of their top-2 values.
    for (int64_t g = 0; g < groups; ++g) {
      int64_t a = g * per_group, b = -1;  // the group's best two
      for (int64_t e = g * per_group + 1; e < (g + 1) * per_group; ++e)
        if (value[std::size_t(e)] > value[std::size_t(a)]) b = a, a = e;
        else if (b < 0 || value[std::size_t(e)] > value[std::size_t(b)]) b = e;
      group_score[std::size_t(g)] = value[std::size_t(a)] + (b >= 0 ? value[std::size_t(b)] : 0.0);
      group_delta[std::size_t(g)] = delta[std::size_t(a)] + (b >= 0 ? delta[std::size_t(b)] : 0.0);
    }
    // A group is surely kept when fewer than topk_group others can rank above it.
    const int64_t keep = groups > 1 ? m.topk_group : 1;
    for (int64_t g = 0; g < groups; ++g) {
      int64_t above = 0;
      for (int64_t o = 0; o < groups; ++o)
        above += o != g && group_score[std::size_t(o)] + group_delta[std::size_t(o)] >
                               group_score[std::size_t(g)] - group_delta[std::size_t(g)];
      surely_kept[std::size_t(g)] = above < keep;
    }
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = experts[t * k + j];
      if (e < 0 || e >= E) return cat("token ", t, ": expert ", e, " is outside [0, ", E, ")");
      const int64_t g = e / per_group;
      // Its group raised and the others lowered: is it kept?
      int64_t groups_above = 0;
      for (int64_t o = 0; o < groups; ++o)
        groups_above += o != g && group_score[std::size_t(o)] - group_delta[std::size_t(o)] >
                                      group_score[std::size_t(g)] + group_delta[std::size_t(g)];
      if (groups_above >= keep)
        return cat("token ", t, ": expert ", e, " is in group ", g, ", which ", groups_above,
                   " groups outrank by more than a bf16 forward moves them (", keep, " are kept)");
      // It raised and the others lowered: do k experts of surely kept groups (or its own) still
      // outrank it?
      const double raised = value[std::size_t(e)] + delta[std::size_t(e)];
      int64_t above = 0, first_above = -1;
      for (int64_t o = 0; o < E; ++o)
        if (o != e && (surely_kept[std::size_t(o / per_group)] || o / per_group == g) &&
            value[std::size_t(o)] - delta[std::size_t(o)] > raised) {
          ++above;
          if (first_above < 0 || value[std::size_t(o)] < value[std::size_t(first_above)]) first_above = o;
        }
      if (above >= k)
        return cat("token ", t, ": expert ", e, " has routing value ", value[std::size_t(e)], "; ", above,
                   " experts (the least of them ", first_above, " at ", value[std::size_t(first_above)],
                   ") outrank it by more than a bf16 forward moves them (", delta[std::size_t(e)], " and ",
                   delta[std::size_t(first_above)], "), and ", k, " are chosen");
    }
  }
  return "";
}

void moe_ffn(const MoeWeights& w, const Routing& r, const float* h, int64_t T, int64_t H, float* out,
             const GatedActivation& act, bool weight_input) {
  std::fill(out, out + T * H, 0.0f);
  // The (token, weight) pairs routed to each expert this rank holds, in token order.
  const int64_t held = int64_t(w.routed.size());
  std::vector<std::vector<std::pair<int64_t, float>>> routed(w.routed.size());
  for (int64_t t = 0; t < T; ++t)
    for (int64_t j = 0; j < r.k; ++j) {
      const int64_t local = r.experts[std::size_t(t * r.k + j)] - w.first_expert;
      if (local >= 0 && local < held) routed[std::size_t(local)].emplace_back(t, r.weights[std::size_t(t * r.k + j)]);
    }
  std::vector<float> x, y;
  for (std::size_t i = 0; i < w.routed.size(); ++i) {
    const auto& tokens = routed[i];
    if (tokens.empty()) continue;
    const int64_t n = int64_t(tokens.size());
    x.resize(std::size_t(n * H));  // [n, H] the tokens routed to this expert
    y.resize(std::size_t(n * H));
    for (int64_t a = 0; a < n; ++a) {
      const auto [t, weight] = tokens[std::size_t(a)];
      float* xa = x.data() + a * H;
      if (weight_input) {
        for (int64_t c = 0; c < H; ++c) xa[c] = h[t * H + c] * weight;
      } else {
        std::copy(h + t * H, h + (t + 1) * H, xa);
      }
    }
    mlp(w.routed[i], x.data(), n, y.data(), act);
    for (int64_t a = 0; a < n; ++a) {
      const auto [t, weight] = tokens[std::size_t(a)];
      float* o = out + t * H;
      const float* ya = y.data() + a * H;
      if (weight_input) {
        for (int64_t c = 0; c < H; ++c) o[c] += ya[c];
      } else {
        for (int64_t c = 0; c < H; ++c) o[c] += ya[c] * weight;
      }
    }
  }
  if (w.shared) {
    std::vector<float> shared(std::size_t(T * H));
    mlp(*w.shared, h, T, shared.data(), act);
    for (int64_t i = 0; i < T * H; ++i) out[i] += shared[std::size_t(i)];
  }
}

}  // namespace layertap::cpu
