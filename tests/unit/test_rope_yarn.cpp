// YaRN rotary frequencies and attention factor for the fixtures' configs (the numbers listed in
// tests/fixtures/README.md: ramp weights per frequency, cos/sin scale), and the interleaved layout
// DeepSeek uses (pairs (x0, x1), (x2, x3), ... rotated, written back half-split).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "backend/cpu/ops.hpp"
#include "model/hf_config.hpp"

namespace layertap {
namespace {

ModelConfig fixture(const std::string& model) {
  return load_model_config(std::string(LAYERTAP_FIXTURES) + "/models/" + model + "/config.json");
}

// inv_freq_i = theta^(-2i/dim) * (w_i + (1 - w_i) / factor) for the extrapolation weights w.
void expect_yarn_frequencies(const cpu::Rope& rope, double theta, double factor, const std::vector<double>& w) {
  ASSERT_EQ(rope.inv_freq().size(), w.size());
  const double dim = double(2 * w.size());
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double base = std::pow(theta, -2.0 * double(i) / dim);
    EXPECT_NEAR(rope.inv_freq()[i], base * (w[i] + (1 - w[i]) / factor), 1e-6 * base) << "frequency " << i;
  }
}

}  // namespace

TEST(RopeYarn, FixtureFrequenciesAndAttentionFactors) {
  const ModelConfig ds = fixture("deepseek_v3");  // x4, beta 32/1, theta 1e4: weights 1, 1, 0.5, 0
  const cpu::Rope ds_rope(ds.rope, ds.mla->qk_rope_head_dim, cpu::Rope::Layout::Interleaved);
  expect_yarn_frequencies(ds_rope, 1e4, 4, {1, 1, 0.5, 0});
  EXPECT_FLOAT_EQ(ds_rope.attention_factor(), 1.0f);

  const ModelConfig kimi = fixture("kimi_k2");  // x32, beta 1/1, theta 5e4: weights 1, 1, 1, 0
  const cpu::Rope kimi_rope(kimi.rope, kimi.mla->qk_rope_head_dim, cpu::Rope::Layout::Interleaved);
  expect_yarn_frequencies(kimi_rope, 5e4, 32, {1, 1, 1, 0});
  EXPECT_NEAR(kimi_rope.attention_factor(), 0.924589296, 1e-7);

  const ModelConfig fp8 = fixture("deepseek_v3_fp8");  // x40
  expect_yarn_frequencies(cpu::Rope(fp8.rope, 8), 1e4, 40, {1, 1, 0.5, 0});
  const ModelConfig k25 = fixture("kimi_k25_int4");  // x64, beta 32/1, theta 5e4
  expect_yarn_frequencies(cpu::Rope(k25.rope, 8), 5e4, 64, {1, 1, 0.5, 0});
}

TEST(RopeYarn, InterleavedPairsAreRotatedAndWrittenHalfSplit) {
  const ModelConfig kimi = fixture("kimi_k2");
  const cpu::Rope rope(kimi.rope, 8, cpu::Rope::Layout::Interleaved);
  const float af = rope.attention_factor();
  const std::vector<float> x0 = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> x = x0;
  x.insert(x.end(), x0.begin(), x0.end());  // one sample of two tokens, one head
  rope.apply(x.data(), 1, {0, 2});
  for (std::size_t i = 0; i < 4; ++i) {
    // Position 0: no rotation, but de-interleaved and scaled by the attention factor.
    EXPECT_NEAR(x[i], x0[2 * i] * af, 1e-6) << i;
    EXPECT_NEAR(x[4 + i], x0[2 * i + 1] * af, 1e-6) << i;
    // Position 1: pair i = (x[2i], x[2i+1]) rotated by inv_freq_i.
    const double a = rope.inv_freq()[i], c = std::cos(a) * af, s = std::sin(a) * af;
    EXPECT_NEAR(x[8 + i], x0[2 * i] * c - x0[2 * i + 1] * s, 1e-5) << i;
    EXPECT_NEAR(x[8 + 4 + i], x0[2 * i + 1] * c + x0[2 * i] * s, 1e-5) << i;
  }
  // Half-split layout pairs x[i] with x[i + 4] instead.
  std::vector<float> y = x0;
  y.insert(y.end(), x0.begin(), x0.end());
  cpu::Rope(kimi.rope, 8, cpu::Rope::Layout::HalfSplit).apply(y.data(), 1, {0, 2});
  const double c0 = std::cos(rope.inv_freq()[0]) * af, s0 = std::sin(rope.inv_freq()[0]) * af;
  EXPECT_NEAR(y[8], x0[0] * c0 - x0[4] * s0, 1e-5);
  EXPECT_NEAR(y[12], x0[4] * c0 + x0[0] * s0, 1e-5);
}

}  // namespace layertap
