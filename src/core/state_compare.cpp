#include "core/state_compare.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"

namespace layertap {
namespace {

// The spacing of bf16 values at magnitude `a` (8 significant bits): 2^(floor(log2 a) - 7).
double bf16_step(double a) {
  if (a < 1e-38) return 0;  // subnormals: the row floor covers them
  int e = 0;
  std::frexp(a, &e);  // a = m * 2^e with m in [0.5, 1)
  return std::ldexp(1.0, e - 8);
}

// The spacing of float8 e4m3fn codes at code magnitude `c` (3 mantissa bits; subnormals below 2^-6
// are spaced 2^-9).
double e4m3_step(double c) {
  if (c < 0x1p-6) return 0x1p-9;
  int e = 0;
  std::frexp(c, &e);  // c = m * 2^e with m in [0.5, 1)
  return std::ldexp(1.0, e - 4);
}

}  // namespace

StateMismatch compare_states(const float* stored, int64_t stride, const float* recomputed, int64_t rows, int64_t n,
                             DType storage) {
  LT_CHECK(storage == DType::BF16 || storage == DType::F32 || storage == DType::F8_E4M3,
           "verify compares bfloat16, float32 or float8_e4m3fn storage, not ", dtype_name(storage));
  StateMismatch worst;
  std::vector<float> magnitude(static_cast<std::size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = stored + r * stride;
    const float* x = recomputed + r * n;
    // The median magnitude, not the RMS or the mean: one massive dimension must not raise it.
    double amax = 0;
    for (int64_t c = 0; c < n; ++c) {
      magnitude[std::size_t(c)] = std::fabs(x[c]);
      amax = std::max(amax, double(magnitude[std::size_t(c)]));
    }
    std::nth_element(magnitude.begin(), magnitude.begin() + n / 2, magnitude.end());
    const double floor = kFloorOfRowMedian * double(magnitude[std::size_t(n / 2)]);
    const double scale = amax / 448;  // float8 storage: the row's scale maps its largest value to 448
    for (int64_t c = 0; c < n; ++c) {
      const double a = std::fabs(double(x[c]));
      double allowed = floor;
      if (storage == DType::BF16) allowed += bf16_step(a);
      if (storage == DType::F32) allowed += 1e-4 * a;
      if (storage == DType::F8_E4M3) allowed += bf16_step(a) + (scale > 0 ? e4m3_step(a / scale) * scale : 0);
      const double diff = std::fabs(double(s[c]) - double(x[c]));
      // NaN in either fails: !(diff <= ...) is true for NaN.
      const double ratio = allowed > 0 ? diff / allowed : (diff == 0 ? 0 : INFINITY);
      if (!(ratio <= worst.ratio)) worst = {std::isnan(ratio) ? INFINITY : ratio, r, c, s[c], x[c], allowed};
    }
  }
  return worst;
}

double relative_frobenius(const float* stored, int64_t stride, const float* recomputed, int64_t rows, int64_t n) {
  double diff = 0, ref = 0;
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < n; ++c) {
      const double s = stored[r * stride + c], w = recomputed[r * n + c];
      diff += (s - w) * (s - w);
      ref += w * w;
    }
  return ref > 0 ? std::sqrt(diff / ref) : std::sqrt(diff);
}

}  // namespace layertap
