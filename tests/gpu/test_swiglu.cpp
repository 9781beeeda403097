// kernels/swiglu.cu against the CPU backend's cpu::swiglu on the same (widened) bf16 inputs, at
// I that are and are not multiples of the kernel's 8-element vectors. Exit 77 without a GPU.
//
// Tolerance, a bound: the kernel rounds silu(g) to bf16 (HF holds act_fn(gate) as a bf16 tensor)
// and the product to bf16; the product of two bf16 values is exact in float32. With u = 2^-8 the
// unit roundoff of bf16, each element is within (1+u)^2 - 1 = 2u + u^2 of |reference| relative,
// plus ~1e-7 for expf's last bits: every element is held to (2u + u^2 + 1e-6) |ref|, and the
// normalized error to the same factor.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "backend/cpu/ops.hpp"
#include "gpu_compare.hpp"
#include "gpu_test.hpp"
#include "kernels/swiglu.cuh"

namespace {

using namespace layertap::gpu_test;

int run_case(std::int64_t T, std::int64_t I, std::uint64_t seed, cudaStream_t stream) {
  std::mt19937_64 rng(seed);
  const std::vector<bf16_bits> gu = normal_bf16(rng, T * 2 * I, 3.0f);  // (T, 2I): wide enough to saturate silu
  const std::vector<float> in = widen(gu);
  std::vector<float> gate(std::size_t(T * I)), up(std::size_t(T * I)), ref(std::size_t(T * I));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t i = 0; i < I; ++i) {
      gate[std::size_t(t * I + i)] = in[std::size_t(t * 2 * I + i)];
      up[std::size_t(t * I + i)] = in[std::size_t(t * 2 * I + I + i)];
    }
  layertap::cpu::gated_activation(gate.data(), up.data(), ref.data(), T * I);

  Guarded<bf16_bits> d_gu(T * 2 * I), d_act(T * I);
  d_gu.upload(gu);
  poison_bf16(d_act);
  layertap::kernels::swiglu(as_bf16(d_act.data()), as_bf16(d_gu.data()), T, I, stream);
  LT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> got = widen(d_act.download());

  const double factor = 2.0 * kBf16Unit + kBf16Unit * kBf16Unit + 1e-6;
  std::vector<double> bound(ref.size());
  for (std::size_t i = 0; i < ref.size(); ++i) bound[i] = factor * std::fabs(double(ref[i])) + 1e-37;
  char name[96];
  std::snprintf(name, sizeof name, "T=%lld I=%lld", (long long)T, (long long)I);
  return report(name, compare(got, ref, &bound), factor, d_act.guard_damage() + d_gu.guard_damage(), &got, &ref);
}

// With a device row count: the first `rows` rows are computed, the rest of the (T, I) output is
// left as it was (a MoE layer's routed rows under the host's bound).
int rows_on_device(std::int64_t T, std::int64_t I, std::int32_t rows, cudaStream_t stream) {
  std::mt19937_64 rng(77);
  const std::vector<bf16_bits> gu = normal_bf16(rng, T * 2 * I, 3.0f);
  Guarded<bf16_bits> d_gu(T * 2 * I), d_act(T * I), d_full(T * I);
  Guarded<std::int32_t> d_rows(1);
  d_gu.upload(gu);
  d_rows.upload({rows});
  poison_bf16(d_act);
  layertap::kernels::swiglu(as_bf16(d_full.data()), as_bf16(d_gu.data()), T, I, stream);
  layertap::kernels::swiglu(as_bf16(d_act.data()), as_bf16(d_gu.data()), T, I, stream, d_rows.data());
  LT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<bf16_bits> got = d_act.download(), full = d_full.download();
  const std::int64_t done = std::clamp<std::int64_t>(rows, 0, T);
  int bad = 0;
  for (std::int64_t i = 0; i < T * I; ++i) {
    const bool computed = i < done * I;
    if (computed ? got[std::size_t(i)] != full[std::size_t(i)] : !std::isnan(widen({got[std::size_t(i)]})[0])) ++bad;
  }
  std::printf("%s swiglu T=%lld I=%lld rows on the device %d: %d element(s) wrong\n", bad ? "FAIL" : "ok  ",
              (long long)T, (long long)I, rows, bad);
  return bad ? 1 : 0;
}

}  // namespace

int main() {
  return layertap::gpu_test::run_kernel_test(0, [](cudaStream_t stream) {
    int failures = 0;
    std::uint64_t seed = 9001;
    for (const std::int64_t T : {1, 3, 257})
      for (const std::int64_t I : {1, 7, 8, 100, 108, 2048 + 8, 2048 + 3}) failures += run_case(T, I, seed++, stream);
    failures += run_case(64, 14336, seed++, stream);  // Llama-3-8B's intermediate size
    for (const std::int32_t rows : {0, 5, 9, 40}) failures += rows_on_device(9, 24, rows, stream);
    return failures;
  });
}
