// kernels/mla.cu and the MLA use of kernels/attention.cu against the CPU backend's parts
// (cpu::rms_norm, cpu::Rope with YaRN and the interleaved layout, cpu::causal_attention with qk and
// v head dims of their own and MLA's softmax scale). Rows: op_cases.cpp.
//
// Tolerances (u = 2^-8, bf16's unit roundoff):
//   rmsnorm_rows: rounds the normalised value and its product with the weight (HF's bf16 order),
//     against the float32 CPU norm: (2u + u^2) |ref|, plus 1e-6 |ref| for float32 summation order
//     (and, with Gemma's weight offset, the float32 rounding of (1 + w) * normed, 2^-24).
//   rope_strided: one rounding of each rotated value, measured per pair as op_rope.cpp does:
//     u |pair| + 1e-6 |pair|; the dims it must not touch come back bit for bit.
//   mla_assemble_kv: copies, exact.
//   attention (layout form): as op_attention.cpp: reference u |ref| + 2e-4 v_max; flash (192/128)
//     also u v_max for its bf16 probabilities.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "backend/cpu/ops.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "gpu_compare.hpp"
#include "gpu_test.hpp"
#include "kernels/attention.cuh"
#include "kernels/mla.cuh"
#include "op_table.hpp"

namespace {

using namespace layertap::gpu_test;
namespace kernels = layertap::kernels;
using layertap::RopeConfig;

std::vector<std::int32_t> positions(const std::vector<std::int64_t>& offsets) {
  std::vector<std::int32_t> pos(std::size_t(offsets.back()));
  for (std::size_t s = 0; s + 1 < offsets.size(); ++s)
    for (std::int64_t t = offsets[s]; t < offsets[s + 1]; ++t) pos[std::size_t(t)] = std::int32_t(t - offsets[s]);
  return pos;
}

std::vector<std::int64_t> offsets_of(const std::vector<std::int64_t>& lengths) {
  std::vector<std::int64_t> off{0};
  for (const std::int64_t n : lengths) off.push_back(off.back() + n);
  return off;
}

int rmsnorm_case(std::int64_t N, std::int64_t C, std::int64_t in_stride, std::int64_t out_stride, bool in_place,
                 float weight_offset, std::uint64_t seed, cudaStream_t stream) {
  std::mt19937_64 rng(seed);
  const std::vector<bf16_bits> in = normal_bf16(rng, N * in_stride, 2.0f);
  const std::vector<bf16_bits> w = random_bf16(rng, C, 0.5f, 1.5f);
  std::vector<float> x(std::size_t(N * C)), ref(std::size_t(N * C));
  for (std::int64_t r = 0; r < N; ++r)
    for (std::int64_t c = 0; c < C; ++c) x[std::size_t(r * C + c)] = layertap::bf16_to_float(in[std::size_t(r * in_stride + c)]);
  const std::vector<float> wf = widen(w);
  const float eps = 1e-6f;
  layertap::cpu::rms_norm(x.data(), wf.data(), ref.data(), N, C, eps, weight_offset);
  Guarded<bf16_bits> d_in(N * in_stride), d_w(C), d_out(N * out_stride);
  d_in.upload(in);
  d_w.upload(w);
  poison_bf16(d_out);
  bf16_bits* out = in_place ? d_in.data() : d_out.data();
  const std::int64_t os = in_place ? in_stride : out_stride;
  kernels::rmsnorm_rows(as_bf16(out), os, as_bf16(d_in.data()), in_stride, as_bf16(d_w.data()), eps, N, C, stream,
                        weight_offset);
  LT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<bf16_bits> raw = in_place ? d_in.download() : d_out.download();
  std::vector<float> got(ref.size());
  std::vector<double> bound(ref.size());
  std::int64_t untouched_bad = 0;
  for (std::int64_t r = 0; r < N; ++r) {
    for (std::int64_t c = 0; c < C; ++c) {
      got[std::size_t(r * C + c)] = layertap::bf16_to_float(raw[std::size_t(r * os + c)]);
      bound[std::size_t(r * C + c)] = (2 * kBf16Unit + kBf16Unit * kBf16Unit + 1e-6) * std::fabs(double(ref[std::size_t(r * C + c)]));
    }
    if (in_place)  // the columns past C (MLA: the rope key) stay as they were
      for (std::int64_t c = C; c < in_stride; ++c) untouched_bad += raw[std::size_t(r * os + c)] != in[std::size_t(r * in_stride + c)];
  }
  char name[128];
  std::snprintf(name, sizeof name, "rmsnorm_rows N=%lld C=%lld strides %lld/%lld%s", (long long)N, (long long)C,
                (long long)in_stride, (long long)os, in_place ? " in place" : "");
  if (weight_offset != 0.0f)
    std::snprintf(name + std::strlen(name), sizeof name - std::strlen(name), " offset=%g", double(weight_offset));
  int fails = report(name, compare(got, ref, &bound), 2 * kBf16Unit + 1e-6,
                     d_in.guard_damage() + d_out.guard_damage() + d_w.guard_damage(), &got, &ref);
  if (untouched_bad != 0) {
    std::printf("     FAIL: %lld values past C changed\n", (long long)untouched_bad);
    ++fails;
  }
  return fails;
}

// RoPE on `heads` vectors of dim rd at offset `offset` of rows of `row` values (head stride hs).
int rope_case(const std::vector<std::int64_t>& lengths, std::int64_t row, std::int64_t hs, std::int64_t offset,
              std::int64_t heads, std::int64_t rd, bool interleaved, const RopeConfig& cfg, std::uint64_t seed,
              cudaStream_t stream) {
  const std::vector<std::int64_t> offsets = offsets_of(lengths);
  const std::int64_t T = offsets.back();
  std::mt19937_64 rng(seed);
  const std::vector<bf16_bits> x = normal_bf16(rng, T * row, 1.5f);
  const layertap::cpu::Rope rope(cfg, rd, interleaved ? layertap::cpu::Rope::Layout::Interleaved
                                                      : layertap::cpu::Rope::Layout::HalfSplit);
  std::vector<float> v(std::size_t(T * heads * rd));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < rd; ++i)
        v[std::size_t((t * heads + h) * rd + i)] = layertap::bf16_to_float(x[std::size_t(t * row + h * hs + offset + i)]);
  rope.apply(v.data(), heads, offsets);
  Guarded<bf16_bits> d_x(T * row);
  Guarded<std::int32_t> d_pos(T);
  Guarded<float> d_freq(rd / 2);
  d_x.upload(x);
  d_pos.upload(positions(offsets));
  d_freq.upload(rope.inv_freq());
  kernels::rope_strided(as_bf16(d_x.data()), row, hs, offset, heads, rd, interleaved, d_pos.data(), d_freq.data(),
                        rope.attention_factor(), T, stream);
  LT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<bf16_bits> out = d_x.download();
  std::vector<float> got, ref;
  std::vector<double> bound;
  std::vector<bool> rotated(std::size_t(T * row), false);
  const std::int64_t half = rd / 2;
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < rd; ++i) {
        const std::size_t at = std::size_t(t * row + h * hs + offset + i);
        rotated[at] = true;
        const float* r = &v[std::size_t((t * heads + h) * rd)];
        got.push_back(layertap::bf16_to_float(out[at]));
        ref.push_back(r[i]);
        const std::int64_t a = i % half;  // the output is half-split in both layouts
        bound.push_back((kBf16Unit + 1e-6) * std::hypot(double(r[a]), double(r[a + half])));
      }
  std::int64_t changed = 0;
  for (std::size_t i = 0; i < out.size(); ++i) changed += !rotated[i] && out[i] != x[i];
  char name[160];
  std::snprintf(name, sizeof name, "rope_strided T=%lld heads=%lld rd=%lld offset=%lld %s af=%.3f", (long long)T,
                (long long)heads, (long long)rd, (long long)offset, interleaved ? "interleaved" : "half-split",
                double(rope.attention_factor()));
  int fails = report(name, compare(got, ref, &bound), kBf16Unit + 1e-6, d_x.guard_damage() + d_pos.guard_damage(),
                     &got, &ref);
  if (changed != 0) {
    std::printf("     FAIL: %lld values outside the rope dims changed\n", (long long)changed);
    ++fails;
  }
  return fails;
}

int assemble_case(std::int64_t T, std::int64_t nh, std::int64_t nope, std::int64_t rd, std::int64_t vd,
                  std::int64_t kvl, std::uint64_t seed, cudaStream_t stream) {
  std::mt19937_64 rng(seed);
  const std::vector<bf16_bits> kv = normal_bf16(rng, T * nh * (nope + vd), 1.0f);
  const std::vector<bf16_bits> ckv = normal_bf16(rng, T * (kvl + rd), 1.0f);
  Guarded<bf16_bits> d_kv(T * nh * (nope + vd)), d_ckv(T * (kvl + rd)), d_k(T * nh * (nope + rd)), d_v(T * nh * vd);
  d_kv.upload(kv);
  d_ckv.upload(ckv);
  poison_bf16(d_k);
  poison_bf16(d_v);
  kernels::mla_assemble_kv(as_bf16(d_k.data()), as_bf16(d_v.data()), as_bf16(d_kv.data()), as_bf16(d_ckv.data()) + kvl,
                           kvl + rd, T, nh, nope, rd, vd, stream);
  LT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<bf16_bits> k = d_k.download(), v = d_v.download();
  std::int64_t bad = 0;
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t h = 0; h < nh; ++h) {
      for (std::int64_t d = 0; d < nope + rd; ++d) {
        const bf16_bits want = d < nope ? kv[std::size_t((t * nh + h) * (nope + vd) + d)]
                                        : ckv[std::size_t(t * (kvl + rd) + kvl + d - nope)];
        bad += k[std::size_t((t * nh + h) * (nope + rd) + d)] != want;
      }
      for (std::int64_t d = 0; d < vd; ++d)
        bad += v[std::size_t((t * nh + h) * vd + d)] != kv[std::size_t((t * nh + h) * (nope + vd) + nope + d)];
    }
  const std::int64_t damage = d_k.guard_damage() + d_v.guard_damage();
  const bool ok = bad == 0 && damage == 0;
  std::printf("%s mla_assemble_kv T=%lld nh=%lld nope=%lld rd=%lld v=%lld: %lld differ, guard damage %lld\n",
              ok ? "ok  " : "FAIL", (long long)T, (long long)nh, (long long)nope, (long long)rd, (long long)vd,
              (long long)bad, (long long)damage);
  return ok ? 0 : 1;
}

// MLA attention: q (T, nh qk), k (T, nh qk), v (T, nh vd) in their own buffers, scale `scale`.
int attention_case(const std::vector<std::int64_t>& lengths, std::int64_t nh, std::int64_t qk, std::int64_t vd,
                   float scale, std::uint64_t seed, cudaStream_t stream) {
  const std::vector<std::int64_t> offsets = offsets_of(lengths);
  const std::int64_t T = offsets.back();
  std::mt19937_64 rng(seed);
  const float sd = std::sqrt(2.0f / (scale * std::sqrt(float(qk))));  // scores of order 1..3
  const std::vector<bf16_bits> q = normal_bf16(rng, T * nh * qk, sd), k = normal_bf16(rng, T * nh * qk, sd),
                               v = normal_bf16(rng, T * nh * vd, 1.0f);
  const std::vector<float> qf = widen(q), kf = widen(k), vf = widen(v);
  std::vector<float> ref(std::size_t(T * nh * vd));
  layertap::cpu::causal_attention(qf.data(), kf.data(), vf.data(), ref.data(), offsets, nh, nh, qk, vd, scale, 0);
  double v_max = 0;
  for (const float x : vf) v_max = std::max(v_max, std::fabs(double(x)));
  Guarded<bf16_bits> d_q(T * nh * qk), d_k(T * nh * qk), d_v(T * nh * vd), d_ctx(T * nh * vd);
  Guarded<std::int32_t> d_pos(T);
  d_q.upload(q);
  d_k.upload(k);
  d_v.upload(v);
  d_pos.upload(positions(offsets));
  const std::vector<std::int32_t> tiles = kernels::flash_query_tiles(offsets);
  Guarded<std::int32_t> d_tiles(std::int64_t(tiles.size()));
  d_tiles.upload(tiles);
  const kernels::AttentionLayout layout{as_bf16(d_q.data()), nh * qk, as_bf16(d_k.data()), nh * qk,
                                        as_bf16(d_v.data()), nh * vd, nh, nh, qk, vd, scale};
  int fails = 0;
  for (const bool flash : {false, true}) {
    char name[160];
    std::snprintf(name, sizeof name, "%-9s T=%-4lld S=%zu heads=%lld qk=%lld v=%lld scale=%.4f",
                  flash ? "flash" : "reference", (long long)T, lengths.size(), (long long)nh, (long long)qk,
                  (long long)vd, double(scale));
    if (flash && !kernels::flash_attention_supported(qk, vd)) {
      std::printf("skip %s (flash: 64/64, 128/128, 192/128 on sm_80+ only)\n", name);
      continue;
    }
    poison_bf16(d_ctx);
    if (flash)
      kernels::attention_flash(as_bf16(d_ctx.data()), layout, d_pos.data(), d_tiles.data(),
                               std::int64_t(tiles.size()) / 2, T, 0, stream);
    else
      kernels::attention_reference(as_bf16(d_ctx.data()), layout, d_pos.data(), T, 0, stream);
    LT_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<float> got = widen(d_ctx.download());
    const double abs_part = (flash ? kBf16Unit : 0.0) * v_max + 2e-4 * v_max;
    std::vector<double> bound(ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i) bound[i] = kBf16Unit * std::fabs(double(ref[i])) + abs_part;
    fails += report(name, compare(got, ref, &bound), (flash ? 2.0 : 1.0) * kBf16Unit + 2e-4,
                    d_ctx.guard_damage() + d_q.guard_damage() + d_k.guard_damage() + d_v.guard_damage() +
                        d_tiles.guard_damage(),
                    &got, &ref);
  }
  return fails;
}

// Argument checks (no device).
int argument_checks() {
  int host = 0;
  auto* p = reinterpret_cast<__nv_bfloat16*>(std::uintptr_t(0x1000));
  auto* ip = reinterpret_cast<std::int32_t*>(std::uintptr_t(0x2000));
  auto* fp = reinterpret_cast<float*>(std::uintptr_t(0x3000));
  expect_throw(host, "rope dim above 256", [&] { kernels::rope_strided(p, 600, 0, 0, 1, 300, true, ip, fp, 1.0f, 4, nullptr); });
  expect_throw(host, "rope past the row", [&] { kernels::rope_strided(p, 64, 0, 8, 1, 64, true, ip, fp, 1.0f, 4, nullptr); });
  expect_throw(host, "in-place norm with other strides",
               [&] { kernels::rmsnorm_rows(p, 32, p, 40, p, 1e-6f, 4, 32, nullptr); });
  const kernels::AttentionLayout short_rows{p, 10, p, 24, p, 16, 1, 1, 24, 16, 0.2f};
  expect_throw(host, "attention layout with rows shorter than its heads",
               [&] { kernels::attention_reference(p, short_rows, ip, 4, 0, nullptr); });
  return host;
}

}  // namespace

namespace layertap::gpu_test::ops {

int run(const RmsnormRows& c, std::uint64_t seed, cudaStream_t stream) {
  return rmsnorm_case(c.N, c.C, c.in_stride, c.out_stride, c.in_place, c.weight_offset, seed, stream);
}
int run(const RopeStrided& c, std::uint64_t seed, cudaStream_t stream) {
  return rope_case(c.lengths, c.row, c.hs, c.offset, c.heads, c.rd, c.interleaved, c.cfg, seed, stream);
}
int run(const MlaAssembleKv& c, std::uint64_t seed, cudaStream_t stream) {
  return assemble_case(c.T, c.nh, c.nope, c.rd, c.vd, c.kvl, seed, stream);
}
int run(const AttentionMla& c, std::uint64_t seed, cudaStream_t stream) {
  return attention_case(c.lengths, c.nh, c.qk, c.vd, c.scale, seed, stream);
}
int mla_host_checks() { return argument_checks(); }

}  // namespace layertap::gpu_test::ops
