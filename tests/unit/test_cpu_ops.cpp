// CPU operators against direct formulas; attention also against packing (a packed batch must give
// each sample exactly what it gets alone).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <utility>

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

// Naive causal attention for a single sample, double accumulation: T queries, the last positions
// of earlier + T keys; sinks [heads] or null (GPT-OSS: a logit in each row's softmax, no value);
// chunk > 0: key j is seen only if j / chunk == p / chunk (Llama-4's chunked attention), with the
// window as well when both are given.
std::vector<float> naive_attention(const std::vector<float>& q, const std::vector<float>& k,
                                   const std::vector<float>& v, int64_t T, int64_t heads, int64_t kvh,
                                   int64_t hd, int64_t window, int64_t earlier = 0, const float* sinks = nullptr,
                                   int64_t chunk = 0) {
  std::vector<float> out(std::size_t(T * heads * hd));
  for (int64_t h = 0; h < heads; ++h) {
    const int64_t g = h / (heads / kvh);
    for (int64_t i = 0; i < T; ++i) {
      const int64_t p = earlier + i;  // the query's own key
      const auto seen = [&](int64_t j) {
        return (window == 0 || j > p - window) && (chunk == 0 || j / chunk == p / chunk);
      };
      std::vector<double> w(std::size_t(earlier + T), 0.0);
      double mx = sinks != nullptr ? double(sinks[h]) : -1e300, sum = 0;
      for (int64_t j = 0; j <= p; ++j) {
        if (!seen(j)) continue;
        double s = 0;
        for (int64_t d = 0; d < hd; ++d) s += double(q[(i * heads + h) * hd + d]) * k[(j * kvh + g) * hd + d];
        w[j] = s / std::sqrt(double(hd));
        mx = std::max(mx, w[j]);
      }
      for (int64_t j = 0; j <= p; ++j)
        if (seen(j)) sum += (w[j] = std::exp(w[j] - mx));
      if (sinks != nullptr) sum += std::exp(double(sinks[h]) - mx);
      for (int64_t d = 0; d < hd; ++d) {
        double acc = 0;
        for (int64_t j = 0; j <= p; ++j)
          if (seen(j)) acc += w[j] / sum * v[(j * kvh + g) * hd + d];
        out[(i * heads + h) * hd + d] = float(acc);
      }
    }
  }
  return out;
}

// A packed batch for the sink tests: segment 0 continues a sample (its queries are the last
// positions of its keys), the others are whole. q [Tq, heads*hd], k and v [Tk, kvh*hd].
struct SinkBatch {
  static constexpr int64_t heads = 4, kvh = 2, hd = 8;
  std::vector<int64_t> q_offsets = {0, 6, 7, 40}, kv_offsets = {0, 6 + 9, 16, 49};  // 9 earlier keys
  std::vector<float> q = random_vec(std::size_t(40 * heads * hd), 11), k = random_vec(std::size_t(49 * kvh * hd), 12),
                     v = random_vec(std::size_t(49 * kvh * hd), 13);

  std::vector<float> run(int64_t window, const float* sinks, int64_t chunk = 0) const {
    std::vector<float> out(q.size());
    cpu::causal_attention(q.data(), q_offsets, k.data(), v.data(), kv_offsets, out.data(),
                          {heads, kvh, hd, hd, 1.0f / std::sqrt(float(hd)), window, sinks, chunk});
    return out;
  }
  // Segment s's rows of the naive reference.
  std::vector<float> naive(std::size_t s, int64_t window, const float* sinks, int64_t chunk = 0) const {
    const int64_t t0 = q_offsets[s], n = q_offsets[s + 1] - t0, kv0 = kv_offsets[s], nk = kv_offsets[s + 1] - kv0;
    const auto rows = [](const std::vector<float>& a, int64_t r0, int64_t r, int64_t width) {
      return std::vector<float>(a.begin() + r0 * width, a.begin() + (r0 + r) * width);
    };
    return naive_attention(rows(q, t0, n, heads * hd), rows(k, kv0, nk, kvh * hd), rows(v, kv0, nk, kvh * hd), n,
                           heads, kvh, hd, window, nk - n, sinks, chunk);
  }
  // The largest |scaled score| of any (query, key) pair, attended or not.
  float max_score() const {
    float mx = 0;
    for (int64_t i = 0; i < q_offsets.back(); ++i)
      for (int64_t j = 0; j < kv_offsets.back(); ++j)
        for (int64_t h = 0; h < heads; ++h) {
          float s = 0;
          for (int64_t d = 0; d < hd; ++d) s += q[(i * heads + h) * hd + d] * k[(j * kvh + h / (heads / kvh)) * hd + d];
          mx = std::max(mx, std::fabs(s) / std::sqrt(float(hd)));
        }
    return mx;
  }
};

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

TEST(CpuOps, AttentionSinksMatchNaiveWithGqaWindowAndChunk) {
  const SinkBatch b;
  const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};  // [heads], the scores' order of size
  for (int64_t window : {0, 4}) {
    const std::vector<float> out = b.run(window, sinks.data());
    for (std::size_t s = 0; s + 1 < b.q_offsets.size(); ++s) {
      const std::vector<float> want = b.naive(s, window, sinks.data());
      const std::size_t o = std::size_t(b.q_offsets[s] * b.heads * b.hd);
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(out[o + i], want[i], 1e-5) << "segment " << s << " window " << window;
    }
  }
}

// A sink 20 above every score takes all but e^-20 of each row's mass: outputs near 0 (33 keys *
// e^-20 * |v| < 5 is 3.4e-7), and as close to the reference, relative to their size, as usual.
TEST(CpuOps, AttentionDominantSinkLeavesOutputsNearZero) {
  const SinkBatch b;
  const std::vector<float> sinks(std::size_t(b.heads), b.max_score() + 20.0f);
  const std::vector<float> out = b.run(0, sinks.data());
  for (std::size_t s = 0; s + 1 < b.q_offsets.size(); ++s) {
    const std::vector<float> want = b.naive(s, 0, sinks.data());
    float size = 0;  // the segment's largest |output|
    for (const float w : want) size = std::max(size, std::fabs(w));
    ASSERT_LT(size, 3.4e-7f) << "segment " << s;
    const std::size_t o = std::size_t(b.q_offsets[s] * b.heads * b.hd);
    for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(out[o + i], want[i], 1e-5 * size) << "segment " << s;
  }
}

// exp(-1e4 - m) is 0 in float32 and the max is a score's: bit for bit the softmax without sinks,
// which is also what null sinks and the overloads without them give.
TEST(CpuOps, AttentionNegligibleOrNullSinksEqualNoSinks) {
  const SinkBatch b;
  const std::vector<float> sinks(std::size_t(b.heads), -1e4f);
  for (int64_t window : {0, 4}) {
    const std::vector<float> none = b.run(window, nullptr), negligible = b.run(window, sinks.data());
    EXPECT_EQ(std::memcmp(none.data(), negligible.data(), none.size() * sizeof(float)), 0) << "window " << window;
    for (std::size_t s = 0; s + 1 < b.q_offsets.size(); ++s) {
      const std::vector<float> want = b.naive(s, window, nullptr);
      const std::size_t o = std::size_t(b.q_offsets[s] * b.heads * b.hd);
      for (std::size_t i = 0; i < want.size(); ++i) ASSERT_NEAR(none[o + i], want[i], 1e-5) << "segment " << s;
    }
  }
  // Whole samples through the overload without sinks: the same as the shape with null sinks.
  const std::vector<int64_t> offsets = {0, 6, 7, 40};
  std::vector<float> old_api(b.q.size()), shape_api(b.q.size());
  cpu::causal_attention(b.q.data(), b.k.data(), b.v.data(), old_api.data(), offsets, b.heads, b.kvh, b.hd, 3);
  cpu::causal_attention(b.q.data(), offsets, b.k.data(), b.v.data(), offsets, shape_api.data(),
                        {b.heads, b.kvh, b.hd, b.hd, 1.0f / std::sqrt(float(b.hd)), 3, nullptr});
  EXPECT_EQ(std::memcmp(old_api.data(), shape_api.data(), old_api.size() * sizeof(float)), 0);
}

// Llama-4's chunked attention over whole samples: 11 tokens in chunks of 4 (keys 0-3 | 4-7 |
// 8-10), samples of 1 and 4 tokens (one chunk, ending on its boundary), and 600 tokens, whose
// query blocks of 256 start mid-chunk for chunk 100; with a window as well, the intersection.
TEST(CpuOps, AttentionChunkMatchesNaivePerSampleWithGqa) {
  const int64_t heads = 6, kvh = 2, hd = 5;
  const std::vector<int64_t> offsets = {0, 11, 12, 16, 616};
  const int64_t T = offsets.back();
  const auto q = random_vec(std::size_t(T * heads * hd), 21);
  const auto k = random_vec(std::size_t(T * kvh * hd), 22);
  const auto v = random_vec(std::size_t(T * kvh * hd), 23);
  // (chunk, window)
  const std::vector<std::pair<int64_t, int64_t>> masks = {{4, 0}, {5, 0}, {100, 0}, {4, 3}, {100, 30}};
  for (const auto& [chunk, window] : masks) {
    std::vector<float> out(q.size());
    cpu::causal_attention(q.data(), offsets, k.data(), v.data(), offsets, out.data(),
                          {heads, kvh, hd, hd, 1.0f / std::sqrt(float(hd)), window, nullptr, chunk});
    for (std::size_t s = 0; s + 1 < offsets.size(); ++s) {
      const int64_t t0 = offsets[s], n = offsets[s + 1] - t0;
      auto slice = [&](const std::vector<float>& a, int64_t width) {
        return std::vector<float>(a.begin() + t0 * width, a.begin() + (t0 + n) * width);
      };
      const auto want = naive_attention(slice(q, heads * hd), slice(k, kvh * hd), slice(v, kvh * hd), n, heads,
                                        kvh, hd, window, 0, nullptr, chunk);
      for (std::size_t i = 0; i < want.size(); ++i)
        ASSERT_NEAR(out[std::size_t(t0 * heads * hd) + i], want[i], 1e-5)
            << "sample " << s << " chunk " << chunk << " window " << window;
    }
  }
}

// Chunked prefill: segment 0's queries are positions 9..14 of its keys, so chunks of 4 split them
// at position 12 (and 5 at 10), counted from the sample's start, not the batch's; with and
// without sinks.
TEST(CpuOps, AttentionChunkFollowsPositionsOfAContinuedSample) {
  const SinkBatch b;
  const std::vector<float> sinks = {0.5f, -1.0f, 2.0f, 0.0f};
  for (const int64_t chunk : {4, 5})
    for (const float* sk : {static_cast<const float*>(nullptr), sinks.data()}) {
      const std::vector<float> out = b.run(0, sk, chunk);
      for (std::size_t s = 0; s + 1 < b.q_offsets.size(); ++s) {
        const std::vector<float> want = b.naive(s, 0, sk, chunk);
        const std::size_t o = std::size_t(b.q_offsets[s] * b.heads * b.hd);
        for (std::size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(out[o + i], want[i], 1e-5)
              << "segment " << s << " chunk " << chunk << " sinks " << (sk != nullptr);
      }
    }
}

// A chunk at least as long as every sample (keys included) is no mask at all: bit for bit plain
// causal attention. Chunk 1: each query sees only its own key, whose softmax weight is exactly 1,
// so the output is that key's value, exactly.
TEST(CpuOps, AttentionChunkLongerThanSampleIsCausalAndChunkOneIsOwnValue) {
  const SinkBatch b;  // at most 33 keys per segment
  const std::vector<float> causal = b.run(0, nullptr);
  for (const int64_t chunk : {33, 34, 4096}) {
    const std::vector<float> out = b.run(0, nullptr, chunk);
    EXPECT_EQ(std::memcmp(out.data(), causal.data(), out.size() * sizeof(float)), 0) << "chunk " << chunk;
  }
  const std::vector<float> own = b.run(0, nullptr, 1);
  for (std::size_t s = 0; s + 1 < b.q_offsets.size(); ++s) {
    const int64_t earlier = (b.kv_offsets[s + 1] - b.kv_offsets[s]) - (b.q_offsets[s + 1] - b.q_offsets[s]);
    for (int64_t t = b.q_offsets[s]; t < b.q_offsets[s + 1]; ++t) {
      const int64_t key = b.kv_offsets[s] + earlier + (t - b.q_offsets[s]);  // the query's own key row
      for (int64_t h = 0; h < b.heads; ++h)
        for (int64_t d = 0; d < b.hd; ++d)
          ASSERT_EQ(own[std::size_t((t * b.heads + h) * b.hd + d)],
                    b.v[std::size_t((key * b.kvh + h / (b.heads / b.kvh)) * b.hd + d)])
              << "token " << t << " head " << h;
    }
  }
}

// GPT-OSS's clamped SwiGLU against a double reference, gates and ups on both sides of both clamps.
// Bound: float32's roundings (g*alpha, exp, 1 + e, 1/x, two products, u + 1: ~8 2^-24 with exp's
// last bit) plus the sigmoid's sensitivity to its input's rounding, |a| (1 - sigmoid(a)) 2^-24.
TEST(CpuOps, ClampedSwigluMatchesDoubleReference) {
  const GatedActivation act{GatedActivation::Kind::ClampedSwiglu, 1.702f, 7.0f};
  std::vector<float> gate, up;
  for (const float g : {-20.0f, -7.5f, -7.0f, -1.0f, -0.25f, 0.0f, 0.3f, 1.0f, 6.99f, 7.0f, 7.01f, 12.0f, 1e4f})
    for (const float u : {-1e4f, -9.0f, -7.0f, -1.5f, -1.0f, 0.0f, 0.5f, 6.5f, 7.0f, 8.25f}) {
      gate.push_back(g);
      up.push_back(u);
    }
  std::vector<float> out(gate.size());
  cpu::gated_activation(gate.data(), up.data(), out.data(), int64_t(gate.size()), act);
  for (std::size_t i = 0; i < gate.size(); ++i) {
    const double g = std::min(double(gate[i]), 7.0), u = std::clamp(double(up[i]), -7.0, 7.0);
    const double a = g * double(act.alpha), sig = 1.0 / (1.0 + std::exp(-a));
    const double want = (u + 1.0) * g * sig;
    const double bound = (8.0 + std::fabs(a) * (1.0 - sig)) * std::ldexp(1.0, -24) * std::fabs(want);
    EXPECT_NEAR(out[i], want, bound) << "gate " << gate[i] << " up " << up[i];
  }
  // torch.clamp keeps NaN.
  const float nan = std::numeric_limits<float>::quiet_NaN(), gn[2] = {nan, 1.0f}, un[2] = {1.0f, nan};
  float on[2];
  cpu::gated_activation(gn, un, on, 2, act);
  EXPECT_TRUE(std::isnan(on[0]) && std::isnan(on[1]));
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

// Packed batch of 3 samples, the first continuing at position 6 (chunked prefill): positions
// 6..17, 0..8, 0..4 cross the multiples 4, 8, 12, 16 of floor_scale 4 (s steps at p + 1 = 4k).
// Bound: float32's roundings of log1p (1 ulp), of attn_scale to float (1/2 ulp), of the product,
// the sum and q * s (1/2 ulp each; the quotient is exact): < 4 2^-24 of |q s|.
TEST(CpuOps, AttentionTemperatureMatchesDoubleFormula) {
  const ModelConfig::Temperature temp{true, 4, 0.1};
  const std::vector<int64_t> offsets{0, 12, 21, 26};
  const int64_t width = 6, first_position = 6;
  std::vector<float> q = random_vec(std::size_t(offsets.back() * width), 21);
  const std::vector<float> in = q;
  cpu::attention_temperature(q.data(), width, offsets, first_position, temp);
  int64_t steps = 0;  // tokens whose s differs from the one before in the same sample
  for (std::size_t s = 0; s + 1 < offsets.size(); ++s) {
    double prev = 1.0;
    for (int64_t t = offsets[s]; t < offsets[s + 1]; ++t) {
      const double p = double(t - offsets[s] + (s == 0 ? first_position : 0));
      const double scale = std::log1p(std::floor((p + 1) / 4)) * 0.1 + 1;
      steps += t > offsets[s] && scale != prev;
      prev = scale;
      for (int64_t i = 0; i < width; ++i) {
        const double want = double(in[std::size_t(t * width + i)]) * scale;
        EXPECT_NEAR(q[std::size_t(t * width + i)], want, 4 * std::ldexp(1.0, -24) * std::fabs(want))
            << "token " << t << " position " << p;
      }
    }
  }
  EXPECT_EQ(steps, 6);  // 8, 12, 16 in the first sample; 4, 8 in the second; 4 in the third
}

}  // namespace layertap
