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

}  // namespace

StateMismatch compare_states(const float* stored, int64_t stride, const float* recomputed, int64_t rows, int64_t n,
                             DType storage) {
  LT_CHECK(storage == DType::BF16 || storage == DType::F32, "verify compares bfloat16 or float32 storage, not ",
           dtype_name(storage));
  StateMismatch worst;
  std::vector<float> magnitude(static_cast<std::size_t>(n));
  for (int64_t r = 0; r < rows; ++r) {
    const float* s = stored + r * stride;
    const float* x = recomputed + r * n;
    // The median magnitude, not the RMS or the mean: one massive dimension must not raise it.
    for (int64_t c = 0; c < n; ++c) magnitude[std::size_t(c)] = std::fabs(x[c]);
    std::nth_element(magnitude.begin(), magnitude.begin() + n / 2, magnitude.end());
    const double floor = kFloorOfRowMedian * double(magnitude[std::size_t(n / 2)]);
    for (int64_t c = 0; c < n; ++c) {
      const double a = std::fabs(double(x[c]));
      const double allowed = (storage == DType::BF16 ? bf16_step(a) : 1e-4 * a) + floor;
      const double diff = std::fabs(double(s[c]) - double(x[c]));
      // NaN in either fails: !(diff <= ...) is true for NaN.
      const double ratio = allowed > 0 ? diff / allowed : (diff == 0 ? 0 : INFINITY);
      if (!(ratio <= worst.ratio)) worst = {std::isnan(ratio) ? INFINITY : ratio, r, c, s[c], x[c], allowed};
    }
  }
  return worst;
}

}  // namespace layertap
