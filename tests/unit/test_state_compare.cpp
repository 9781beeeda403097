// verify's comparison: bf16 rounding of rows with one dominant dimension passes (the old relative
// Frobenius bound failed them), while a state of the neighbouring layer, a token shift or a NaN fails.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.hpp"
#include "core/state_compare.hpp"

namespace layertap {
namespace {

// Rows like a real model's residual stream: values near 1 and one "massive activation" of 2.5e4.
std::vector<float> rows(int64_t T, int64_t H, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, 1.0f);
  std::vector<float> x(std::size_t(T * H));
  for (float& v : x) v = d(rng);
  for (int64_t t = 0; t < T; ++t) x[std::size_t(t * H + 7)] = 2.5e4f + float(t);
  return x;
}

std::vector<float> bf16_rounded(std::vector<float> x) {
  for (float& v : x) v = bf16_to_float(float_to_bf16(v));
  return x;
}

TEST(StateCompare, Bf16RoundingOfDominatedRowsPasses) {
  const int64_t T = 64, H = 576;
  const auto run = rows(T, H, 1);
  // The recompute differs from the stored run by float32 noise (another packing of the batch).
  auto recomputed = run;
  std::mt19937 rng(2);
  std::uniform_real_distribution<float> noise(-1e-6f, 1e-6f);
  for (float& v : recomputed) v *= 1.0f + noise(rng);
  const auto stored = bf16_rounded(run);
  const StateMismatch m = compare_states(stored.data(), H, recomputed.data(), T, H, DType::BF16);
  EXPECT_LE(m.ratio, 1.0) << "row " << m.row << " col " << m.col;
  // The old bound (relative Frobenius 2^-8) is too tight for such rows whenever the big element
  // sits far from a bf16 value: rounding 2.5e4 moves it by up to 64, i.e. 2.5e-3 of the row norm.
  double num = 0, den = 0;
  for (std::size_t i = 0; i < stored.size(); ++i) {
    num += (double(stored[i]) - recomputed[i]) * (double(stored[i]) - recomputed[i]);
    den += double(recomputed[i]) * recomputed[i];
  }
  EXPECT_GT(std::sqrt(num / den), 1e-3);
}

TEST(StateCompare, Float32StorageAllowsRecomputeNoiseOnly) {
  const int64_t T = 8, H = 64;
  const auto x = rows(T, H, 3);
  auto y = x;
  for (float& v : y) v *= 1.0f + 3e-6f;
  EXPECT_LE(compare_states(y.data(), H, x.data(), T, H, DType::F32).ratio, 1.0);
  y[5] *= 1.01f;  // one element off by 1%
  const StateMismatch m = compare_states(y.data(), H, x.data(), T, H, DType::F32);
  EXPECT_GT(m.ratio, 10.0);
  EXPECT_EQ(m.row, 0);
  EXPECT_EQ(m.col, 5);
}

TEST(StateCompare, NeighbouringLayerTokenShiftAndNanFail) {
  const int64_t T = 32, H = 576;
  const auto layer_k = rows(T, H, 4);
  // The next layer's state: the residual stream plus an update of about 10% of its typical size,
  // the dominant dimension unchanged.
  auto layer_k1 = layer_k;
  std::mt19937 rng(5);
  std::normal_distribution<float> d(0.0f, 0.1f);
  for (float& v : layer_k1) v += d(rng);
  const auto stored = bf16_rounded(layer_k1);
  EXPECT_GT(compare_states(stored.data(), H, layer_k.data(), T, H, DType::BF16).ratio, 5.0);

  std::vector<float> shifted(stored.size());  // every token's state one position later
  std::copy(stored.begin(), stored.end() - H, shifted.begin() + H);
  std::copy(stored.begin(), stored.begin() + H, shifted.begin());
  EXPECT_GT(compare_states(shifted.data(), H, layer_k1.data(), T, H, DType::BF16).ratio, 5.0);

  auto with_nan = bf16_rounded(layer_k);
  with_nan[100] = NAN;
  EXPECT_FALSE(compare_states(with_nan.data(), H, layer_k.data(), T, H, DType::BF16).ratio <= 1.0);
}

TEST(StateCompare, StridedPointsOfOneSample) {
  // stored [T, P, H], point 1 against recomputed [T, H].
  const int64_t T = 4, P = 3, H = 16;
  const auto x = rows(T, H, 6);
  std::vector<float> stored(std::size_t(T * P * H), 1e9f);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < H; ++h) stored[std::size_t((t * P + 1) * H + h)] = bf16_to_float(float_to_bf16(x[std::size_t(t * H + h)]));
  EXPECT_LE(compare_states(stored.data() + H, P * H, x.data(), T, H, DType::BF16).ratio, 1.0);
  EXPECT_GT(compare_states(stored.data(), P * H, x.data(), T, H, DType::BF16).ratio, 1e3);
}

}  // namespace
}  // namespace layertap
