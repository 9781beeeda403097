// src/backend/cuda/gemm (cuBLASLt, bf16 in/out, float32 accumulation, bias epilogue) against a
// float64 host product of the same bf16 operands, at odd and model-sized shapes, with and without
// bias, with aligned and deliberately misaligned operands (a bias with misaligned ones is refused).
// Rows: op_cases.cpp.
//
// Tolerance, a bound per element: float32 accumulation of K products contributes at most
// K * 2^-24 * sum_k |x_k w_k| (Higham's gamma_K; the products of bf16 values are exact), and the
// result is rounded to bf16 once: 2^-8 |ref|. Every element checked is held to
//   2^-8 |ref| + K * 2^-24 * sum_k |x_k w_k|,
// the normalized error to 2^-8 + 1e-4. Large shapes check a sample of rows (the float64 host
// product of all of them would take minutes).
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cuda/cuda_resources.hpp"
#include "backend/cuda/gemm.hpp"
#include "gpu_compare.hpp"
#include "gpu_test.hpp"
#include "op_table.hpp"

namespace {

using namespace layertap::gpu_test;

using Case = layertap::gpu_test::ops::Gemm;

int run_case(layertap::cuda::Gemm& gemm, const Case& c, std::uint64_t seed, cudaStream_t stream) {
  std::mt19937_64 rng(seed);
  const float w_scale = 1.0f / std::sqrt(float(c.K));
  const std::vector<bf16_bits> x = random_bf16(rng, c.T * c.K, -1.0f, 1.0f);       // (T, K)
  const std::vector<bf16_bits> w = random_bf16(rng, c.N * c.K, -w_scale, w_scale);  // (N, K)
  const std::vector<bf16_bits> b = random_bf16(rng, c.N, -0.5f, 0.5f);              // (N)
  Guarded<bf16_bits> d_x(c.T * c.K + c.misalign), d_w(c.N * c.K), d_b(c.N), d_y(c.T * c.N + c.misalign);
  std::vector<bf16_bits> x_shifted(std::size_t(c.misalign), 0);
  x_shifted.insert(x_shifted.end(), x.begin(), x.end());
  d_x.upload(x_shifted);
  d_w.upload(w);
  d_b.upload(b);
  poison_bf16(d_y);
  gemm.linear(as_bf16(d_y.data() + c.misalign), as_bf16(d_x.data() + c.misalign), as_bf16(d_w.data()),
              c.bias ? as_bf16(d_b.data()) : nullptr, c.T, c.N, c.K, stream);
  LT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<bf16_bits> y_all = d_y.download();

  // Rows checked: all, or a spread sample including the first and the last.
  std::vector<std::int64_t> rows;
  const std::int64_t step = c.T * c.N * c.K > (std::int64_t(1) << 27) ? std::max<std::int64_t>(1, c.T / 8) : 1;
  for (std::int64_t t = 0; t < c.T; t += step) rows.push_back(t);
  if (rows.back() != c.T - 1) rows.push_back(c.T - 1);
  std::vector<float> got, ref;
  std::vector<double> bound;
  // How each element was rounded, to name the cause when the bound fails: once to nearest (what the
  // bound assumes), the product rounded to bf16 before the bias is added, or toward zero.
  std::int64_t once = 0, product_first = 0, toward_zero = 0;
  std::int64_t unwritten_nan = 0;
  for (const std::int64_t t : rows) {
    for (std::int64_t n = 0; n < c.N; ++n) {
      double acc = c.bias ? layertap::bf16_to_float(b[std::size_t(n)]) : 0.0, mag = std::fabs(acc);
      for (std::int64_t k = 0; k < c.K; ++k) {
        const double p = double(layertap::bf16_to_float(x[std::size_t(t * c.K + k)])) *
                         double(layertap::bf16_to_float(w[std::size_t(n * c.K + k)]));
        acc += p;
        mag += std::fabs(p);
      }
      const std::uint16_t y = y_all[std::size_t(c.misalign + t * c.N + n)];
      const float bias = c.bias ? layertap::bf16_to_float(b[std::size_t(n)]) : 0.0f;
      once += y == layertap::float_to_bf16(float(acc));
      product_first += y == layertap::float_to_bf16(layertap::bf16_to_float(layertap::float_to_bf16(float(acc - bias))) + bias);
      toward_zero += y == std::uint16_t(std::bit_cast<std::uint32_t>(float(acc)) >> 16);
      got.push_back(layertap::bf16_to_float(y));
      ref.push_back(float(acc));
      bound.push_back(kBf16Unit * std::fabs(acc) + double(c.K + 1) * std::ldexp(1.0, -24) * mag + 1e-30);
    }
  }
  for (std::int64_t i = 0; i < c.T * c.N; ++i) unwritten_nan += y_all[std::size_t(c.misalign + i)] == 0x7fc1;
  char name[128];
  std::snprintf(name, sizeof name, "(%lld x %lld) @ (%lld x %lld)^T%s%s, %zu rows checked", (long long)c.T,
                (long long)c.K, (long long)c.N, (long long)c.K, c.bias ? " + bias" : "",
                c.misalign != 0 ? " misaligned" : "", rows.size());
  int fails = report(name, compare(got, ref, &bound), kBf16Unit + 1e-4, d_y.guard_damage() + d_x.guard_damage(), &got,
                     &ref);
  if (fails != 0)
    std::printf("     of %zu elements: %lld rounded once to nearest, %lld as bf16(bf16(x w) + bias), %lld toward zero\n",
                got.size(), (long long)once, (long long)product_first, (long long)toward_zero);
  if (unwritten_nan != 0) {
    std::printf("     FAIL: %lld outputs never written\n", (long long)unwritten_nan);
    ++fails;
  }
  return fails;
}

// A biased product on operands under 16-byte alignment is refused: cuBLASLt's kernels for them
// round the product to bf16 before adding the bias (seen on an H200), and the forward never needs it.
int refuses_misaligned_bias(layertap::cuda::Gemm& gemm, cudaStream_t stream) {
  Guarded<bf16_bits> d_x(130 * 56 + 3), d_w(64 * 56), d_b(64), d_y(130 * 64 + 3);
  try {
    gemm.linear(as_bf16(d_y.data() + 3), as_bf16(d_x.data() + 3), as_bf16(d_w.data()), as_bf16(d_b.data()), 130, 64,
                56, stream);
  } catch (const layertap::Error& e) {
    std::printf("ok   misaligned product with bias refused: %s\n", e.what());
    return 0;
  }
  std::printf("FAIL misaligned product with bias was accepted\n");
  return 1;
}

}  // namespace

namespace layertap::gpu_test::ops {

int run(const Gemm& c, std::uint64_t seed, cudaStream_t stream) {
  layertap::cuda::DeviceMemory ws(layertap::cuda::Gemm::kWorkspaceBytes);
  layertap::cuda::Gemm gemm(ws.data(), ws.bytes());
  return run_case(gemm, c, seed, stream);
}

int gemm_device_checks(cudaStream_t stream) {
  layertap::cuda::DeviceMemory ws(layertap::cuda::Gemm::kWorkspaceBytes);
  layertap::cuda::Gemm gemm(ws.data(), ws.bytes());
  return refuses_misaligned_bias(gemm, stream);
}

}  // namespace layertap::gpu_test::ops
