// Stored states against recomputed ones, per element, in units of what storage may change: a
// correct output never fails, however one dimension dominates its row (real models have
// "massive activations" of 2.5e4 next to values near 1), and a shifted layer, point or token still
// fails by orders of magnitude.
#pragma once
#include <cstdint>

#include "core/dtype.hpp"

namespace layertap {

struct StateMismatch {
  double ratio = 0;  // worst |stored - recomputed| / allowed over the rows; <= 1 passes
  int64_t row = -1, col = -1;
  float stored = 0, recomputed = 0;
  double allowed = 0;
};

// Rows of `n` values: stored[r * stride + c] against recomputed[r * n + c], r < rows. An element may
// differ by one step of the storage type at the recomputed magnitude, i.e. one bf16 ulp for
// bfloat16 (round to nearest is half of that; the rest covers the recompute's float32 noise),
// 1e-4 relative for float32, or for float8_e4m3fn one e4m3 step at the value's code (the row's
// scale maps its largest magnitude to 448) plus the bf16 step it was quantized from, plus kFloorOfRowMedian times the row's median magnitude for elements
// near zero, whose recomputed value carries noise of the row's typical size.
StateMismatch compare_states(const float* stored, int64_t stride, const float* recomputed, int64_t rows, int64_t n,
                             DType storage);

inline constexpr double kFloorOfRowMedian = 1e-4;

// States a bf16 backend (cuda) computed, against the float32 computation: every rounding point of a
// bf16 forward moves values by up to 2^-8, which accumulates along the residual stream, so they
// are held per sample and capture point to a relative Frobenius error, ||stored - recomputed|| /
// ||recomputed||, of at most kBf16ForwardBound (docs/GPU.md, "Tolerances": 2.5x the worst of a
// host emulation of the GPU's rounding points on the fixtures). A shifted layer or token is off by
// 1e-1 and more.
inline constexpr double kBf16ForwardBound = 5e-2;
double relative_frobenius(const float* stored, int64_t stride, const float* recomputed, int64_t rows, int64_t n);

}  // namespace layertap
