// Sizes that come from a file or an option, combined without overflow: each product or sum either
// fits int64 or throws naming what it sizes (instead of wrapping into a small allocation, or UB).
#pragma once
#include <cstdint>
#include <initializer_list>

#include "core/error.hpp"

namespace layertap {

// a * b, or a layertap::Error naming `what`.
inline int64_t checked_mul(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  LT_CHECK(!__builtin_mul_overflow(a, b, &r), what, ": ", a, " x ", b, " overflows 64 bits");
  return r;
}

// The product of `factors`, or a layertap::Error naming `what`.
inline int64_t checked_product(std::initializer_list<int64_t> factors, const char* what) {
  int64_t r = 1;
  for (const int64_t f : factors) r = checked_mul(r, f, what);
  return r;
}

// a + b, or a layertap::Error naming `what`.
inline int64_t checked_add(int64_t a, int64_t b, const char* what) {
  int64_t r = 0;
  LT_CHECK(!__builtin_add_overflow(a, b, &r), what, ": ", a, " + ", b, " overflows 64 bits");
  return r;
}

}  // namespace layertap
