// cpu::route on tiny hand-made inputs whose answer is known: DeepSeek noaux_tc (sigmoid scores, the
// bias steering only the choice, group-limited top-k with masked groups at -inf, weights from the
// unbiased scores, normalised if norm_topk_prob, times routed_scaling_factor) and Qwen3-MoE
// (softmax top-k, optionally renormalised), GPT-OSS and Llama-4 (top-k of the logits, softmaxed or
// each weight a sigmoid). Then NaN router logits: the route order puts NaN after every number, so
// kernels::route_token and cpu::route always pick distinct experts in [0, E). Then cpu::moe_ffn's
// input-weighted experts (Llama-4) against a direct computation.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "backend/cpu/moe.hpp"
#include "backend/route_params.hpp"
#include "core/error.hpp"
// Plain host C++ when not compiled by nvcc.
#include "kernels/moe_routing.hpp"
#include "model/routing_record.hpp"

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

// GPT-OSS: the top-k of the logits (the router's bias included), then the softmax of those k only.
TEST(MoeRouting, GptOssSoftmaxOfTheTopK) {
  MoeConfig m;
  m.routing = MoeConfig::Routing::TopkSoftmax;
  m.num_experts = 4;
  m.experts_per_token = 2;
  MoeWeights w = identity_router(4);
  w.router.b = {0.0f, 0.0f, 0.0f, 3.0f};  // lifts expert 3 above expert 0
  const std::vector<float> h = {2.0f, 1.0f, -1.0f, -0.5f};  // logits 2, 1, -1, 2.5
  const cpu::Routing r = cpu::route(m, w, h.data(), 1, 4);
  EXPECT_EQ(r.experts, (std::vector<int32_t>{3, 0}));
  const double a = std::exp(2.5 - 2.5), b = std::exp(2.0 - 2.5);
  expect_weights(r.weights, {float(a / (a + b)), float(b / (a + b))});
  const cpu::Routing replay = cpu::route_given(m, w, h.data(), 1, 4, r.experts.data());
  EXPECT_EQ(replay.weights, r.weights);  // the same float operations: bit for bit
}

// Llama-4: the top-k of the logits (ties to the lower index), each weighted by the sigmoid of its
// logit, neither renormalised nor scaled.
TEST(MoeRouting, Llama4SigmoidOfTheTopK) {
  MoeConfig m;
  m.routing = MoeConfig::Routing::TopkSigmoid;
  m.num_experts = 5;
  const MoeWeights w = identity_router(5);
  const std::vector<float> h = {0.5f, 2.0f, -1.0f, 2.0f, 1.5f};  // logits; experts 1 and 3 tie
  for (const int64_t k : {1, 3}) {
    SCOPED_TRACE("top " + std::to_string(k));
    m.experts_per_token = k;
    const cpu::Routing r = cpu::route(m, w, h.data(), 1, 5);
    const std::vector<int32_t> want = {1, 3, 4};
    EXPECT_EQ(r.experts, std::vector<int32_t>(want.begin(), want.begin() + k));
    const std::vector<float> sig = {float(1 / (1 + std::exp(-2.0))), float(1 / (1 + std::exp(-2.0))),
                                    float(1 / (1 + std::exp(-1.5)))};  // 0.881, 0.881, 0.818: sum > 1
    expect_weights(r.weights, std::vector<float>(sig.begin(), sig.begin() + k));
    const cpu::Routing replay = cpu::route_given(m, w, h.data(), 1, 5, r.experts.data());
    EXPECT_EQ(replay.weights, r.weights);  // the same float operations: bit for bit
  }
}

TEST(MoeRouting, RouterShapeIsChecked) {
  const std::vector<float> h(8, 0.0f);
  EXPECT_THROW(cpu::route(deepseek(4, 2, 1, 1), identity_router(4, {0, 0, 0, 0}), h.data(), 1, 8), Error);
}

// ---------------------------------------------------------------------------------------------
// NaN router logits

namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

MoeConfig qwen(int64_t E, int64_t k, bool norm) {
  MoeConfig m;
  m.routing = MoeConfig::Routing::SoftmaxTopk;
  m.num_experts = E;
  m.experts_per_token = k;
  m.norm_topk_prob = norm;
  return m;
}

MoeConfig topk_softmax(int64_t E, int64_t k) {
  MoeConfig m;
  m.routing = MoeConfig::Routing::TopkSoftmax;
  m.num_experts = E;
  m.experts_per_token = k;
  return m;
}

MoeConfig topk_sigmoid(int64_t E, int64_t k) {
  MoeConfig m;
  m.routing = MoeConfig::Routing::TopkSigmoid;
  m.num_experts = E;
  m.experts_per_token = k;
  return m;
}

struct NamedConfig {
  std::string name;
  MoeConfig m;
};

// Flat and grouped sigmoid (4 and 2 experts per group) and softmax, with and without
// renormalisation; the top-k of the logits softmaxed (GPT-OSS) and sigmoided (Llama-4, top 1 too).
std::vector<NamedConfig> nan_configs() {
  return {{"sigmoid 16 experts, 1 group", deepseek(16, 4, 1, 1)},
          {"sigmoid 16 experts, 4 groups of 4, 2 kept", deepseek(16, 4, 4, 2)},
          {"sigmoid 32 experts, 8 groups of 4, 3 kept, unnormalised", deepseek(32, 6, 8, 3, false, 2.827)},
          {"sigmoid 8 experts, 4 groups of 2, 2 kept", deepseek(8, 3, 4, 2)},
          {"softmax 16 experts", qwen(16, 4, true)},
          {"softmax 16 experts, unnormalised", qwen(16, 4, false)},
          {"top-k softmax 16 experts", topk_softmax(16, 4)},
          {"top-k sigmoid 16 experts", topk_sigmoid(16, 4)},
          {"top-k sigmoid 16 experts, top 1", topk_sigmoid(16, 1)}};
}

bool sigmoid_routing(const MoeConfig& m) { return m.routing == MoeConfig::Routing::SigmoidGroupedTopk; }

// Whether one NaN logit routes as that logit at -inf would (no score bias). Not with 2 experts per
// group: the NaN makes its group's top-2 sum NaN and the group ranks last, where -inf (score 0) would
// leave the group its best expert's score.
bool nan_routes_as_minus_inf(const MoeConfig& m) { return !sigmoid_routing(m) || m.num_experts / m.n_group >= 3; }

// kernels::route_token, token by token, over logits [T, E] (bias: E or empty = none).
cpu::Routing route_kernel(const MoeConfig& m, const std::vector<float>& logits, const std::vector<float>& bias) {
  const int64_t E = m.num_experts, k = m.experts_per_token, T = int64_t(logits.size()) / E;
  const kernels::RouteParams p = route_params(m);
  cpu::Routing r;
  r.k = k;
  r.experts.resize(std::size_t(T * k));
  r.weights.resize(std::size_t(T * k));
  std::vector<float> l(static_cast<std::size_t>(E)), choice(static_cast<std::size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    std::copy(logits.begin() + t * E, logits.begin() + (t + 1) * E, l.begin());
    kernels::route_token(p, l.data(), choice.data(), bias.empty() ? nullptr : bias.data(), r.experts.data() + t * k,
                         r.weights.data() + t * k);
  }
  return r;
}

// Every expert id in [0, E), distinct within each token.
void expect_valid(const cpu::Routing& r, int64_t E) {
  ASSERT_GT(r.k, 0);
  ASSERT_EQ(r.experts.size() % std::size_t(r.k), 0u);
  for (std::size_t t = 0; t < r.experts.size() / std::size_t(r.k); ++t) {
    std::set<int32_t> seen;
    for (std::size_t j = 0; j < std::size_t(r.k); ++j) {
      const int32_t e = r.experts[t * std::size_t(r.k) + j];
      ASSERT_GE(e, 0) << "token " << t << " pick " << j;
      ASSERT_LT(e, E) << "token " << t << " pick " << j;
      ASSERT_TRUE(seen.insert(e).second) << "token " << t << ": expert " << e << " picked twice";
    }
  }
}

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// The same experts and bit-identical weights (any NaN matching any NaN).
void expect_same(const cpu::Routing& got, const cpu::Routing& want) {
  ASSERT_EQ(got.k, want.k);
  EXPECT_EQ(got.experts, want.experts);
  ASSERT_EQ(got.weights.size(), want.weights.size());
  for (std::size_t i = 0; i < got.weights.size(); ++i) {
    const float a = got.weights[i], b = want.weights[i];
    EXPECT_TRUE((std::isnan(a) && std::isnan(b)) || bits(a) == bits(b)) << "weight " << i << ": " << a << " vs " << b;
  }
}

std::vector<float> normal_values(std::mt19937_64& rng, std::size_t n, float sd) {
  std::normal_distribution<float> normal(0.0f, sd);
  std::vector<float> v(n);
  for (float& x : v) x = normal(rng);
  return v;
}

}  // namespace

TEST(MoeRoutingNaN, RouteOrderPutsNaNAfterEveryNumber) {
  using kernels::route_before;
  EXPECT_TRUE(route_before(-kInf, 5, kNaN, 0));
  EXPECT_FALSE(route_before(kNaN, 0, -kInf, 5));
  EXPECT_TRUE(route_before(kInf, 3, kNaN, 1));
  EXPECT_TRUE(route_before(kNaN, 1, kNaN, 2));
  EXPECT_FALSE(route_before(kNaN, 2, kNaN, 1));
  EXPECT_FALSE(route_before(kNaN, 2, kNaN, 2));
  EXPECT_TRUE(route_before(-kNaN, 1, kNaN, 2));  // the sign of a NaN does not matter
  // Non-NaN values keep the order they had: larger first, ties (+0 and -0 too) to the lower index.
  auto old_before = [](float va, int32_t a, float vb, int32_t b) { return va > vb || (va == vb && a < b); };
  std::mt19937_64 rng(11);
  const std::vector<float> specials = {0.0f, -0.0f, kInf, -kInf, 1.0f, -1.0f, std::numeric_limits<float>::denorm_min()};
  std::vector<float> values = normal_values(rng, 200, 2.0f);
  values.insert(values.end(), specials.begin(), specials.end());
  for (std::size_t i = 0; i < values.size(); ++i)
    for (std::size_t j = 0; j < values.size(); j += 7)
      for (int32_t a : {0, 3})
        for (int32_t b : {0, 3})
          ASSERT_EQ(route_before(values[i], a, values[j], b), old_before(values[i], a, values[j], b))
              << values[i] << "@" << a << " vs " << values[j] << "@" << b;
  // route_next walks numbers first, then the NaNs by index, then says none is left.
  const std::vector<float> v = {kNaN, 0.5f, kNaN, -kInf, 2.0f, kNaN};
  std::vector<int32_t> order;
  int32_t prev = -1;
  for (std::size_t j = 0; j < v.size(); ++j) {
    prev = kernels::route_next(v.data(), int32_t(v.size()), prev >= 0 ? v[std::size_t(prev)] : 0.0f, prev);
    order.push_back(prev);
  }
  EXPECT_EQ(order, (std::vector<int32_t>{4, 1, 3, 0, 2, 5}));
  EXPECT_EQ(kernels::route_next(v.data(), int32_t(v.size()), v[5], 5), -1);
}

TEST(MoeRoutingNaN, OneNaNLogitRoutesAsIfItWereMinusInfinity) {
  for (const auto& [name, m] : nan_configs()) {
    if (!nan_routes_as_minus_inf(m)) continue;
    SCOPED_TRACE(name);
    const int64_t E = m.num_experts, T = 64;
    std::mt19937_64 rng(21);
    std::uniform_int_distribution<int64_t> pick(0, E - 1);
    std::vector<float> with_nan = normal_values(rng, std::size_t(T * E), 1.5f), with_inf = with_nan;
    for (int64_t t = 0; t < T; ++t) {
      const int64_t e = t == 0 ? 0 : t == 1 ? E - 1 : pick(rng);  // the first and the last expert included
      with_nan[std::size_t(t * E + e)] = kNaN;
      with_inf[std::size_t(t * E + e)] = -kInf;
    }
    // No score bias: a -inf logit's sigmoid score 0 then ranks below every other expert of its group
    // and, softmax, its probability 0 below every other probability, as NaN does.
    const cpu::Routing got = route_kernel(m, with_nan, {}), want = route_kernel(m, with_inf, {});
    expect_valid(got, E);
    expect_same(got, want);  // the NaN expert is never chosen, and no other weight changes
  }
}

TEST(MoeRoutingNaN, AllNaNLogitsStayInRange) {
  for (const auto& [name, m] : nan_configs()) {
    SCOPED_TRACE(name);
    const int64_t E = m.num_experts, k = m.experts_per_token, T = 4;
    std::mt19937_64 rng(31);
    const std::vector<float> logits(std::size_t(T * E), kNaN);
    const std::vector<float> bias = sigmoid_routing(m) ? normal_values(rng, std::size_t(E), 0.5f) : std::vector<float>{};
    for (const auto& b : {std::vector<float>{}, bias}) {
      const cpu::Routing r = route_kernel(m, logits, b);
      expect_valid(r, E);
      expect_same(route_kernel(m, logits, b), r);  // deterministic
      if (m.n_group == 1) {  // every choice NaN: the lowest indices
        for (int64_t t = 0; t < T; ++t)
          for (int64_t j = 0; j < k; ++j) EXPECT_EQ(r.experts[std::size_t(t * k + j)], j);
      }
    }
  }
}

TEST(MoeRoutingNaN, NaNLogitsWithABiasStayInRange) {
  for (const auto& [name, m] : nan_configs()) {
    if (!sigmoid_routing(m)) continue;
    SCOPED_TRACE(name);
    const int64_t E = m.num_experts, T = 96;
    std::mt19937_64 rng(41);
    std::bernoulli_distribution nan_logit(0.3);
    std::uniform_int_distribution<int64_t> pick(0, E - 1);
    std::vector<float> logits = normal_values(rng, std::size_t(T * E), 1.5f);
    for (int64_t t = 0; t < T; ++t) {
      if (t % 3 == 0) {
        logits[std::size_t(t * E + pick(rng))] = kNaN;  // one NaN
      } else {
        for (int64_t e = 0; e < E; ++e)
          if (nan_logit(rng)) logits[std::size_t(t * E + e)] = kNaN;  // many
      }
    }
    std::vector<float> bias = normal_values(rng, std::size_t(E), 0.5f);  // large enough to reorder choices
    for (int nan_bias = 0; nan_bias < 2; ++nan_bias) {
      if (nan_bias) bias[std::size_t(pick(rng))] = kNaN;  // a NaN in the bias itself
      const cpu::Routing r = route_kernel(m, logits, bias);
      expect_valid(r, E);
      expect_same(route_kernel(m, logits, bias), r);  // deterministic
    }
  }
}

TEST(MoeRoutingNaN, CpuRouteMatchesTheKernelWithNaNLogits) {
  // NaN logits reach cpu::route through the router's bias: logit e = h[e] + b[e] (identity router).
  for (const auto& [name, m] : nan_configs()) {
    SCOPED_TRACE(name);
    const int64_t E = m.num_experts, T = 32;
    std::mt19937_64 rng(51);
    std::uniform_int_distribution<int64_t> pick(0, E - 1);
    const std::vector<float> h = normal_values(rng, std::size_t(T * E), 1.5f);
    const std::vector<float> score_bias =
        sigmoid_routing(m) ? normal_values(rng, std::size_t(E), 0.3f) : std::vector<float>{};
    for (const int64_t nans : {int64_t(1), int64_t(3), E}) {
      SCOPED_TRACE("NaN experts: " + std::to_string(nans));
      MoeWeights w = identity_router(E, score_bias);
      w.router.b.assign(std::size_t(E), 0.0f);
      for (int64_t i = 0; i < nans; ++i) w.router.b[std::size_t(nans == E ? i : pick(rng))] = kNaN;
      std::vector<float> logits(h.size());
      for (std::size_t i = 0; i < h.size(); ++i) logits[i] = h[i] + w.router.b[i % std::size_t(E)];
      const cpu::Routing cpu_r = cpu::route(m, w, h.data(), T, E);
      expect_valid(cpu_r, E);
      expect_same(cpu_r, route_kernel(m, logits, score_bias));
    }
    // One NaN logit without a score bias: the CPU's choice is the one with that logit at -inf.
    if (!nan_routes_as_minus_inf(m)) continue;
    MoeWeights w = identity_router(E, sigmoid_routing(m) ? std::vector<float>(std::size_t(E), 0.0f) : std::vector<float>{});
    w.router.b.assign(std::size_t(E), 0.0f);
    const std::size_t e = std::size_t(pick(rng));
    w.router.b[e] = kNaN;
    const cpu::Routing with_nan = cpu::route(m, w, h.data(), T, E);
    w.router.b[e] = -kInf;
    expect_valid(with_nan, E);
    expect_same(with_nan, cpu::route(m, w, h.data(), T, E));
  }
}

TEST(MoeRoutingNaN, CpuRouteWithANaNHiddenStateStaysInRange) {
  // A NaN hidden unit makes that token's logits NaN (0 * NaN = NaN in the router matmul); the
  // other tokens route as without it.
  for (const auto& [name, m] : nan_configs()) {
    SCOPED_TRACE(name);
    const int64_t E = m.num_experts, k = m.experts_per_token, T = 8;
    std::mt19937_64 rng(61);
    const MoeWeights w = identity_router(E, sigmoid_routing(m) ? normal_values(rng, std::size_t(E), 0.3f)
                                                               : std::vector<float>{});
    const std::vector<float> clean = normal_values(rng, std::size_t(T * E), 1.5f);
    std::vector<float> h = clean;
    h[std::size_t(3 * E + 1)] = kNaN;  // token 3
    const cpu::Routing r = cpu::route(m, w, h.data(), T, E), ref = cpu::route(m, w, clean.data(), T, E);
    expect_valid(r, E);
    for (int64_t t = 0; t < T; ++t) {
      if (t == 3) continue;
      for (int64_t j = 0; j < k; ++j)
        EXPECT_EQ(r.experts[std::size_t(t * k + j)], ref.experts[std::size_t(t * k + j)]) << "token " << t;
    }
  }
}

}  // namespace layertap

namespace layertap {

// Replaying a recorded choice (verify): the backend's own choice replays bit for bit, weights
// included; an expert far below the k-th, or in a group far below the kept ones, is implausible;
// one within the bf16 noise of the k-th is not.
TEST(MoeRoutingReplay, OwnChoiceReplaysExactly) {
  std::mt19937 rng(7);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  const int64_t E = 8, T = 16;
  std::vector<float> h(std::size_t(T * E));
  for (float& v : h) v = n01(rng);
  for (const MoeConfig& m :
       {deepseek(E, 2, 4, 2), deepseek(E, 3, 1, 1, false, 1.0), qwen(E, 2, true), topk_softmax(E, 3),
        topk_sigmoid(E, 1), topk_sigmoid(E, 3)}) {
    const MoeWeights w = identity_router(E, std::vector<float>(std::size_t(E), 0.1f));
    const cpu::Routing own = cpu::route(m, w, h.data(), T, E);
    const cpu::Routing replay = cpu::route_given(m, w, h.data(), T, E, own.experts.data());
    EXPECT_EQ(replay.experts, own.experts);
    EXPECT_EQ(replay.weights, own.weights);  // the same float operations: bit for bit
    EXPECT_EQ(cpu::implausible_choice(m, w, h.data(), T, E, own.experts.data(), 5e-2), "");
  }
}

TEST(MoeRoutingReplay, FarChoicesAreImplausibleNearOnesAreNot) {
  const int64_t E = 8;
  // One token (identity router: h holds the logits); groups of 2, the best 2 groups kept.
  const std::vector<float> logits = {4.0f, 3.9f, 3.0f, 2.9f, -4.0f, -4.1f, -3.0f, -3.2f};
  const MoeConfig m = deepseek(E, 2, 4, 2);
  const MoeWeights w = identity_router(E, std::vector<float>(std::size_t(E), 0.0f));
  const cpu::Routing own = cpu::route(m, w, logits.data(), 1, E);
  ASSERT_EQ(own.experts, (std::vector<int32_t>{0, 1}));
  // |h| = 10.0, |w_e| = 1, H = 8: at the verify bound each value may move by 0.27 (6 x 5e-2 x
  // 10.0 / sqrt(8) / 4), enough to swap expert 1 (0.980) for expert 2 (0.953) or 3 (0.948), not to
  // keep the group of expert 4 (0.018 + 0.016 against 1.96 and 1.90).
  const std::vector<int32_t> near = {0, 2}, far = {0, 4}, far_in_kept = {0, 3};
  EXPECT_EQ(cpu::implausible_choice(m, w, logits.data(), 1, E, near.data(), 5e-2), "");
  EXPECT_NE(cpu::implausible_choice(m, w, logits.data(), 1, E, far.data(), 5e-2).find("expert 4 is in group 2"),
            std::string::npos);
  // With a tiny bound (a float32 output) even the near swap is implausible.
  EXPECT_NE(cpu::implausible_choice(m, w, logits.data(), 1, E, near.data(), 1e-4).find("expert 2 has routing value"),
            std::string::npos);
  EXPECT_EQ(cpu::implausible_choice(m, w, logits.data(), 1, E, far_in_kept.data(), 5e-2), "");
  // Ids out of range or chosen twice cannot be replayed.
  const std::vector<int32_t> outside = {0, 8}, twice = {1, 1};
  EXPECT_NE(cpu::implausible_choice(m, w, logits.data(), 1, E, outside.data(), 5e-2).find("outside [0, 8)"),
            std::string::npos);
  EXPECT_THROW(cpu::route_given(m, w, logits.data(), 1, E, twice.data()), Error);
}

// ---------------------------------------------------------------------------------------------
// cpu::moe_ffn

namespace {

Linear random_linear(std::mt19937_64& rng, int64_t out, int64_t in) {
  Linear l;
  l.out = out;
  l.in = in;
  l.w = normal_values(rng, std::size_t(out * in), 0.5f);
  return l;
}

MlpWeights random_mlp(std::mt19937_64& rng, int64_t H, int64_t I) {
  return {random_linear(rng, I, H), random_linear(rng, I, H), random_linear(rng, H, I)};
}

// down(silu(gate(x)) * up(x)) of one row x [H], in double.
std::vector<double> direct_mlp(const MlpWeights& m, const std::vector<double>& x) {
  const int64_t I = m.gate.out, H = m.gate.in;
  std::vector<double> a(static_cast<std::size_t>(I)), y(static_cast<std::size_t>(H), 0.0);
  for (int64_t i = 0; i < I; ++i) {
    double g = 0, u = 0;
    for (int64_t c = 0; c < H; ++c) {
      g += double(m.gate.w[std::size_t(i * H + c)]) * x[std::size_t(c)];
      u += double(m.up.w[std::size_t(i * H + c)]) * x[std::size_t(c)];
    }
    a[std::size_t(i)] = g / (1 + std::exp(-g)) * u;
  }
  for (int64_t c = 0; c < H; ++c)
    for (int64_t i = 0; i < I; ++i) y[std::size_t(c)] += double(m.down.w[std::size_t(c * I + i)]) * a[std::size_t(i)];
  return y;
}

}  // namespace

// Llama-4's experts see h * w and their outputs are summed unweighted; the other families'
// see h and their outputs are weighted. Two of four experts on this rank (the others' pairs
// skipped), top 2, a shared expert of the unweighted h.
TEST(MoeFfn, InputWeightedExpertsMatchADirectComputation) {
  const int64_t H = 6, I = 5, T = 4, k = 2;
  std::mt19937_64 rng(71);
  MoeWeights w;
  w.first_expert = 1;
  w.routed = {random_mlp(rng, H, I), random_mlp(rng, H, I)};  // experts 1 and 2
  w.shared = random_mlp(rng, H, I);
  cpu::Routing r;
  r.k = k;
  r.experts = {1, 0, 2, 1, 3, 0, 2, 3};  // token 2 routed to no expert here
  r.weights = {0.9f, 0.3f, 0.6f, 0.45f, 0.8f, 0.2f, 0.35f, 0.7f};
  const std::vector<float> h = normal_values(rng, std::size_t(T * H), 1.5f);
  double apart = 0;  // the largest difference between the two references
  std::vector<std::vector<double>> want(2, std::vector<double>(std::size_t(T * H)));
  for (int weighted = 0; weighted < 2; ++weighted)
    for (int64_t t = 0; t < T; ++t) {
      const std::vector<double> ht(h.begin() + t * H, h.begin() + (t + 1) * H);
      std::vector<double> o = direct_mlp(*w.shared, ht);
      for (int64_t j = 0; j < k; ++j) {
        const int64_t e = r.experts[std::size_t(t * k + j)] - w.first_expert;
        if (e < 0 || e >= 2) continue;
        const float wt = r.weights[std::size_t(t * k + j)];
        std::vector<double> x = ht;
        if (weighted)  // the product in float32, as moe_ffn and transformers form it
          for (int64_t c = 0; c < H; ++c) x[std::size_t(c)] = double(h[std::size_t(t * H + c)] * wt);
        const std::vector<double> y = direct_mlp(w.routed[std::size_t(e)], x);
        for (int64_t c = 0; c < H; ++c) o[std::size_t(c)] += weighted ? y[std::size_t(c)] : wt * y[std::size_t(c)];
      }
      std::copy(o.begin(), o.end(), want[std::size_t(weighted)].begin() + t * H);
    }
  for (std::size_t i = 0; i < want[0].size(); ++i) apart = std::max(apart, std::fabs(want[0][i] - want[1][i]));
  EXPECT_GT(apart, 0.1);  // the two rules differ: the test tells them apart
  for (const bool weighted : {false, true}) {
    SCOPED_TRACE(weighted ? "input weighted" : "output weighted");
    std::vector<float> out(std::size_t(T * H));
    cpu::moe_ffn(w, r, h.data(), T, H, out.data(), GatedActivation{}, weighted);
    // float32 sums of a few products of values up to about 5 against double: some float32 units
    // (6e-7 seen), bounded by 1e-5.
    for (std::size_t i = 0; i < out.size(); ++i)
      EXPECT_NEAR(out[i], want[std::size_t(weighted)][i], 1e-5 * (1 + std::fabs(want[std::size_t(weighted)][i])))
          << "element " << i;
  }
}

TEST(RoutingRecord, TokenAndLayerMajorAreInverses) {
  const std::vector<std::vector<int32_t>> per_layer = {{0, 1, 2, 3, 4, 5}, {6, 7, 0, 1, 2, 3}};  // M 2, T 3, k 2
  const std::vector<int16_t> rows = token_major_routing(per_layer, 3, 2);
  EXPECT_EQ(rows, (std::vector<int16_t>{0, 1, 6, 7, 2, 3, 0, 1, 4, 5, 2, 3}));
  EXPECT_EQ(layer_major_routing(rows, 2, 2), per_layer);
  EXPECT_THROW(layer_major_routing({1, 2, 3}, 2, 2), Error);
}

}  // namespace layertap
