// float8_e4m3fn storage of hidden states (docs/FORMAT.md, "Storage options"): one float32 scale per
// token and capture point, scale = amax / 448 over that [H] row's finite values (448 is the
// largest e4m3fn value), code = e4m3fn(float32(value / scale)) rounded to nearest even; read back
// as float(code) * scale in float32. An all-zero row has scale 0 and codes 0; NaN and Inf are
// stored as NaN (0x7f/0xff) and do not count towards amax.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.hpp"

namespace layertap::io {

// How far float8 storage lands from the bf16 values it replaces, for one capture point,
// accumulated over every row quantized. Sums, so that shards and ranks merge exactly.
struct Fp8Fidelity {
  int64_t rows = 0;             // [H] rows (tokens) quantized
  int64_t zero_rows = 0;        // rows whose bf16 values are all zero
  int64_t values = 0;           // elements (rows * H)
  int64_t nonzero = 0;          // elements whose bf16 value is not zero
  int64_t flushed = 0;          // ... of those, stored as zero (below half the row's smallest step)
  int64_t nonfinite = 0;        // NaN/Inf elements (stored as NaN; left out of the sums below)
  double sum_sq_error = 0;      // sum of (stored - bf16)^2
  double sum_sq_value = 0;      // sum of bf16^2
  double sum_row_rel_error = 0; // sum over rows with a nonzero norm of |stored - bf16| / |bf16| (L2)
  double max_row_rel_error = 0; // the largest of those
  double max_abs_error = 0;     // largest |stored - bf16| of one element

  // sqrt(sum_sq_error / sum_sq_value): relative RMS error over all values of the point.
  double rel_rms_error() const;
  double mean_row_rel_error() const;  // sum_row_rel_error / rows with a nonzero norm (= rows - zero rows)
  double flushed_fraction() const;    // flushed / nonzero
  void merge(const Fp8Fidelity& o);
};

// The stored sums of Fp8Fidelity by name: one list for every place that writes or reads them
// (the /hidden_scales attributes error_<name>).
inline constexpr std::pair<const char*, int64_t Fp8Fidelity::*> kFp8Counts[] = {
    {"rows", &Fp8Fidelity::rows},       {"zero_rows", &Fp8Fidelity::zero_rows}, {"values", &Fp8Fidelity::values},
    {"nonzero", &Fp8Fidelity::nonzero}, {"flushed", &Fp8Fidelity::flushed},     {"nonfinite", &Fp8Fidelity::nonfinite}};
inline constexpr std::pair<const char*, double Fp8Fidelity::*> kFp8Sums[] = {
    {"sum_sq_error", &Fp8Fidelity::sum_sq_error},           {"sum_sq_value", &Fp8Fidelity::sum_sq_value},
    {"sum_row_rel_error", &Fp8Fidelity::sum_row_rel_error}, {"max_row_rel_error", &Fp8Fidelity::max_row_rel_error},
    {"max_abs_error", &Fp8Fidelity::max_abs_error}};

// The figures a manifest shows (rel_rms_error, mean/max_row_rel_error, max_abs_error,
// flushed_to_zero_fraction) plus the sums they come from, under "sums", so that the records of
// several shards or ranks can be merged with fp8_fidelity_from_json + merge.
nlohmann::json to_json(const Fp8Fidelity& f);
Fp8Fidelity fp8_fidelity_from_json(const nlohmann::json& j);  // reads "sums"; throws on a bad record

// Quantizes `rows` token rows [P, H] (row-major [rows, P, H], `dtype` BF16 or F32) into `codes`
// [rows, P, H] and `scales` [rows, P]. When `error` is given ([P] accumulators), adds each point's
// error against the bf16 value of every input (for F32 input: the input rounded to bf16).
void quantize_fp8_rows(DType dtype, const std::byte* in, int64_t rows, int64_t points, int64_t hidden,
                       uint8_t* codes, float* scales, std::vector<Fp8Fidelity>* error);

// float(codes[i]) * scales[row, point], in float32: [rows, P, H].
void dequantize_fp8_rows(const uint8_t* codes, const float* scales, int64_t rows, int64_t points, int64_t hidden,
                         float* out);

}  // namespace layertap::io
