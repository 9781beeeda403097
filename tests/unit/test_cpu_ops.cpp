// CPU operators against direct formulas; attention also against packing (a packed batch must give
// each sample exactly what it gets alone).
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "backend/cpu/ops.hpp"

namespace layertap {
namespace {

std::vector<float> random_vec(std::size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Naive causal attention for a single sample, double accumulation.
std::vector<float> naive_attention(const std::vector<float>& q, const std::vector<float>& k,
                                   const std::vector<float>& v, int64_t T, int64_t heads, int64_t kvh,
                                   int64_t hd, int64_t window) {
  std::vector<float> out(std::size_t(T * heads * hd));
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t g = h / (heads / kvh);
    for (int64_t i = 0; i < T; ++i) {
      std::vector<double> w(std::size_t(T), 0.0);
      double mx = -1e300, sum = 0;
      const int64_t first = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
      for (int64_t j = first; j <= i; ++j) {
        double s = 0;
        for (int64_t d = 0; d < hd; ++d) s += double(q[(i * heads + h) * hd + d]) * k[(j * kvh + g) * hd + d];
        w[j] = s / std::sqrt(double(hd));
        mx = std::max(mx, w[j]);
      }
      for (int64_t j = first; j <= i; ++j) sum += (w[j] = std::exp(w[j] - mx));
      for (int64_t d = 0; d < hd; ++d) {
        double acc = 0;
        for (int64_t j = first; j <= i; ++j) acc += w[j] / sum * v[(j * kvh + g) * hd + d];
        out[(i * heads + h) * hd + d] = float(acc);
      }
    }
  }
  return out;
}

}  // namespace

TEST(CpuOps, RmsNormMatchesFormula) {
  const auto x = random_vec(3 * 7, 1), w = random_vec(7, 2);
  std::vector<float> y(x.size());
  cpu::rms_norm(x.data(), w.data(), y.data(), 3, 7, 1e-6f);
  for (int r = 0; r < 3; ++r) {
    double ss = 0;
    for (int c = 0; c < 7; ++c) ss += double(x[r * 7 + c]) * x[r * 7 + c];
    for (int c = 0; c < 7; ++c)
      EXPECT_NEAR(y[r * 7 + c], w[c] * x[r * 7 + c] / std::sqrt(ss / 7 + 1e-6), 1e-5);
  }
}

TEST(CpuOps, AttentionMatchesNaivePerSampleWithGqaAndWindow) {
  const int64_t heads = 6, kvh = 2, hd = 5;
  for (int64_t window : {0, 3, 300}) {
    // Four samples: 1, 7, 13 and 600 tokens; the last spans several query blocks, and window 300
    // starts its blocks' keys past the sample's first token.
    const std::vector<int64_t> offsets = {0, 1, 8, 21, 621};
    const int64_t T = offsets.back();
    const auto q = random_vec(std::size_t(T * heads * hd), 3);
    const auto k = random_vec(std::size_t(T * kvh * hd), 4);
    const auto v = random_vec(std::size_t(T * kvh * hd), 5);
    std::vector<float> out(q.size());
    cpu::causal_attention(q.data(), k.data(), v.data(), out.data(), offsets, heads, kvh, hd, window);
    for (std::size_t s = 0; s + 1 < offsets.size(); ++s) {
      const int64_t t0 = offsets[s], n = offsets[s + 1] - t0;
      auto slice = [&](const std::vector<float>& a, int64_t width) {
        return std::vector<float>(a.begin() + t0 * width, a.begin() + (t0 + n) * width);
      };
      const auto want = naive_attention(slice(q, heads * hd), slice(k, kvh * hd), slice(v, kvh * hd), n, heads,
                                        kvh, hd, window);
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(out[std::size_t(t0 * heads * hd) + i], want[i], 1e-5) << "sample " << s << " window " << window;
    }
  }
}

TEST(CpuOps, RopeRestartsPositionsPerSampleAndRotatesPairs) {
  RopeConfig cfg;
  cfg.theta = 10000.0;
  const cpu::Rope rope(cfg, 4);
  EXPECT_FLOAT_EQ(rope.inv_freq()[0], 1.0f);
  EXPECT_FLOAT_EQ(rope.inv_freq()[1], 0.01f);
  // Two samples of 2 tokens, 1 head: token 0 of each sample is unchanged (position 0).
  std::vector<float> x = {1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4};
  rope.apply(x.data(), 1, {0, 2, 4});
  for (int t : {0, 2}) EXPECT_EQ(std::vector<float>(x.begin() + t * 4, x.begin() + t * 4 + 4), (std::vector<float>{1, 2, 3, 4}));
  // Position 1: pair (x0, x2) rotated by 1 rad, pair (x1, x3) by 0.01 rad.
  EXPECT_NEAR(x[4], 1 * std::cos(1.0) - 3 * std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[6], 3 * std::cos(1.0) + 1 * std::sin(1.0), 1e-6);
  EXPECT_NEAR(x[5], 2 * std::cos(0.01) - 4 * std::sin(0.01), 1e-6);
  EXPECT_EQ(std::vector<float>(x.begin() + 4, x.begin() + 8), std::vector<float>(x.begin() + 12, x.begin() + 16));
}

TEST(CpuOps, Llama3RopeKeepsHighAndSlowsLowFrequencies) {
  RopeConfig cfg;
  cfg.type = RopeConfig::Type::Llama3;
  cfg.theta = 500000.0;
  cfg.factor = 8;
  cfg.original_max_position_embeddings = 32;
  RopeConfig plain = cfg;
  plain.type = RopeConfig::Type::Default;
  const cpu::Rope scaled(cfg, 16), base(plain, 16);
  EXPECT_EQ(scaled.inv_freq()[0], base.inv_freq()[0]);  // wavelength 2*pi < 32/4: kept
  EXPECT_FLOAT_EQ(scaled.inv_freq()[7], base.inv_freq()[7] / 8);  // wavelength > 32: divided by factor
}

}  // namespace layertap
