// Shared by the kernel tests: device buffers with guard regions, seeded random bf16 data, and
// comparisons against a CPU reference (ggml test-backend-ops style: normalized error and max abs,
// NaN/Inf always failing, untouched guards, every output element written).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/cuda_check.hpp"

namespace layertap::gpu_test {

using bf16_bits = std::uint16_t;

// 2^-8: the unit roundoff of bf16 (8 significant bits, so a rounding moves a value by at most half
// of 2^-7 relative). Until the simulated GPU first ran these tests this read 2^-9, which a correct
// round-to-nearest exceeds: e.g. 2.0392 rounds to 2.046875, 3.8e-3 relative.
inline constexpr double kBf16Unit = 1.0 / 256.0;

// A device array of n elements of T between two guard regions of `guard` elements. Guards and
// payload start filled with the sentinel byte 0xA5 (bf16 0xa5a5, a NaN-free but improbable
// value; for poisoning bf16 outputs use poison_bf16, a NaN): a kernel must write every output
// element and nothing outside.
template <typename T>
class Guarded {
 public:
  static constexpr unsigned char kSentinel = 0xA5;

  explicit Guarded(std::int64_t n, std::int64_t guard = 4096 / std::int64_t(sizeof(T)))
      : n_(n), guard_(guard) {
    void* p = nullptr;
    LT_CUDA_CHECK(cudaMalloc(&p, bytes_total()));
    base_ = static_cast<T*>(p);
    LT_CUDA_CHECK(cudaMemset(base_, kSentinel, bytes_total()));
    LT_CUDA_CHECK(cudaDeviceSynchronize());  // the kernels run on non-blocking streams
  }
  Guarded(const Guarded&) = delete;
  Guarded& operator=(const Guarded&) = delete;
  ~Guarded() { (void)cudaFree(base_); }

  T* data() const { return base_ + guard_; }
  std::int64_t size() const { return n_; }
  void upload(const std::vector<T>& v) const {
    LT_CHECK(std::int64_t(v.size()) == n_, "upload of ", v.size(), " elements into ", n_);
    LT_CUDA_CHECK(cudaMemcpy(data(), v.data(), sizeof(T) * v.size(), cudaMemcpyHostToDevice));
    // A pageable-memory cudaMemcpy may return before its DMA lands, and the kernels under test run
    // on non-blocking streams that do not wait for the legacy stream.
    LT_CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<T> download() const {
    std::vector<T> v(static_cast<std::size_t>(n_));
    LT_CUDA_CHECK(cudaMemcpy(v.data(), data(), sizeof(T) * v.size(), cudaMemcpyDeviceToHost));
    return v;
  }
  // Number of guard bytes that no longer hold the sentinel.
  std::int64_t guard_damage() const {
    std::vector<unsigned char> all(bytes_total());
    LT_CUDA_CHECK(cudaMemcpy(all.data(), base_, all.size(), cudaMemcpyDeviceToHost));
    const std::size_t g = sizeof(T) * std::size_t(guard_), payload = sizeof(T) * std::size_t(n_);
    std::int64_t bad = 0;
    for (std::size_t i = 0; i < g; ++i) bad += (all[i] != kSentinel) + (all[g + payload + i] != kSentinel);
    return bad;
  }

 private:
  std::size_t bytes_total() const { return sizeof(T) * std::size_t(n_ + 2 * guard_); }
  T* base_ = nullptr;
  std::int64_t n_, guard_;
};

// Fills a bf16 payload with a NaN, so an element the kernel never writes fails the NaN check.
inline void poison_bf16(const Guarded<bf16_bits>& g) {
  const std::vector<bf16_bits> nan(std::size_t(g.size()), bf16_bits(0x7fc1));
  g.upload(nan);
}

inline __nv_bfloat16* as_bf16(bf16_bits* p) { return reinterpret_cast<__nv_bfloat16*>(p); }

inline std::vector<bf16_bits> random_bf16(std::mt19937_64& rng, std::int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<bf16_bits> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = float_to_bf16(u(rng));
  return v;
}

inline std::vector<bf16_bits> normal_bf16(std::mt19937_64& rng, std::int64_t n, float stddev) {
  std::normal_distribution<float> d(0.0f, stddev);
  std::vector<bf16_bits> v(static_cast<std::size_t>(n));
  for (auto& x : v) x = float_to_bf16(d(rng));
  return v;
}

inline std::vector<float> widen(const std::vector<bf16_bits>& v) {
  std::vector<float> f(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) f[i] = bf16_to_float(v[i]);
  return f;
}

// got vs ref: ||got - ref|| / ||ref|| (normalized error), max |got - ref|, non-finite count, and
// the number of elements over an elementwise bound bound[i] (when given).
struct Comparison {
  double norm_err = 0, max_abs = 0;
  std::int64_t nonfinite = 0, over_bound = 0, first_over = -1;
};

inline Comparison compare(const std::vector<float>& got, const std::vector<float>& ref,
                          const std::vector<double>* bound = nullptr) {
  Comparison c;
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++c.nonfinite;
      continue;
    }
    const double d = std::fabs(double(got[i]) - double(ref[i]));
    num += d * d;
    den += double(ref[i]) * double(ref[i]);
    c.max_abs = std::max(c.max_abs, d);
    if (bound != nullptr && d > (*bound)[i]) {
      if (c.first_over < 0) c.first_over = std::int64_t(i);
      ++c.over_bound;
    }
  }
  c.norm_err = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  return c;
}

// One line per case; returns the number of failed checks (0 or more).
inline int report(const std::string& name, const Comparison& c, double norm_tol, std::int64_t guard_damage,
                  const std::vector<float>* got = nullptr, const std::vector<float>* ref = nullptr) {
  int fails = 0;
  std::string why;
  const auto fail = [&](const std::string& what) {
    ++fails;
    why += " " + what;
  };
  if (c.nonfinite != 0) fail("NaN/Inf(" + std::to_string(c.nonfinite) + ")");
  if (c.norm_err > norm_tol) fail("normalized-error");
  if (c.over_bound != 0) fail("elementwise-bound(" + std::to_string(c.over_bound) + ")");
  if (guard_damage != 0) fail("guard-overwritten(" + std::to_string(guard_damage) + " bytes)");
  std::printf("%s %-58s norm_err %.3e (tol %.3e) max_abs %.3e%s\n", fails == 0 ? "ok  " : "FAIL", name.c_str(),
              c.norm_err, norm_tol, c.max_abs, why.c_str());
  if (fails != 0 && c.first_over >= 0 && got != nullptr && ref != nullptr) {
    const std::size_t i = std::size_t(c.first_over);
    std::printf("     first element over its bound: [%zu] got %.8g ref %.8g\n", i, double((*got)[i]),
                double((*ref)[i]));
  }
  return fails;
}

}  // namespace layertap::gpu_test
