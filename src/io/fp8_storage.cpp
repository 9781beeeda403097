#include "io/fp8_storage.hpp"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.hpp"

namespace layertap::io {
namespace {

constexpr float kFp8Max = 448.0f;

constexpr std::array<float, 256> make_fp8_table() {
  std::array<float, 256> t{};
  for (int c = 0; c < 256; ++c) t[std::size_t(c)] = fp8_e4m3fn_to_float(uint8_t(c));
  return t;
}
constexpr std::array<float, 256> kFp8ToFloat = make_fp8_table();

// float_to_fp8_e4m3fn of a finite magnitude a >= 0 (beyond 448 it saturates), without branches and
// in float32 compares and 32-bit integer adds/shifts only (SSE2 has no unsigned 32-bit min or
// compare), so that loops over a row vectorize; the same codes (tests check every boundary).
inline uint32_t encode_magnitude(float a) {
  a = std::min(a, 448.0f);
  const uint32_t bits = std::bit_cast<uint32_t>(a);
  const uint32_t normal = (bits + 0xc4000000u + 0x7ffffu + ((bits >> 20) & 1u)) >> 20;
  const uint32_t subnormal = std::bit_cast<uint32_t>(a + 0x1p14f) - 0x46800000u;
  return a < 0x1p-6f ? subnormal : normal;
}

// fp8_e4m3fn_to_float of a code magnitude 0..0x7e, without a table lookup (vectorizes).
inline float decode_magnitude(uint32_t code) {
  const uint32_t exponent = code >> 3, mantissa = code & 7u;
  const float normal = std::bit_cast<float>(((exponent + 120u) << 23) | (mantissa << 20));
  const float subnormal = float(int32_t(mantissa)) * 0x1p-9f;
  return int32_t(code) >= 8 ? normal : subnormal;
}


// Bits of |x| with NaN/Inf as 0, so that the largest is the finite amax (an integer maximum: the
// bit patterns of non-negative floats order as their values).
inline uint32_t finite_magnitude_bits(float x) {
  const uint32_t m = std::bit_cast<uint32_t>(x) & 0x7fffffffu;
  return m < 0x7f800000u ? m : 0u;
}

struct RowError {
  float sq_error = 0, sq_value = 0, max_abs = 0;
  int64_t nonzero = 0, flushed = 0, nonfinite = 0;
};

// x86-64: an AVX2 copy of the row kernel, picked at load time where the CPU has it (measured 1.3x
// over the SSE2 baseline the build targets).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define LAYERTAP_ROW_KERNEL __attribute__((target_clones("avx2", "default")))
#else
#define LAYERTAP_ROW_KERNEL
#endif

// One [H] row: codes and scale; with `e`, its error against the input's values (float32 sums:
// a row is short, the totals are kept in double).
LAYERTAP_ROW_KERNEL float quantize_row(const float* in, int64_t H, uint8_t* codes, RowError* e) {
  if (H <= 0) return 0.0f;
  float amax = 0.0f;
  int32_t nonfinite = 0;
#pragma omp simd reduction(max : amax) reduction(+ : nonfinite)
  for (int64_t h = 0; h < H; ++h) {
    const float a = std::fabs(in[h]);
    const bool finite = a <= std::numeric_limits<float>::max();  // false for Inf and NaN
    nonfinite += !finite;
    amax = std::max(amax, finite ? a : 0.0f);
  }
  const float scale = amax / kFp8Max;
  if (!(scale > 0.0f)) {  // all zero (or below 448 * the smallest subnormal): store zeros
    std::memset(codes, 0, std::size_t(H));
    float sq = 0, max_abs = 0;
    int64_t nonzero = 0;
    for (int64_t h = 0; h < H; ++h) {
      const float v = in[h];
      if (!std::isfinite(v)) {
        codes[h] = uint8_t((std::signbit(v) ? 0x80u : 0u) | 0x7fu);
        continue;
      }
      sq += v * v;
      max_abs = std::max(max_abs, std::fabs(v));
      nonzero += v != 0.0f;
    }
    if (e) *e = {sq, sq, max_abs, nonzero, nonzero, nonfinite};
    return 0.0f;
  }
  // Codes, and the values they read back as (in `stored`, for the error below).
  thread_local std::vector<float> stored_row;
  stored_row.resize(std::size_t(H));
  float* stored = stored_row.data();
#pragma omp simd
  for (int64_t h = 0; h < H; ++h) {
    // The code nearest the float32 quotient (a division, not a multiplication by 448 / amax,
    // which rounds twice and moves values that sit near a rounding boundary).
    const float q = in[h] / scale;
    const uint32_t sign = std::bit_cast<uint32_t>(q) & 0x80000000u;
    const uint32_t code = encode_magnitude(std::fabs(q));
    codes[h] = uint8_t((sign >> 24) | code);
    stored[h] = std::bit_cast<float>(std::bit_cast<uint32_t>(decode_magnitude(code) * scale) | sign);
  }
  float sq_error = 0, sq_value = 0, max_abs = 0;
  int32_t nonzero = 0, flushed = 0;
#pragma omp simd reduction(+ : sq_error, sq_value, nonzero, flushed) reduction(max : max_abs)
  for (int64_t h = 0; h < H; ++h) {
    const float v = in[h], d = stored[h] - v;
    sq_error += d * d;
    sq_value += v * v;
    max_abs = std::max(max_abs, std::fabs(d));
    nonzero += v != 0.0f;
    flushed += (v != 0.0f) & (stored[h] == 0.0f);
  }
  if (nonfinite > 0) {  // rare: NaN/Inf become NaN codes and leave the error sums
    sq_error = sq_value = max_abs = 0;
    nonzero = flushed = 0;
    for (int64_t h = 0; h < H; ++h) {
      const float v = in[h];
      if (!std::isfinite(v)) {
        codes[h] = uint8_t((std::signbit(v) ? 0x80u : 0u) | 0x7fu);
        continue;
      }
      const float d = fp8_e4m3fn_to_float(codes[h]) * scale - v;
      sq_error += d * d;
      sq_value += v * v;
      max_abs = std::max(max_abs, std::fabs(d));
      nonzero += v != 0.0f;
      flushed += v != 0.0f && (codes[h] & 0x7fu) == 0;
    }
  }
  if (e) *e = {sq_error, sq_value, max_abs, nonzero, flushed, nonfinite};
  return scale;
}

}  // namespace

double Fp8Fidelity::rel_rms_error() const {
  return sum_sq_value > 0 ? std::sqrt(sum_sq_error / sum_sq_value) : 0.0;
}

double Fp8Fidelity::mean_row_rel_error() const {
  const int64_t n = rows - zero_rows;
  return n > 0 ? sum_row_rel_error / double(n) : 0.0;
}

double Fp8Fidelity::flushed_fraction() const { return nonzero > 0 ? double(flushed) / double(nonzero) : 0.0; }

void Fp8Fidelity::merge(const Fp8Fidelity& o) {
  rows += o.rows;
  zero_rows += o.zero_rows;
  values += o.values;
  nonzero += o.nonzero;
  flushed += o.flushed;
  nonfinite += o.nonfinite;
  sum_sq_error += o.sum_sq_error;
  sum_sq_value += o.sum_sq_value;
  sum_row_rel_error += o.sum_row_rel_error;
  max_row_rel_error = std::max(max_row_rel_error, o.max_row_rel_error);
  max_abs_error = std::max(max_abs_error, o.max_abs_error);
}

nlohmann::json to_json(const Fp8Fidelity& f) {
  return {{"rel_rms_error", f.rel_rms_error()},
          {"mean_row_rel_error", f.mean_row_rel_error()},
          {"max_row_rel_error", f.max_row_rel_error},
          {"max_abs_error", f.max_abs_error},
          {"flushed_to_zero_fraction", f.flushed_fraction()},
          {"nonfinite_values", f.nonfinite},
          {"sums",
           {{"rows", f.rows},
            {"zero_rows", f.zero_rows},
            {"values", f.values},
            {"nonzero", f.nonzero},
            {"flushed", f.flushed},
            {"nonfinite", f.nonfinite},
            {"sum_sq_error", f.sum_sq_error},
            {"sum_sq_value", f.sum_sq_value},
            {"sum_row_rel_error", f.sum_row_rel_error},
            {"max_row_rel_error", f.max_row_rel_error},
            {"max_abs_error", f.max_abs_error}}}};
}

Fp8Fidelity fp8_fidelity_from_json(const nlohmann::json& j) {
  try {
    const nlohmann::json& s = j.at("sums");
    Fp8Fidelity f;
    f.rows = s.at("rows").get<int64_t>();
    f.zero_rows = s.at("zero_rows").get<int64_t>();
    f.values = s.at("values").get<int64_t>();
    f.nonzero = s.at("nonzero").get<int64_t>();
    f.flushed = s.at("flushed").get<int64_t>();
    f.nonfinite = s.at("nonfinite").get<int64_t>();
    f.sum_sq_error = s.at("sum_sq_error").get<double>();
    f.sum_sq_value = s.at("sum_sq_value").get<double>();
    f.sum_row_rel_error = s.at("sum_row_rel_error").get<double>();
    f.max_row_rel_error = s.at("max_row_rel_error").get<double>();
    f.max_abs_error = s.at("max_abs_error").get<double>();
    return f;
  } catch (const nlohmann::json::exception& e) {
    LT_FAIL("float8 fidelity record is malformed: ", e.what());
  }
}

void quantize_fp8_rows(DType dtype, const std::byte* in, int64_t rows, int64_t points, int64_t hidden,
                       uint8_t* codes, float* scales, std::vector<Fp8Fidelity>* error) {
  LT_CHECK(dtype == DType::BF16 || dtype == DType::F32, "float8 storage quantizes bfloat16 or float32 states, not ",
           dtype_name(dtype));
  LT_CHECK(!error || int64_t(error->size()) == points, "float8 fidelity has ", error ? error->size() : 0,
           " accumulators for ", points, " points");
  LT_CHECK(rows >= 0 && points > 0 && hidden > 0, "float8 quantization of [", rows, ", ", points, ", ", hidden, "]");
  const int64_t H = hidden;
  std::vector<uint16_t> row16(static_cast<std::size_t>(H));  // one row, aligned (the input may sit at any address)
  std::vector<float> row32(static_cast<std::size_t>(H));    // ... as float32
  for (int64_t row = 0; row < rows * points; ++row) {
    RowError re;
    RowError* e = error ? &re : nullptr;
    uint8_t* c = codes + row * H;
    if (dtype == DType::BF16) {
      std::memcpy(row16.data(), in + std::size_t(row * H) * 2, std::size_t(H) * 2);
      for (int64_t h = 0; h < H; ++h) row32[std::size_t(h)] = bf16_to_float(row16[std::size_t(h)]);
      scales[row] = quantize_row(row32.data(), H, c, e);
    } else {
      // Measured against bf16 (the values float8 replaces): the error of the float32 input
      // rounded to bf16, quantized the same way.
      std::memcpy(row32.data(), in + std::size_t(row * H) * 4, std::size_t(H) * 4);
      scales[row] = quantize_row(row32.data(), H, c, nullptr);
      if (e) {
        for (int64_t h = 0; h < H; ++h) row16[std::size_t(h)] = float_to_bf16(row32[std::size_t(h)]);
        // Error of the stored values (from the float32 input) against the bf16 values.
        float sq_error = 0, sq_value = 0, max_abs = 0;
        int64_t nonzero = 0, flushed = 0, nonfinite = 0;
        for (int64_t h = 0; h < H; ++h) {
          const float v = bf16_to_float(row16[std::size_t(h)]);
          if (!std::isfinite(v)) {
            ++nonfinite;
            continue;
          }
          const float d = fp8_e4m3fn_to_float(c[h]) * scales[row] - v;
          sq_error += d * d;
          sq_value += v * v;
          max_abs = std::max(max_abs, std::fabs(d));
          nonzero += v != 0.0f;
          flushed += v != 0.0f && (c[h] & 0x7fu) == 0;
        }
        re = {sq_error, sq_value, max_abs, nonzero, flushed, nonfinite};
      }
    }
    if (!error) continue;
    Fp8Fidelity& f = (*error)[std::size_t(row % points)];
    f.rows += 1;
    f.values += H;
    f.nonzero += re.nonzero;
    f.flushed += re.flushed;
    f.nonfinite += re.nonfinite;
    f.sum_sq_error += double(re.sq_error);
    f.sum_sq_value += double(re.sq_value);
    f.max_abs_error = std::max(f.max_abs_error, double(re.max_abs));
    if (re.sq_value > 0) {
      const double rel = std::sqrt(double(re.sq_error) / double(re.sq_value));
      f.sum_row_rel_error += rel;
      f.max_row_rel_error = std::max(f.max_row_rel_error, rel);
    } else {
      f.zero_rows += 1;
    }
  }
}

void dequantize_fp8_rows(const uint8_t* codes, const float* scales, int64_t rows, int64_t points, int64_t hidden,
                         float* out) {
  const int64_t n = rows * points;
  for (int64_t row = 0; row < n; ++row) {
    const float s = scales[row];
    const uint8_t* c = codes + row * hidden;
    float* o = out + row * hidden;
    for (int64_t h = 0; h < hidden; ++h) o[h] = kFp8ToFloat[c[h]] * s;
  }
}

}  // namespace layertap::io
