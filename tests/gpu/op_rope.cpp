// kernels/rope.cu (per-head q/k transforms around RoPE, in place on the fused qkv rows) against the
// CPU backend's cpu::rms_norm, cpu::Rope and cpu::attention_temperature on the same (widened) bf16
// inputs. Rows: op_cases.cpp.
//
// Tolerance, a bound rather than a tuned number. RoPE rotates pairs (a, b) = (x[i], x[i+hd/2])
// and a rotation keeps Euclidean length, so errors are measured per pair, relative to the pair's
// length |ref_pair|, with u = 2^-8 the unit roundoff of bf16:
//   * without the norm, the kernel's inputs are the reference's exactly; its only error is the
//     rounding of each output to bf16, at most u of each output, so |err_pair| <= u |pair|;
//   * with the norm (Qwen3), the kernel also rounds the normalised value and its product with the
//     weight to bf16 (HF's bf16 tensors; the CPU reference stays float32; the product of two bf16
//     values is exact in float32): inputs within (1+u)^2 - 1 = 2u + u^2, then the output rounding
//     of the perturbed pair, u (1 + 2u + u^2): |err_pair| <= (3u + 3u^2 + u^3) |pair| < 3u (1 + 2^-8).
//     With Gemma's weight offset the product (1 + w) * normed is not exact in float32: one more
//     rounding, 2^-24, within the 1e-6 below.
// Float32 differences (sincosf vs std::sin/cos, summation order of mean(x^2)) add ~1e-7; we allow
// 1e-6 relative on top. Every element is held to its pair's bound, and the normalized error to
// the same factor. The value heads must come back bit for bit. With partial rotary (rd < hd) the
// values past rd are only normed (two roundings, < 3u of the value) or, without the norm, untouched.
//
// Llama-4 (interleaved pairs, written back half-split as cpu::Rope does: the same per-pair bound):
//   * interleaved RoPE alone: u |pair|, as above;
//   * interleaved RoPE, then the weightless norm: the kernel rounds the rotated head y to bf16
//     (HF's bf16 tensor), |y_pair - r_pair| <= u |r_pair| for the float32 rotation r, so
//     ||y|| / ||r|| is within 1 -+ u and the norm's 1/sqrt(mean + eps) within 1/(1 +- u) of the
//     reference's; y * rstd(y) is off by (u + u)/(1 - u) of the normed pair, and the output rounding
//     adds u of that: (3u + u^2) / (1 - u) < 3u (1 + 2^-7) of |ref_pair|;
//   * NoPE: keys (and, without the temperature, queries) untouched, bit for bit; the temperature's
//     query rows one rounding of x * s(p), u |ref| per element (s(p) in float32 on both sides,
//     log1pf's last bit within the 1e-6).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ops.hpp"
#include "core/error.hpp"
#include "gpu_compare.hpp"
#include "gpu_test.hpp"
#include "kernels/rope.cuh"
#include "op_table.hpp"

namespace {

using namespace layertap::gpu_test;

using Case = layertap::gpu_test::ops::QkNormRope;
using layertap::gpu_test::ops::Llama4;

int run_case(const Case& c, std::uint64_t seed, cudaStream_t stream) {
  std::vector<std::int64_t> offsets{0};
  for (const std::int64_t n : c.lengths) offsets.push_back(offsets.back() + n);
  const std::int64_t T = offsets.back(), hd = c.hd, rd = c.rd == 0 ? c.hd : c.rd, row = (c.hq + 2 * c.hkv) * hd;
  const float eps = 1e-5f;
  std::mt19937_64 rng(seed);
  const std::vector<bf16_bits> qkv = normal_bf16(rng, T * row, 1.5f);     // (T, (hq + 2hkv) hd)
  const std::vector<bf16_bits> q_norm = random_bf16(rng, hd, 0.5f, 1.5f);  // (hd)
  const std::vector<bf16_bits> k_norm = random_bf16(rng, hd, 0.5f, 1.5f);
  std::vector<std::int32_t> pos(static_cast<std::size_t>(T));
  for (std::size_t s = 0; s + 1 < offsets.size(); ++s)
    for (std::int64_t t = offsets[s]; t < offsets[s + 1]; ++t)
      pos[std::size_t(t)] = std::int32_t(t - offsets[s] + (s == 0 ? c.first_position : 0));

  // CPU reference on the widened inputs: q (T, hq hd) and k (T, hkv hd) as contiguous arrays.
  const bool interleaved = c.llama4 == Llama4::Interleaved || c.llama4 == Llama4::InterleavedNorm;
  const bool nope = c.llama4 == Llama4::NoPE;
  using Layout = layertap::cpu::Rope::Layout;
  const layertap::cpu::Rope rope(c.rope, rd, interleaved ? Layout::Interleaved : Layout::HalfSplit, hd);
  const std::vector<float> in = widen(qkv);
  std::vector<float> q(std::size_t(T * c.hq * hd)), k(std::size_t(T * c.hkv * hd));
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t i = 0; i < c.hq * hd; ++i) q[std::size_t(t * c.hq * hd + i)] = in[std::size_t(t * row + i)];
    for (std::int64_t i = 0; i < c.hkv * hd; ++i)
      k[std::size_t(t * c.hkv * hd + i)] = in[std::size_t(t * row + c.hq * hd + i)];
  }
  if (c.norm) {
    const std::vector<float> qn = widen(q_norm), kn = widen(k_norm);
    layertap::cpu::rms_norm(q.data(), qn.data(), q.data(), T * c.hq, hd, eps, c.weight_offset);
    layertap::cpu::rms_norm(k.data(), kn.data(), k.data(), T * c.hkv, hd, eps, c.weight_offset);
  }
  if (!nope) {
    rope.apply(q.data(), c.hq, offsets, c.first_position);
    rope.apply(k.data(), c.hkv, offsets, c.first_position);
  }
  if (c.llama4 == Llama4::InterleavedNorm) {
    layertap::cpu::rms_norm(q.data(), nullptr, q.data(), T * c.hq, hd, eps);
    layertap::cpu::rms_norm(k.data(), nullptr, k.data(), T * c.hkv, hd, eps);
  }
  if (nope && c.temperature.on)
    layertap::cpu::attention_temperature(q.data(), c.hq * hd, offsets, c.first_position, c.temperature);

  Guarded<bf16_bits> d_qkv(T * row), d_qn(hd), d_kn(hd);
  Guarded<std::int32_t> d_pos(T);
  Guarded<float> d_freq(rd / 2);
  d_qkv.upload(qkv);
  d_qn.upload(q_norm);
  d_kn.upload(k_norm);
  d_pos.upload(pos);
  d_freq.upload(rope.inv_freq());
  using Rotation = layertap::kernels::QkRope::Rotation;
  const layertap::kernels::QkRope f{
      .q_norm = c.norm ? as_bf16(d_qn.data()) : nullptr,
      .k_norm = c.norm ? as_bf16(d_kn.data()) : nullptr,
      .weight_offset = c.weight_offset,
      .rotation = nope ? Rotation::None : interleaved ? Rotation::Interleaved : Rotation::HalfSplit,
      .rd = nope ? 0 : rd,
      .inv_freq = nope ? nullptr : d_freq.data(),
      .l2_norm = c.llama4 == Llama4::InterleavedNorm,
      .eps = eps,
      .temperature = c.temperature.on,
      .floor_scale = float(c.temperature.floor_scale),
      .attn_scale = float(c.temperature.attn_scale)};
  layertap::kernels::qk_norm_rope(as_bf16(d_qkv.data()), d_pos.data(), T, c.hq, c.hkv, hd, f, stream);
  LT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<bf16_bits> out = d_qkv.download();

  // Rotated heads: got/ref/bound in (T, hq + hkv, hd) order; value heads: exact.
  const double factor =
      (c.norm ? 3.0 * kBf16Unit * (1.0 + 1.0 / 256)
               : c.llama4 == Llama4::InterleavedNorm ? 3.0 * kBf16Unit * (1.0 + 1.0 / 128) : kBf16Unit) +
      1e-6;
  const std::int64_t heads = c.hq + c.hkv, half = rd / 2;
  std::vector<float> got, ref;
  std::vector<double> bound;
  std::int64_t v_changed = 0;
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t h = 0; h < heads; ++h) {
      const float* r = h < c.hq ? &q[std::size_t((t * c.hq + h) * hd)] : &k[std::size_t((t * c.hkv + h - c.hq) * hd)];
      for (std::int64_t i = 0; i < hd; ++i) {
        got.push_back(layertap::bf16_to_float(out[std::size_t(t * row + h * hd + i)]));
        ref.push_back(r[i]);
        const std::int64_t a = i % half;
        if (nope)  // the temperature's one rounding of each query value; else bit for bit
          bound.push_back(h < c.hq && c.temperature.on ? factor * std::fabs(r[i]) : 0.0);
        else
          bound.push_back(i < rd ? factor * std::hypot(double(r[a]), double(r[a + half])) : factor * std::fabs(r[i]));
      }
    }
    for (std::int64_t i = heads * hd; i < row; ++i)
      v_changed += out[std::size_t(t * row + i)] != qkv[std::size_t(t * row + i)];
  }
  const Comparison cmp = compare(got, ref, &bound);
  static const char* const llama4_names[] = {"", " interleaved", " interleaved +l2_norm", " nope"};
  char name[200];
  std::snprintf(name, sizeof name, "T=%lld (%zu samples, from %lld) hq=%lld hkv=%lld hd=%lld rd=%lld %s%s%s%s%s",
                (long long)T, c.lengths.size(), (long long)c.first_position, (long long)c.hq, (long long)c.hkv,
                (long long)hd, (long long)(nope ? 0 : rd), nope ? "" : c.rope_name.c_str(), c.norm ? " +qk_norm" : "",
                c.weight_offset != 0.0f ? " (1 + w)" : "", llama4_names[int(c.llama4)],
                c.temperature.on ? " +temperature" : "");
  int fails = report(name, cmp, factor, d_qkv.guard_damage() + d_pos.guard_damage(), &got, &ref);
  if (v_changed != 0) {
    std::printf("     FAIL: %lld value-head elements changed\n", (long long)v_changed);
    ++fails;
  }
  return fails;
}

int argument_checks() {
  int fails = 0;
  auto* p = reinterpret_cast<__nv_bfloat16*>(std::uintptr_t(0x1000));
  auto* ip = reinterpret_cast<std::int32_t*>(std::uintptr_t(0x2000));
  auto* fp = reinterpret_cast<float*>(std::uintptr_t(0x3000));
  using layertap::gpu_test::expect_throw;
  using layertap::kernels::qk_norm_rope;
  using QkRope = layertap::kernels::QkRope;
  using Rotation = QkRope::Rotation;
  const auto rope = [&](std::int64_t rd) { return QkRope{.rd = rd, .inv_freq = fp}; };
  expect_throw(fails, "odd head_dim", [&] { qk_norm_rope(p, ip, 4, 2, 2, 7, rope(7), nullptr); });
  expect_throw(fails, "odd rotary dim", [&] { qk_norm_rope(p, ip, 4, 2, 2, 8, rope(5), nullptr); });
  expect_throw(fails, "rotary dim past head_dim", [&] { qk_norm_rope(p, ip, 4, 2, 2, 8, rope(10), nullptr); });
  expect_throw(fails, "q_norm without k_norm",
               [&] { qk_norm_rope(p, ip, 4, 2, 2, 8, QkRope{.q_norm = p, .rd = 8, .inv_freq = fp}, nullptr); });
  expect_throw(fails, "no kv heads", [&] { qk_norm_rope(p, ip, 4, 2, 0, 8, rope(8), nullptr); });
  expect_throw(fails, "no inv_freq", [&] { qk_norm_rope(p, ip, 4, 2, 2, 8, QkRope{.rd = 8}, nullptr); });
  expect_throw(fails, "interleaved rotary dim above 256", [&] {
    qk_norm_rope(p, ip, 4, 2, 2, 300, QkRope{.rotation = Rotation::Interleaved, .rd = 258, .inv_freq = fp}, nullptr);
  });
  expect_throw(fails, "interleaved after a weighted norm", [&] {
    qk_norm_rope(p, ip, 4, 2, 2, 8,
                 QkRope{.q_norm = p, .k_norm = p, .rotation = Rotation::Interleaved, .rd = 8, .inv_freq = fp}, nullptr);
  });
  expect_throw(fails, "temperature floor_scale 0", [&] {
    qk_norm_rope(p, ip, 4, 2, 2, 8, QkRope{.rotation = Rotation::None, .temperature = true, .floor_scale = 0}, nullptr);
  });
  return fails;
}

}  // namespace

namespace layertap::gpu_test::ops {

int run(const QkNormRope& c, std::uint64_t seed, cudaStream_t stream) { return run_case(c, seed, stream); }
int rope_host_checks() { return argument_checks(); }

}  // namespace layertap::gpu_test::ops
