// The top-k choice of one token's experts, as src/backend/cpu/moe.cpp computes it, in plain C++
// that runs on the host and on the device. A host test compares route_token with cpu::route over
// random logits, ties included. moe.cu's router kernel (one warp per token) is built from the same
// pieces (route_sigmoid, route_biased, route_group_score, route_group_kept, route_before,
// route_weight): each value it computes is one of these functions of the same inputs, and every
// sum is taken in route_token's order, so it agrees with route_token bit for bit.
//
//   DeepSeek noaux_tc (SigmoidGroupedTopk): s = sigmoid(logit); choice = s + bias; the n_group
//   contiguous groups are ranked by the sum of their top-2 choices, the best topk_group kept and
//   the others masked to -inf; the top_k experts of what is left; weights are the unbiased s,
//   divided by (their sum + 1e-20) when norm_topk_prob, then times routed_scaling_factor.
//   Qwen3-MoE (SoftmaxTopk): softmax over all experts; top_k; divided by their sum when
//   norm_topk_prob.
//   GPT-OSS (TopkSoftmax): top_k of the logits; softmax over those k (max and sum skip NaN).
//   Llama-4 (TopkSigmoid): top_k of the logits; each weight the sigmoid of its logit (no
//   renormalisation, no scaling).
// Orders: larger first; among equal values the lower index first (as the CPU's top_k).
// NaN comes after every number (-inf included), NaNs among themselves lower index first.
#pragma once
#include <cmath>
#include <cstdint>

#if defined(__CUDACC__)
#define LT_HD __host__ __device__
#else
#define LT_HD
#endif

namespace layertap::kernels {

struct RouteParams {
  enum Kind : std::int32_t { SigmoidGroupedTopk = 0, SoftmaxTopk = 1, TopkSoftmax = 2, TopkSigmoid = 3 };
  std::int32_t kind = SoftmaxTopk;
  std::int32_t num_experts = 0, top_k = 0;
  std::int32_t n_group = 1, topk_group = 1;  // SigmoidGroupedTopk
  std::int32_t norm_topk_prob = 0;
  float routed_scaling_factor = 1.0f;  // SigmoidGroupedTopk
};

// The most groups a SigmoidGroupedTopk router may have (DeepSeek-V3: 8).
inline constexpr std::int32_t kMaxRouteGroups = 64;

// Whether x is NaN (the only value unequal to itself; no fast-math in this project).
LT_HD inline bool route_isnan(float x) { return x != x; }

// Whether (va, a) comes before (vb, b): the larger value, ties to the lower index; NaN after
// every number, NaNs by index. A strict total order over distinct indices, NaN or not, so it is
// a valid std::sort comparator and route_next below always finds a pick while one remains.
LT_HD inline bool route_before(float va, std::int32_t a, float vb, std::int32_t b) {
  const bool na = route_isnan(va), nb = route_isnan(vb);
  if (na || nb) return na && nb ? a < b : nb;
  return va > vb || (va == vb && a < b);
}

// The first of v[0..n) in route order that comes after (prev_v, prev) (prev < 0: the very first);
// -1 only when none is left (n picks made). The j-th pick of a top-k is the first after the
// (j-1)-th: no marks, any n.
LT_HD inline std::int32_t route_next(const float* v, std::int32_t n, float prev_v, std::int32_t prev) {
  std::int32_t best = -1;
  for (std::int32_t e = 0; e < n; ++e) {
    if (prev >= 0 && !route_before(prev_v, prev, v[e], e)) continue;  // at or before the previous pick
    if (best < 0 || route_before(v[e], e, v[best], best)) best = e;
  }
  return best;
}

LT_HD inline float route_exp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  return std::exp(x);
#endif
}

// A logit's score (SigmoidGroupedTopk) and the value its choice ranks (bias: null = 0).
LT_HD inline float route_sigmoid(float logit) { return 1.0f / (1.0f + route_exp(-logit)); }
LT_HD inline float route_biased(float score, const float* bias, std::int32_t e) {
  return score + (bias != nullptr ? bias[e] : 0.0f);
}

// A group's score: the sum of its top-2 choices c[0..per) (its only one when per == 1).
LT_HD inline float route_group_score(const float* c, std::int32_t per) {
  const std::int32_t b0 = route_next(c, per, 0.0f, -1);
  const std::int32_t b1 = per > 1 ? route_next(c, per, c[b0], b0) : -1;
  return c[b0] + (b1 >= 0 ? c[b1] : 0.0f);
}

// Whether group g is among the topk_group best of group_score[0..n_group) (route order).
LT_HD inline bool route_group_kept(const float* group_score, std::int32_t n_group, std::int32_t topk_group,
                                   std::int32_t g) {
  std::int32_t rank = 0;  // groups that come before g
  for (std::int32_t o = 0; o < n_group; ++o) rank += route_before(group_score[o], o, group_score[g], g);
  return rank < topk_group;
}

// A chosen expert's weight from its score and `sum`, the float32 sum of the top_k chosen scores
// taken in choice order (j = 0, 1, ...). TopkSigmoid's score is the logit, its weight the sigmoid.
LT_HD inline float route_weight(const RouteParams& p, float score, float sum) {
  if (p.kind == RouteParams::TopkSigmoid) return route_sigmoid(score);
  if (p.kind == RouteParams::SigmoidGroupedTopk) {
    const float denominator = sum + 1e-20f;
    if (p.norm_topk_prob) score /= denominator;
    return score * p.routed_scaling_factor;
  }
  return p.norm_topk_prob ? score / sum : score;
}

// v (n) becomes its softmax in place, in float32 as torch computes it (max, exp of the
// differences, their sum in order, division). The max and the sum skip NaN, so one NaN value
// leaves the others' probabilities as they are (its own is NaN, ranked last) instead of turning
// every one into NaN. SoftmaxTopk over all experts, TopkSoftmax over the chosen logits.
LT_HD inline void route_softmax(float* v, std::int32_t n) {
  float mx = -INFINITY;
  for (std::int32_t i = 0; i < n; ++i) mx = v[i] > mx ? v[i] : mx;
  float sum = 0.0f;
  for (std::int32_t i = 0; i < n; ++i) {
    v[i] = route_exp(v[i] - mx);
    if (!route_isnan(v[i])) sum += v[i];
  }
  for (std::int32_t i = 0; i < n; ++i) v[i] /= sum;
}

// One token. `logits` (E) float32 is overwritten with the scores (sigmoid or softmax
// probabilities; TopkSoftmax and TopkSigmoid leave them); `choice` (E) is scratch; `bias` (E) is
// e_score_correction_bias (SigmoidGroupedTopk only; may be null = 0). Writes experts[0..top_k)
// and weights[0..top_k).
LT_HD inline void route_token(const RouteParams& p, float* logits, float* choice, const float* bias,
                              std::int32_t* experts, float* weights) {
  const std::int32_t E = p.num_experts, k = p.top_k;
  if (p.kind == RouteParams::SigmoidGroupedTopk) {
    for (std::int32_t e = 0; e < E; ++e) {
      const float s = route_sigmoid(logits[e]);
      logits[e] = s;
      choice[e] = route_biased(s, bias, e);
    }
    if (p.n_group > 1) {
      const std::int32_t per = E / p.n_group;
      float group_score[kMaxRouteGroups];
      for (std::int32_t g = 0; g < p.n_group; ++g) group_score[g] = route_group_score(choice + g * per, per);
      for (std::int32_t g = 0; g < p.n_group; ++g)
        if (!route_group_kept(group_score, p.n_group, p.topk_group, g))
          for (std::int32_t e = g * per; e < (g + 1) * per; ++e) choice[e] = -INFINITY;
    }
  } else if (p.kind == RouteParams::TopkSoftmax || p.kind == RouteParams::TopkSigmoid) {
    choice = logits;  // ranked as they are; the softmax or the sigmoids come after the pick
  } else {  // SoftmaxTopk
    route_softmax(logits, E);
    choice = logits;  // the probabilities are ranked as they are
  }
  float sum = 0.0f;
  std::int32_t prev = -1;
  for (std::int32_t j = 0; j < k; ++j) {
    prev = route_next(choice, E, prev >= 0 ? choice[prev] : 0.0f, prev);
    experts[j] = prev;
    weights[j] = logits[prev];
    sum += weights[j];
  }
  if (p.kind == RouteParams::TopkSoftmax) {
    route_softmax(weights, k);
    return;
  }
  for (std::int32_t j = 0; j < k; ++j) weights[j] = route_weight(p, weights[j], sum);
}

}  // namespace layertap::kernels
