// kernels/swiglu.cu against the CPU backend's cpu::gated_activation on the same (widened) bf16
// inputs, at I that are and are not multiples of the kernel's 8-element vectors, for SwiGLU, GeGLU
// and GPT-OSS's clamped SwiGLU, with gate and up split or interleaved (de-interleaved on the host
// for the CPU). Rows: op_cases.cpp.
//
// Tolerance, a bound per element from where the kernel rounds, with u = 2^-8 the unit roundoff of
// bf16; the product of two bf16 values is exact in float32, and ~1e-6 relative covers float32's
// own roundings and expf's and tanhf's last bits.
//   Silu, GeluTanh: act(g) and the product are rounded: (1+u)^2 - 1 = 2u + u^2, so
//     (2u + u^2 + 1e-6) |ref|.
//   ClampedSwiglu: the sigmoid's input a = gc * alpha is rounded first, which moves log sigmoid
//     by at most |a| u (1 - sigmoid(a - |a| u)) (its slope 1 - sigmoid falls with a), e^s - 1
//     relative for that s; then the sigmoid, gc * sigmoid, uc + 1 and the product are rounded:
//     ((1+u)^4 e^s - 1 + 1e-6) |ref|. s is large only for very negative gates, whose outputs are tiny.
// The normalized error is held to ||bound|| / ||ref||, which any output within the elementwise
// bounds meets (for Silu and GeluTanh: 2u + u^2 + 1e-6).
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
#include "op_table.hpp"

namespace {

using namespace layertap::gpu_test;

using layertap::kernels::GateActivation;

// The CPU op's descriptor of the same activation.
layertap::GatedActivation cpu_activation(const GateActivation& f) {
  using Kind = layertap::GatedActivation::Kind;
  const Kind kind = f.kind == GateActivation::Silu       ? Kind::Silu
                    : f.kind == GateActivation::GeluTanh ? Kind::GeluTanh
                                                         : Kind::ClampedSwiglu;
  return {kind, f.alpha, f.limit};
}

const char* kind_name(const GateActivation& f) {
  return f.kind == GateActivation::Silu ? "silu" : f.kind == GateActivation::GeluTanh ? "gelu_tanh" : "clamped";
}

int run_case(std::int64_t T, std::int64_t I, const GateActivation& f, std::uint64_t seed, cudaStream_t stream) {
  std::mt19937_64 rng(seed);
  // (T, 2I): wide enough to saturate silu and to pass both clamps of GPT-OSS's limit 7.
  const std::vector<bf16_bits> gu = normal_bf16(rng, T * 2 * I, 3.0f);
  const std::vector<float> in = widen(gu);
  std::vector<float> gate(std::size_t(T * I)), up(std::size_t(T * I)), ref(std::size_t(T * I));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t i = 0; i < I; ++i) {
      const std::int64_t g = f.interleaved ? 2 * i : i, u = f.interleaved ? 2 * i + 1 : I + i;
      gate[std::size_t(t * I + i)] = in[std::size_t(t * 2 * I + g)];
      up[std::size_t(t * I + i)] = in[std::size_t(t * 2 * I + u)];
    }
  layertap::cpu::gated_activation(gate.data(), up.data(), ref.data(), T * I, cpu_activation(f));

  Guarded<bf16_bits> d_gu(T * 2 * I), d_act(T * I);
  d_gu.upload(gu);
  poison_bf16(d_act);
  layertap::kernels::swiglu(as_bf16(d_act.data()), as_bf16(d_gu.data()), T, I, f, stream);
  LT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<float> got = widen(d_act.download());

  const double u = kBf16Unit;
  std::vector<double> bound(ref.size());
  double bound_sq = 0, ref_sq = 0;
  for (std::size_t i = 0; i < ref.size(); ++i) {
    double factor = 2.0 * u + u * u + 1e-6;
    if (f.kind == GateActivation::ClampedSwiglu) {
      const double a = std::min(double(gate[i]), double(f.limit)) * double(f.alpha), da = std::fabs(a) * u;
      const double s = da * (1.0 - 1.0 / (1.0 + std::exp(-(a - da))));
      factor = std::pow(1.0 + u, 4) * std::exp(s) - 1.0 + 1e-6;
    }
    bound[i] = factor * std::fabs(double(ref[i])) + 1e-37;
    bound_sq += bound[i] * bound[i];
    ref_sq += double(ref[i]) * double(ref[i]);
  }
  const double norm_tol = ref_sq > 0 ? std::sqrt(bound_sq / ref_sq) : 1e-37;
  char name[96];
  std::snprintf(name, sizeof name, "%-9s %-5s T=%lld I=%lld", kind_name(f), f.interleaved ? "inter" : "split",
                (long long)T, (long long)I);
  return report(name, compare(got, ref, &bound), norm_tol, d_act.guard_damage() + d_gu.guard_damage(), &got, &ref);
}

// With a device row count: the first `rows` rows are computed, the rest of the (T, I) output is
// left as it was (a MoE layer's routed rows under the host's bound).
int rows_on_device(std::int64_t T, std::int64_t I, std::int32_t rows, const GateActivation& f, cudaStream_t stream) {
  std::mt19937_64 rng(77);
  const std::vector<bf16_bits> gu = normal_bf16(rng, T * 2 * I, 3.0f);
  Guarded<bf16_bits> d_gu(T * 2 * I), d_act(T * I), d_full(T * I);
  Guarded<std::int32_t> d_rows(1);
  d_gu.upload(gu);
  d_rows.upload({rows});
  poison_bf16(d_act);
  layertap::kernels::swiglu(as_bf16(d_full.data()), as_bf16(d_gu.data()), T, I, f, stream);
  layertap::kernels::swiglu(as_bf16(d_act.data()), as_bf16(d_gu.data()), T, I, f, stream, d_rows.data());
  LT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<bf16_bits> got = d_act.download(), full = d_full.download();
  const std::int64_t done = std::clamp<std::int64_t>(rows, 0, T);
  int bad = 0;
  for (std::int64_t i = 0; i < T * I; ++i) {
    const bool computed = i < done * I;
    if (computed ? got[std::size_t(i)] != full[std::size_t(i)] : !std::isnan(widen({got[std::size_t(i)]})[0])) ++bad;
  }
  std::printf("%s swiglu %s %s T=%lld I=%lld rows on the device %d: %d element(s) wrong\n", bad ? "FAIL" : "ok  ",
              kind_name(f), f.interleaved ? "inter" : "split", (long long)T, (long long)I, rows, bad);
  return bad ? 1 : 0;
}

}  // namespace

namespace layertap::gpu_test::ops {

int run(const Swiglu& c, std::uint64_t seed, cudaStream_t stream) { return run_case(c.T, c.I, c.f, seed, stream); }

// The device row count of every activation and layout, at I on and off the vector width.
int swiglu_device_checks(cudaStream_t stream) {
  int failures = 0;
  const GateActivation silu{}, gelu{GateActivation::GeluTanh};
  for (const GateActivation& f : {silu, gelu, GateActivation{GateActivation::ClampedSwiglu, 1.702f, 7.0f, false},
                                  GateActivation{GateActivation::ClampedSwiglu, 1.702f, 7.0f, true}})
    for (const std::int64_t I : {24, 13})
      for (const std::int32_t rows : {0, 5, 9, 40}) failures += rows_on_device(9, I, rows, f, stream);
  return failures;
}

}  // namespace layertap::gpu_test::ops
