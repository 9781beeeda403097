// cpu::route on tiny hand-made inputs whose answer is known: DeepSeek noaux_tc (sigmoid scores, the
// bias steering only the choice, group-limited top-k with masked groups at -inf, weights from the
// unbiased scores, normalised if norm_topk_prob, times routed_scaling_factor) and Qwen3-MoE
// (softmax top-k, optionally renormalised).
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/cpu/moe.hpp"
#include "core/error.hpp"

namespace layertap {
namespace {

float sigmoid(float x) { return 1.0f / (1.0f + std::exp(-x)); }

// A router whose logits are the hidden state itself (identity [E, E]), so h holds the logits.
MoeWeights identity_router(int64_t E, std::vector<float> bias = {}) {
  MoeWeights w;
  w.router.out = E;
  w.router.in = E;
  w.router.w.assign(std::size_t(E * E), 0.0f);
  for (int64_t e = 0; e < E; ++e) w.router.w[std::size_t(e * E + e)] = 1.0f;
  w.score_bias = std::move(bias);
  return w;
}

MoeConfig deepseek(int64_t E, int64_t k, int64_t n_group, int64_t topk_group, bool norm = true, double scale = 2.5) {
  MoeConfig m;
  m.routing = MoeConfig::Routing::SigmoidGroupedTopk;
  m.num_experts = E;
  m.experts_per_token = k;
  m.n_group = n_group;
  m.topk_group = topk_group;
  m.norm_topk_prob = norm;
  m.routed_scaling_factor = scale;
  m.score_bias = true;
  return m;
}

// The bias that makes sigmoid(logits) + bias equal `biased` (up to float rounding, far below the
// margins used here).
std::vector<float> bias_for(const std::vector<float>& logits, const std::vector<float>& biased) {
  std::vector<float> b(logits.size());
  for (std::size_t e = 0; e < logits.size(); ++e) b[e] = biased[e] - sigmoid(logits[e]);
  return b;
}

// DeepSeek weights of the chosen experts: unbiased scores, normalised, scaled.
std::vector<float> expected_weights(const std::vector<float>& logits, const std::vector<int32_t>& chosen, bool norm,
                                    float scale) {
  std::vector<float> w;
  float sum = 0;
  for (int32_t e : chosen) sum += sigmoid(logits[std::size_t(e)]);
  for (int32_t e : chosen) w.push_back(sigmoid(logits[std::size_t(e)]) / (norm ? sum : 1.0f) * scale);
  return w;
}

void expect_weights(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (std::size_t j = 0; j < got.size(); ++j) EXPECT_NEAR(got[j], want[j], 1e-6) << "weight " << j;
}

}  // namespace

TEST(MoeRouting, BiasSteersTheChoiceButNotTheWeights) {
  const std::vector<float> logits = {2.0f, 0.5f, 0.0f, -1.0f};  // scores 0.881, 0.622, 0.5, 0.269
  const MoeConfig m = deepseek(4, 2, 1, 1);
  // No bias: the two highest scores.
  const cpu::Routing plain = cpu::route(m, identity_router(4, {0, 0, 0, 0}), logits.data(), 1, 4);
  EXPECT_EQ(plain.k, 2);
  EXPECT_EQ(plain.experts, (std::vector<int32_t>{0, 1}));
  // Biased scores 0.381, 0.622, 0.8, 0.269: experts 2 then 1, weighted by their unbiased scores.
  const cpu::Routing biased = cpu::route(m, identity_router(4, {-0.5f, 0, 0.3f, 0}), logits.data(), 1, 4);
  EXPECT_EQ(biased.experts, (std::vector<int32_t>{2, 1}));
  expect_weights(biased.weights, expected_weights(logits, {2, 1}, true, 2.5f));
  EXPECT_NEAR(biased.weights[0] + biased.weights[1], 2.5f, 1e-6);  // normalised, then scaled
}

TEST(MoeRouting, WithoutNormTopkProbWeightsAreScaledScores) {
  const std::vector<float> logits = {2.0f, 0.5f, 0.0f, -1.0f};
  const MoeConfig m = deepseek(4, 2, 1, 1, /*norm=*/false, /*scale=*/2.827);
  const cpu::Routing r = cpu::route(m, identity_router(4, {-0.5f, 0, 0.3f, 0}), logits.data(), 1, 4);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{2, 1}));
  expect_weights(r.weights, {sigmoid(0.0f) * 2.827f, sigmoid(0.5f) * 2.827f});
}

TEST(MoeRouting, GroupMaskingExcludesAHigherExpertOfADroppedGroup) {
  // 4 groups of 2. Group sums of the biased scores: 0.05, 0.95, 0.79, 0.15 -> groups 1 and 2 kept,
  // so expert 0 (0.95, the highest) is excluded and experts 2, 3 win.
  const std::vector<float> logits = {0.3f, -0.2f, 0.1f, 0.7f, -0.4f, 0.0f, 0.2f, -0.1f};
  const std::vector<float> biased = {0.95f, -0.9f, 0.5f, 0.45f, 0.4f, 0.39f, 0.1f, 0.05f};
  const MoeWeights w = identity_router(8, bias_for(logits, biased));
  const cpu::Routing grouped = cpu::route(deepseek(8, 2, 4, 2), w, logits.data(), 1, 8);
  EXPECT_EQ(grouped.experts, (std::vector<int32_t>{2, 3}));
  expect_weights(grouped.weights, expected_weights(logits, {2, 3}, true, 2.5f));
  // One group (no masking): expert 0 is chosen.
  const cpu::Routing flat = cpu::route(deepseek(8, 2, 1, 1), w, logits.data(), 1, 8);
  EXPECT_EQ(flat.experts, (std::vector<int32_t>{0, 2}));
}

TEST(MoeRouting, MaskedGroupsAreMinusInfinityNotZero) {
  // Every biased score negative. Group sums -0.5, -1.85, -0.7, -2.05: groups 0 and 2 kept. Top 3 of
  // the kept experts: 4 (-0.1), 0 (-0.2), 1 (-0.3). Masking the others to 0 would pick them instead.
  const std::vector<float> logits = {-0.3f, 0.4f, 0.2f, -0.6f, 1.0f, 0.0f, -0.2f, 0.6f};
  const std::vector<float> biased = {-0.2f, -0.3f, -0.9f, -0.95f, -0.1f, -0.6f, -1.0f, -1.05f};
  const cpu::Routing r =
      cpu::route(deepseek(8, 3, 4, 2), identity_router(8, bias_for(logits, biased)), logits.data(), 1, 8);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{4, 0, 1}));
  expect_weights(r.weights, expected_weights(logits, {4, 0, 1}, true, 2.5f));
}

TEST(MoeRouting, GroupScoreIsTheSumOfTheTopTwo) {
  // Group 0 has the single best expert (0.9) but its top-2 sum 0.9 + 0.0 = 0.9 loses to group 1's
  // 0.5 + 0.45 = 0.95; group 2 (3 experts per group here) has 0.48 + 0.3 = 0.78.
  const std::vector<float> logits(9, 0.0f);
  const std::vector<float> biased = {0.9f, 0.0f, -0.5f, 0.5f, 0.45f, 0.1f, 0.48f, 0.3f, 0.2f};
  const cpu::Routing r =
      cpu::route(deepseek(9, 2, 3, 1), identity_router(9, bias_for(logits, biased)), logits.data(), 1, 9);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{3, 4}));
  expect_weights(r.weights, {1.25f, 1.25f});  // equal unbiased scores 0.5: half of 2.5 each
}

TEST(MoeRouting, Qwen3SoftmaxTopK) {
  MoeConfig m;
  m.routing = MoeConfig::Routing::SoftmaxTopk;
  m.num_experts = 4;
  m.experts_per_token = 2;
  // Two tokens; the router reads hidden unit (e + 1) % 4 for expert e, so the logits of token t are
  // h[t] rotated left by one.
  MoeWeights w = identity_router(4);
  w.router.w.assign(16, 0.0f);
  for (int e = 0; e < 4; ++e) w.router.w[std::size_t(e * 4 + (e + 1) % 4)] = 1.0f;
  const std::vector<float> h = {0.5f, 1.0f, 3.0f, 2.0f,    // logits 1, 3, 2, 0.5
                                5.0f, 0.1f, 0.2f, -0.3f};  // logits 0.1, 0.2, -0.3, 5
  const std::vector<std::vector<float>> logits = {{1.0f, 3.0f, 2.0f, 0.5f}, {0.1f, 0.2f, -0.3f, 5.0f}};
  auto softmax = [](const std::vector<float>& l) {
    double sum = 0;
    for (float x : l) sum += std::exp(double(x));
    std::vector<float> p;
    for (float x : l) p.push_back(float(std::exp(double(x)) / sum));
    return p;
  };
  const auto p0 = softmax(logits[0]), p1 = softmax(logits[1]);

  m.norm_topk_prob = false;
  const cpu::Routing raw = cpu::route(m, w, h.data(), 2, 4);
  EXPECT_EQ(raw.experts, (std::vector<int32_t>{1, 2, 3, 1}));
  expect_weights(raw.weights, {p0[1], p0[2], p1[3], p1[1]});  // probabilities, summing to < 1

  m.norm_topk_prob = true;
  const cpu::Routing norm = cpu::route(m, w, h.data(), 2, 4);
  EXPECT_EQ(norm.experts, raw.experts);
  expect_weights(norm.weights, {p0[1] / (p0[1] + p0[2]), p0[2] / (p0[1] + p0[2]), p1[3] / (p1[3] + p1[1]),
                                p1[1] / (p1[3] + p1[1])});
}

TEST(MoeRouting, RouterShapeIsChecked) {
  const std::vector<float> h(8, 0.0f);
  EXPECT_THROW(cpu::route(deepseek(4, 2, 1, 1), identity_router(4, {0, 0, 0, 0}), h.data(), 1, 8), Error);
}

}  // namespace layertap
