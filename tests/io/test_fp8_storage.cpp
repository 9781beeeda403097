// float8_e4m3fn storage (io/fp8_storage, docs/FORMAT.md "Storage options"): the scalar encoder at
// every code and rounding boundary, the per-row quantizer against a plain reference with its error
// statistics (Fp8Fidelity), and those statistics' JSON form and merge.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/dtype.hpp"
#include "io/fp8_storage.hpp"
#include "io_test_util.hpp"

namespace layertap::io {
namespace {

using test::error_of;

// --- float8_e4m3fn encoder ------------------------------------------------------------------------

float next_up(float x) { return std::nextafter(x, std::numeric_limits<float>::infinity()); }
float next_down(float x) { return std::nextafter(x, -std::numeric_limits<float>::infinity()); }

TEST(Fp8Encoder, EveryCodeAndEveryRoundingBoundary) {
  // Codes 0x00..0x7e are the non-negative finite values, increasing.
  for (int c = 0; c <= 0x7e; ++c) {
    const float v = fp8_e4m3fn_to_float(uint8_t(c));
    EXPECT_EQ(float_to_fp8_e4m3fn(v), c) << "value " << v;
    EXPECT_EQ(float_to_fp8_e4m3fn(-v), c | 0x80) << "value " << -v;
    if (c == 0x7e) break;
    const float w = fp8_e4m3fn_to_float(uint8_t(c + 1));
    ASSERT_LT(v, w);
    const float mid = (v + w) / 2;  // exact in float32
    const int even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(float_to_fp8_e4m3fn(mid), even) << "tie between " << v << " and " << w;
    EXPECT_EQ(float_to_fp8_e4m3fn(next_down(mid)), c) << "just below " << mid;
    EXPECT_EQ(float_to_fp8_e4m3fn(next_up(mid)), c + 1) << "just above " << mid;
  }
}

// The quantizer's vectorized encoder agrees with float_to_fp8_e4m3fn at every boundary: a row
// whose amax is 448 has scale 1, so each value is encoded as is.
TEST(Fp8Encoder, TheRowQuantizerEncodesEveryBoundaryTheSame) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    std::vector<float> row{448.0f};
    for (int c = 0; c < 0x7e; ++c) {
      const float v = fp8_e4m3fn_to_float(uint8_t(c)), w = fp8_e4m3fn_to_float(uint8_t(c + 1)), mid = (v + w) / 2;
      for (float x : {v, mid, next_down(mid), next_up(mid)}) {
        if (dtype == DType::BF16 && bf16_to_float(float_to_bf16(x)) != x) continue;  // not a bf16 value
        row.push_back(x);
        row.push_back(-x);
      }
    }
    std::vector<std::byte> in(row.size() * dtype_size(dtype));
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (dtype == DType::F32) {
        std::memcpy(in.data() + 4 * i, &row[i], 4);
      } else {
        const uint16_t b = float_to_bf16(row[i]);
        std::memcpy(in.data() + 2 * i, &b, 2);
      }
    }
    std::vector<uint8_t> codes(row.size());
    float scale = 0;
    quantize_fp8_rows(dtype, in.data(), 1, 1, int64_t(row.size()), codes.data(), &scale, nullptr);
    ASSERT_EQ(scale, 1.0f);
    for (std::size_t i = 0; i < row.size(); ++i)
      EXPECT_EQ(codes[i], float_to_fp8_e4m3fn(row[i])) << dtype_name(dtype) << " value " << row[i];
  }
}

TEST(Fp8Encoder, SaturatesAndKeepsNaN) {
  EXPECT_EQ(fp8_e4m3fn_to_float(0x7e), 448.0f);
  EXPECT_EQ(float_to_fp8_e4m3fn(448.0f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3fn(464.0f), 0x7e);  // the tie with 480 (not a value) goes to 448, as torch
  EXPECT_EQ(float_to_fp8_e4m3fn(465.0f), 0x7e);  // torch gives NaN here; we saturate
  EXPECT_EQ(float_to_fp8_e4m3fn(1e30f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3fn(-1e30f), 0xfe);
  EXPECT_EQ(float_to_fp8_e4m3fn(std::numeric_limits<float>::infinity()), 0x7f);
  EXPECT_EQ(float_to_fp8_e4m3fn(-std::numeric_limits<float>::infinity()), 0xff);
  EXPECT_EQ(float_to_fp8_e4m3fn(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(float_to_fp8_e4m3fn(0x1p-10f), 0x00);  // half the smallest subnormal: tie to even (0)
  EXPECT_EQ(float_to_fp8_e4m3fn(next_up(0x1p-10f)), 0x01);
  EXPECT_EQ(float_to_fp8_e4m3fn(1e-30f), 0x00);
  EXPECT_EQ(float_to_fp8_e4m3fn(-0.0f), 0x80);
  static_assert(float_to_fp8_e4m3fn(1.0f) == 0x38);  // usable at compile time
}

// Reference per-row quantization, written plainly.
void reference_quantize(const std::vector<float>& row, std::vector<uint8_t>& codes, float& scale) {
  float amax = 0;
  for (float v : row)
    if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
  scale = amax / 448.0f;
  codes.resize(row.size());
  for (std::size_t i = 0; i < row.size(); ++i)
    codes[i] = !std::isfinite(row[i]) ? uint8_t((std::signbit(row[i]) ? 0x80 : 0) | 0x7f)
               : scale == 0        ? uint8_t(0)
                                   : float_to_fp8_e4m3fn(row[i] / scale);
}

TEST(Fp8Quantizer, MatchesThePlainReferenceAndBoundsTheError) {
  const int64_t rows = 37, P = 3, H = 200;
  std::vector<uint16_t> in(static_cast<std::size_t>(rows * P * H));
  for (std::size_t i = 0; i < in.size(); ++i) {
    // Values spread over 2^-20..2^12 with one large element per row (as real activations have).
    const uint64_t k = test::mix(i);
    const float v = std::ldexp(1.0f + float(k % 1000) / 1000.0f, int(k % 33) - 20) * ((k >> 20) & 1 ? -1.0f : 1.0f);
    in[i] = float_to_bf16(i % std::size_t(H) == 7 ? v * 64 : v);
  }
  for (std::size_t h = 0; h < std::size_t(H); ++h) in[std::size_t(5 * H) + h] = 0;  // row 5 (token 1, point 2): zeros
  std::vector<uint8_t> codes(in.size());
  std::vector<float> scales(static_cast<std::size_t>(rows * P));
  std::vector<Fp8Fidelity> error(static_cast<std::size_t>(P));
  quantize_fp8_rows(DType::BF16, reinterpret_cast<const std::byte*>(in.data()), rows, P, H, codes.data(), scales.data(),
                    &error);
  std::vector<float> out(in.size());
  dequantize_fp8_rows(codes.data(), scales.data(), rows, P, H, out.data());

  std::vector<Fp8Fidelity> want(static_cast<std::size_t>(P));
  for (int64_t r = 0; r < rows * P; ++r) {
    std::vector<float> row(static_cast<std::size_t>(H));
    for (int64_t h = 0; h < H; ++h) row[std::size_t(h)] = bf16_to_float(in[std::size_t(r * H + h)]);
    std::vector<uint8_t> ref;
    float scale = 0;
    reference_quantize(row, ref, scale);
    ASSERT_EQ(scales[std::size_t(r)], scale) << "row " << r;
    double e2 = 0, v2 = 0;
    Fp8Fidelity& w = want[std::size_t(r % P)];
    for (int64_t h = 0; h < H; ++h) {
      ASSERT_EQ(codes[std::size_t(r * H + h)], ref[std::size_t(h)]) << "row " << r << " element " << h;
      const float x = row[std::size_t(h)], y = out[std::size_t(r * H + h)];
      EXPECT_EQ(y, fp8_e4m3fn_to_float(ref[std::size_t(h)]) * scale);
      // Normal-range values keep 3 mantissa bits: relative error at most 2^-4 (plus the scale's rounding).
      if (std::fabs(x) >= scale * 0x1p-6f) {
        EXPECT_LE(std::fabs(y - x), std::fabs(x) * (0x1p-4f + 1e-6f));
      }
      const double d = double(y) - double(x);
      e2 += d * d;
      v2 += double(x) * double(x);
      w.nonzero += x != 0;
      w.flushed += x != 0 && y == 0;
      w.max_abs_error = std::max(w.max_abs_error, std::fabs(d));
    }
    w.rows += 1;
    w.values += H;
    w.sum_sq_error += e2;
    w.sum_sq_value += v2;
    if (v2 > 0) {
      w.sum_row_rel_error += std::sqrt(e2 / v2);
      w.max_row_rel_error = std::max(w.max_row_rel_error, std::sqrt(e2 / v2));
    } else {
      w.zero_rows += 1;
    }
  }
  EXPECT_EQ(scales[5], 0.0f);
  for (int64_t p = 0; p < P; ++p) {
    const Fp8Fidelity &g = error[std::size_t(p)], &w = want[std::size_t(p)];
    EXPECT_EQ(g.rows, w.rows);
    EXPECT_EQ(g.zero_rows, w.zero_rows);
    EXPECT_EQ(g.values, w.values);
    EXPECT_EQ(g.nonzero, w.nonzero);
    EXPECT_EQ(g.flushed, w.flushed);
    EXPECT_GT(g.flushed, 0) << "the test data reaches below the row's smallest step";
    // Rows are summed in float32 (vectorized), totals in double.
    EXPECT_NEAR(g.sum_sq_error, w.sum_sq_error, 1e-5 * w.sum_sq_error);
    EXPECT_NEAR(g.sum_sq_value, w.sum_sq_value, 1e-5 * w.sum_sq_value);
    EXPECT_NEAR(g.sum_row_rel_error, w.sum_row_rel_error, 1e-5 * w.sum_row_rel_error);
    EXPECT_NEAR(g.max_row_rel_error, w.max_row_rel_error, 1e-5 * w.max_row_rel_error);
    EXPECT_DOUBLE_EQ(g.max_abs_error, w.max_abs_error);
    EXPECT_GT(g.rel_rms_error(), 0.0);
    EXPECT_LT(g.rel_rms_error(), 0.04);  // 3 mantissa bits: about 2^-4 / sqrt(3) at worst
  }
  EXPECT_EQ(error[2].zero_rows, 1);
}

TEST(Fp8Quantizer, Float32InputIsMeasuredAgainstItsBf16Rounding) {
  const int64_t H = 64;
  std::vector<float> in(static_cast<std::size_t>(H));
  for (int64_t h = 0; h < H; ++h) in[std::size_t(h)] = std::sin(float(h) * 0.37f) * 3.0f + 1e-3f * float(h);
  std::vector<uint8_t> codes(static_cast<std::size_t>(H));
  float scale = 0;
  std::vector<Fp8Fidelity> e(1);
  quantize_fp8_rows(DType::F32, reinterpret_cast<const std::byte*>(in.data()), 1, 1, H, codes.data(), &scale, &e);
  double e2 = 0;
  for (int64_t h = 0; h < H; ++h) {
    const double d = double(fp8_e4m3fn_to_float(codes[std::size_t(h)]) * scale) -
                     double(bf16_to_float(float_to_bf16(in[std::size_t(h)])));
    e2 += d * d;
  }
  EXPECT_NEAR(e[0].sum_sq_error, e2, 1e-5 * e2);
}

TEST(Fp8Quantizer, NonFiniteValuesBecomeNaNAndLeaveTheScaleAlone) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> in{1.0f, -inf, 2.0f, nan, -4.0f, inf};
  std::vector<uint8_t> codes(in.size());
  float scale = 0;
  std::vector<Fp8Fidelity> e(1);
  quantize_fp8_rows(DType::F32, reinterpret_cast<const std::byte*>(in.data()), 1, 1, int64_t(in.size()), codes.data(),
                    &scale, &e);
  EXPECT_EQ(scale, 4.0f / 448.0f);
  EXPECT_EQ(codes, (std::vector<uint8_t>{float_to_fp8_e4m3fn(112.0f), 0xff, float_to_fp8_e4m3fn(224.0f), 0x7f, 0xfe,
                                         0x7f}));
  EXPECT_EQ(e[0].nonfinite, 3);
  EXPECT_EQ(e[0].sum_sq_error, 0.0);  // 1, 2 and 4 are exact
  EXPECT_TRUE(std::isfinite(e[0].rel_rms_error()));
}

TEST(Fp8Fidelity, JsonRoundTripAndMerge) {
  Fp8Fidelity a, b;
  a.rows = 3, a.values = 30, a.nonzero = 29, a.flushed = 2, a.sum_sq_error = 0.5, a.sum_sq_value = 200,
  a.sum_row_rel_error = 0.09, a.max_row_rel_error = 0.04, a.max_abs_error = 0.3;
  b.rows = 2, b.zero_rows = 1, b.values = 20, b.nonzero = 10, b.sum_sq_error = 0.25, b.sum_sq_value = 100,
  b.sum_row_rel_error = 0.02, b.max_row_rel_error = 0.02, b.max_abs_error = 0.5, b.nonfinite = 1;
  const nlohmann::json j = to_json(a);
  EXPECT_DOUBLE_EQ(j.at("rel_rms_error").get<double>(), std::sqrt(0.5 / 200));
  EXPECT_DOUBLE_EQ(j.at("mean_row_rel_error").get<double>(), 0.03);
  EXPECT_DOUBLE_EQ(j.at("flushed_to_zero_fraction").get<double>(), 2.0 / 29);
  Fp8Fidelity m = fp8_fidelity_from_json(nlohmann::json::parse(j.dump()));
  m.merge(b);
  EXPECT_EQ(m.rows, 5);
  EXPECT_EQ(m.zero_rows, 1);
  EXPECT_EQ(m.nonfinite, 1);
  EXPECT_DOUBLE_EQ(m.rel_rms_error(), std::sqrt(0.75 / 300));
  EXPECT_DOUBLE_EQ(m.mean_row_rel_error(), 0.11 / 4);
  EXPECT_DOUBLE_EQ(m.max_abs_error, 0.5);
  EXPECT_NE(error_of([] { fp8_fidelity_from_json(nlohmann::json{{"rel_rms_error", 0.1}}); }).find("malformed"),
            std::string::npos);
}

}  // namespace
}  // namespace layertap::io
