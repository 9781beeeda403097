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

// float_to_fp8_e4m3fn for a finite |q| <= 448 (what scaling produces), without branches so that
// the loop over a row vectorizes; the same codes (tests check every rounding boundary).
inline uint8_t encode_scaled(float q) {
  const uint32_t u = std::bit_cast<uint32_t>(q);
  const uint32_t sign = (u >> 24) & 0x80u;
  const uint32_t magnitude = std::min(u & 0x7fffffffu, 0x43e00000u);  // clamp to 448
  const uint32_t normal = (magnitude + 0xc4000000u + 0x7ffffu + ((magnitude >> 20) & 1u)) >> 20;
  const uint32_t subnormal = std::bit_cast<uint32_t>(std::bit_cast<float>(magnitude) + 0x1p14f) - 0x46800000u;
  return uint8_t(sign | (magnitude < 0x3c800000u ? subnormal : normal));
}

// One [H] row as float32 (bf16 widened exactly) into `out`.
void load_row(DType dtype, const std::byte* in, int64_t H, float* out) {
  if (dtype == DType::F32) {
    std::memcpy(out, in, std::size_t(H) * sizeof(float));
  } else {
    for (int64_t h = 0; h < H; ++h) {
      uint16_t b;
      std::memcpy(&b, in + 2 * h, 2);
      out[h] = bf16_to_float(b);
    }
  }
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
  const int64_t H = hidden;
  const std::size_t in_row = std::size_t(H) * dtype_size(dtype);
  std::vector<float> x(static_cast<std::size_t>(H)), ref(static_cast<std::size_t>(H));  // [H] input; its bf16 value
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t p = 0; p < points; ++p) {
      const int64_t row = r * points + p;
      load_row(dtype, in + std::size_t(row) * in_row, H, x.data());
      float amax = 0.0f;
      for (int64_t h = 0; h < H; ++h) {
        const float a = std::fabs(x[h]);
        amax = a <= std::numeric_limits<float>::max() ? std::max(amax, a) : amax;  // finite values only
      }
      float scale = amax / kFp8Max;
      uint8_t* c = codes + row * H;
      if (scale > 0.0f) {
        // The code nearest the float32 quotient (a division, not a multiplication by 448 / amax,
        // which rounds twice and moves values that sit near a rounding boundary).
        for (int64_t h = 0; h < H; ++h) c[h] = encode_scaled(x[h] / scale);
      } else {
        scale = 0.0f;  // all zero (or below 448 * the smallest subnormal): store zeros
        std::memset(c, 0, std::size_t(H));
      }
      bool any_nonfinite = false;
      for (int64_t h = 0; h < H; ++h)
        if (!std::isfinite(x[h])) {
          c[h] = uint8_t((std::signbit(x[h]) ? 0x80u : 0u) | 0x7fu);
          any_nonfinite = true;
        }
      scales[row] = scale;
      if (!error) continue;
      Fp8Fidelity& e = (*error)[std::size_t(p)];
      if (dtype == DType::F32)
        for (int64_t h = 0; h < H; ++h) ref[h] = bf16_to_float(float_to_bf16(x[h]));
      const float* v = dtype == DType::F32 ? ref.data() : x.data();
      double sq_err = 0, sq_val = 0, max_abs = 0;
      int64_t nonzero = 0, flushed = 0, nonfinite = 0;
      for (int64_t h = 0; h < H; ++h) {
        if (any_nonfinite && !std::isfinite(v[h])) {
          ++nonfinite;
          continue;
        }
        const float stored = kFp8ToFloat[c[h]] * scale;
        const double d = double(stored) - double(v[h]);
        sq_err += d * d;
        sq_val += double(v[h]) * double(v[h]);
        max_abs = std::max(max_abs, std::fabs(d));
        nonzero += v[h] != 0.0f;
        flushed += v[h] != 0.0f && stored == 0.0f;
      }
      e.rows += 1;
      e.values += H;
      e.nonzero += nonzero;
      e.flushed += flushed;
      e.nonfinite += nonfinite;
      e.sum_sq_error += sq_err;
      e.sum_sq_value += sq_val;
      e.max_abs_error = std::max(e.max_abs_error, max_abs);
      if (sq_val > 0) {
        const double rel = std::sqrt(sq_err / sq_val);
        e.sum_row_rel_error += rel;
        e.max_row_rel_error = std::max(e.max_row_rel_error, rel);
      } else {
        e.zero_rows += 1;
      }
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
