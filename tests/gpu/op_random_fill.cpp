// kernels/random_fill.cu: bit-exact against the host formula (same hash, same fused multiply-add,
// same rounding), at sizes on and off the block and grid-stride boundaries, with guard regions;
// plus the distribution's range and mean on the host alone. Rows: op_cases.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <vector>

#include "gpu_compare.hpp"
#include "gpu_test.hpp"
#include "kernels/random_fill.cuh"
#include "op_table.hpp"

namespace {

using namespace layertap::gpu_test;

std::vector<bf16_bits> host_fill(std::int64_t n, std::uint64_t seed, float offset, float scale) {
  std::vector<bf16_bits> v(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    v[std::size_t(i)] = layertap::float_to_bf16(std::fma(scale, layertap::kernels::uniform_from_hash(seed, i), offset));
  return v;
}

// u in [-1, 1), mean near 0 (host only).
int distribution_check() {
  double sum = 0, lo = 1, hi = -1;
  const std::int64_t n = 1 << 20;
  for (std::int64_t i = 0; i < n; ++i) {
    const double u = layertap::kernels::uniform_from_hash(42, i);
    sum += u;
    lo = std::min(lo, u);
    hi = std::max(hi, u);
  }
  const double mean = sum / double(n);  // standard error of the mean: 1/sqrt(3n) = 5.6e-4
  const bool ok = lo >= -1.0 && hi < 1.0 && std::fabs(mean) < 5 * 5.6e-4 && lo < -0.999 && hi > 0.999;
  std::printf("%s uniform_from_hash: min %.6f max %.6f mean %.2e over %lld draws\n", ok ? "ok  " : "FAIL", lo, hi, mean,
              (long long)n);
  return ok ? 0 : 1;
}

int run_case(std::int64_t n, std::uint64_t seed, float offset, float scale, cudaStream_t stream) {
  Guarded<bf16_bits> d(n);
  layertap::kernels::fill_uniform_bf16(as_bf16(d.data()), n, seed, offset, scale, stream);
  LT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<bf16_bits> got = d.download(), want = host_fill(n, seed, offset, scale);
  std::int64_t differ = 0;
  for (std::size_t i = 0; i < got.size(); ++i) differ += got[i] != want[i];
  const std::int64_t damage = d.guard_damage();
  const bool ok = differ == 0 && damage == 0;
  std::printf("%s n=%-9lld seed=%llu offset=%g scale=%g: %lld values differ from the host formula, guard damage %lld\n",
              ok ? "ok  " : "FAIL", (long long)n, (unsigned long long)seed, double(offset), double(scale),
              (long long)differ, (long long)damage);
  return ok ? 0 : 1;
}

}  // namespace

namespace layertap::gpu_test::ops {

int run(const RandomFill& c, std::uint64_t seed, cudaStream_t stream) {
  return run_case(c.n, seed, c.offset, c.scale, stream);
}
int random_fill_host_checks() { return distribution_check(); }

}  // namespace layertap::gpu_test::ops
