// kernels/moe.cu: the router kernel against route_token on the host (the function test_cuda_moe_host
// holds bit for bit to cpu::route), the permutation, gather and weighted un-permutation against
// host references. Rows: op_cases.cpp.
//
// Tolerances:
//   routing: logits on a grid of 1/8 (ties included) keep every comparison the choice makes far
//     apart or exactly equal, so the experts must match exactly; the weights differ from the host's
//     only through expf's last bits (CUDA's expf is within 2 ulp): 4e-6 relative (NaN meets NaN).
//     On the simulated GPU, whose expf is the host's, the weights must match bit for bit: the
//     warp router keeps route_token's every operation and summation order.
//   permutation and gather: exact (integers, copies; input-weighted rows bf16(h * w) rounded once,
//     as the host rounds them).
//   combine: one bf16 rounding of a float32 sum, u |ref| (u = 2^-8), plus the float32 summation
//     order and fused multiply-adds, 1e-6 of the sum of |terms|.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "gpu_compare.hpp"
#include "gpu_test.hpp"
#include "kernels/moe.cuh"
#include "kernels/moe_routing.hpp"
#include "op_table.hpp"

namespace {

using namespace layertap::gpu_test;
namespace kernels = layertap::kernels;

using layertap::gpu_test::ops::Logits;

int route_case(const std::string& name, const kernels::RouteParams& p, bool bias, bool offset, std::uint64_t seed,
               cudaStream_t stream, std::int64_t T = 300, Logits kind = Logits::Grid) {
  const std::int64_t E = p.num_experts, k = p.top_k;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> grid(-24, 24), coarse(-1, 1), special(0, 40);
  std::vector<float> logits(std::size_t(T * E)), b(static_cast<std::size_t>(E)), off(static_cast<std::size_t>(E));
  for (float& x : logits) {
    x = kind == Logits::Ties ? float(coarse(rng)) : float(grid(rng)) / 8.0f;
    if (kind == Logits::Special) {
      const int r = special(rng);
      x = r == 0 ? NAN : r == 1 ? INFINITY : r == 2 ? -INFINITY : x;
    }
  }
  for (float& x : b) x = float(grid(rng) % 3) / 16.0f;
  for (std::int64_t e = 0; e < E; ++e) off[std::size_t(e)] = -0.5f * float(e % 5);
  // Host: the offset added first (as the kernel does), then route_token.
  std::vector<std::int32_t> want_e(std::size_t(T * k));
  std::vector<float> want_w(std::size_t(T * k)), row(static_cast<std::size_t>(E)), choice(static_cast<std::size_t>(E));
  for (std::int64_t t = 0; t < T; ++t) {
    for (std::int64_t e = 0; e < E; ++e)
      row[std::size_t(e)] = logits[std::size_t(t * E + e)] + (offset ? off[std::size_t(e)] : 0.0f);
    kernels::route_token(p, row.data(), choice.data(), bias ? b.data() : nullptr, &want_e[std::size_t(t * k)],
                         &want_w[std::size_t(t * k)]);
  }
  Guarded<float> d_logits(T * E), d_choice(T * E), d_bias(E), d_off(E), d_w(T * k);
  Guarded<std::int32_t> d_e(T * k);
  d_logits.upload(logits);
  d_bias.upload(b);
  d_off.upload(off);
  kernels::moe_route(p, d_logits.data(), d_choice.data(), bias ? d_bias.data() : nullptr,
                     offset ? d_off.data() : nullptr, d_e.data(), d_w.data(), T, stream);
  LT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<std::int32_t> got_e = d_e.download();
  const std::vector<float> got_w = d_w.download();
  std::int64_t e_diff = 0, w_diff = 0;
  for (std::size_t i = 0; i < got_e.size(); ++i) {
    e_diff += got_e[i] != want_e[i];
    const bool same = got_w[i] == want_w[i] || (std::isnan(got_w[i]) && std::isnan(want_w[i]));
#if defined(LAYERTAP_CUDA_SIM)
    w_diff += !same;  // the simulated GPU's expf is the host's: bit for bit
#else
    w_diff += !(same || std::fabs(got_w[i] - want_w[i]) <= 4e-6f * std::fabs(want_w[i]));
#endif
  }
  const std::int64_t damage = d_logits.guard_damage() + d_choice.guard_damage() + d_e.guard_damage() + d_w.guard_damage();
  const bool ok = e_diff == 0 && w_diff == 0 && damage == 0;
  std::printf("%s route %-56s T=%-4lld experts differ %lld, weights off %lld, guard damage %lld\n", ok ? "ok  " : "FAIL",
              name.c_str(), (long long)T, (long long)e_diff, (long long)w_diff, (long long)damage);
  return ok ? 0 : 1;
}

// Random distinct experts per token; permutation, gather and combine against host references.
// `repeats`: experts drawn with replacement (a token may name one twice: its pairs in choice
// order); needs n >= k, so that T * min(k, n) rows still hold them. `weight_input` (Llama-4): the
// gather scales each row by its pair's weight and the combine sums unweighted (null weights).
int permute_case(std::int64_t T, std::int64_t E, std::int64_t k, std::int64_t first, std::int64_t n,
                 std::int64_t H, bool shared, std::uint64_t seed, cudaStream_t stream, bool repeats = false,
                 bool weight_input = false) {
  std::mt19937_64 rng(seed);
  std::vector<std::int32_t> experts(std::size_t(T * k));
  std::vector<std::int32_t> all(static_cast<std::size_t>(E));
  std::iota(all.begin(), all.end(), 0);
  std::uniform_int_distribution<std::int32_t> any(0, std::int32_t(E - 1));
  for (std::int64_t t = 0; t < T; ++t) {
    if (repeats) {
      for (std::int64_t j = 0; j < k; ++j) experts[std::size_t(t * k + j)] = any(rng);
      continue;
    }
    std::shuffle(all.begin(), all.end(), rng);
    std::copy(all.begin(), all.begin() + k, experts.begin() + t * k);
  }
  // Host: counts, offsets, slots in token order within each expert.
  std::vector<std::int32_t> counts(std::size_t(n), 0), offsets(std::size_t(n + 1), 0), slot(std::size_t(T * k), -1);
  for (const std::int32_t e : experts)
    if (e >= first && e < first + n) ++counts[std::size_t(e - first)];
  for (std::int64_t e = 0; e < n; ++e) offsets[std::size_t(e + 1)] = offsets[std::size_t(e)] + counts[std::size_t(e)];
  const std::int64_t rows = offsets[std::size_t(n)], max_rows = T * std::min(k, n);
  std::vector<std::int32_t> fill(offsets.begin(), offsets.end() - 1), perm(static_cast<std::size_t>(rows)),
      pair_of_row(static_cast<std::size_t>(rows));
  for (std::int64_t i = 0; i < T * k; ++i) {
    const std::int32_t e = experts[std::size_t(i)];
    if (e < first || e >= first + n) continue;
    const std::int32_t r = fill[std::size_t(e - first)]++;
    slot[std::size_t(i)] = r;
    perm[std::size_t(r)] = std::int32_t(i / k);
    pair_of_row[std::size_t(r)] = std::int32_t(i);
  }
  const std::vector<bf16_bits> h = normal_bf16(rng, T * H, 1.0f);
  const std::vector<bf16_bits> y = normal_bf16(rng, std::max<std::int64_t>(rows, 1) * H, 1.0f);
  const std::vector<bf16_bits> sh = normal_bf16(rng, T * H, 0.5f);
  std::vector<float> weights(std::size_t(T * k));
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& w : weights) w = u(rng);

  Guarded<std::int32_t> d_experts(T * k), d_counts(n), d_offsets(n + 1), d_slot(T * k), d_perm(max_rows);
  Guarded<bf16_bits> d_h(T * H), d_x(max_rows * H), d_y(std::max<std::int64_t>(rows, 1) * H), d_sh(T * H), d_out(T * H);
  Guarded<float> d_w(T * k);
  d_experts.upload(experts);
  d_h.upload(h);
  d_y.upload(y);
  d_sh.upload(sh);
  d_w.upload(weights);
  poison_bf16(d_out);
  kernels::moe_permute(d_experts.data(), T, k, first, n, d_counts.data(), d_offsets.data(), d_slot.data(), d_perm.data(),
                       stream);
  kernels::moe_gather(as_bf16(d_x.data()), as_bf16(d_h.data()), d_perm.data(), d_offsets.data() + n, max_rows, H, stream,
                      weight_input ? d_slot.data() : nullptr, weight_input ? d_w.data() : nullptr, weight_input ? k : 0);
  const bool combine = k <= 64;  // moe_combine's limit
  if (combine)
    kernels::moe_combine(as_bf16(d_out.data()), as_bf16(d_y.data()), d_slot.data(), weight_input ? nullptr : d_w.data(),
                         shared ? as_bf16(d_sh.data()) : nullptr, T, k, H, stream);
  LT_CUDA_CHECK(cudaStreamSynchronize(stream));

  int fails = 0;
  char name[160];
  std::snprintf(name, sizeof name, "T=%lld E=%lld k=%lld experts %lld..%lld H=%lld%s%s%s", (long long)T,
                (long long)E, (long long)k, (long long)first, (long long)(first + n - 1), (long long)H,
                shared ? " +shared" : "", repeats ? " repeats" : "", weight_input ? " input-weighted" : "");
  const std::vector<std::int32_t> got_perm = d_perm.download();
  const bool perm_ok = d_counts.download() == counts && d_offsets.download() == offsets && d_slot.download() == slot &&
                       std::equal(perm.begin(), perm.end(), got_perm.begin());
  // Gather: rows [0, rows) are h's rows (input-weighted: bf16(h * w) of the row's pair); rows past
  // the total keep the sentinel.
  const std::vector<bf16_bits> x = d_x.download();
  std::int64_t gather_bad = 0;
  for (std::int64_t r = 0; r < max_rows; ++r)
    for (std::int64_t c = 0; c < H; ++c) {
      bf16_bits want = bf16_bits(0xa5a5);
      if (r < rows) {
        want = h[std::size_t(std::int64_t(perm[std::size_t(r)]) * H + c)];
        if (weight_input)
          want = layertap::float_to_bf16(layertap::bf16_to_float(want) * weights[std::size_t(pair_of_row[std::size_t(r)])]);
      }
      gather_bad += x[std::size_t(r * H + c)] != want;
    }
  const std::int64_t damage = d_counts.guard_damage() + d_offsets.guard_damage() + d_slot.guard_damage() +
                              d_perm.guard_damage() + d_x.guard_damage();
  const bool ok = perm_ok && gather_bad == 0 && damage == 0;
  std::printf("%s permute+gather %-50s rows %lld of at most %lld, gather differs %lld, guard damage %lld\n",
              ok ? "ok  " : "FAIL", name, (long long)rows, (long long)max_rows, (long long)gather_bad, (long long)damage);
  fails += ok ? 0 : 1;
  if (!combine) return fails;

  // Combine against the float32 sum (input-weighted: of the outputs themselves).
  std::vector<float> ref(std::size_t(T * H)), got = widen(d_out.download());
  std::vector<double> bound(ref.size());
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t c = 0; c < H; ++c) {
      float acc = 0.0f;
      double mag = 0.0;
      for (std::int64_t j = 0; j < k; ++j) {
        const std::int32_t s = slot[std::size_t(t * k + j)];
        if (s < 0) continue;
        const float w = weight_input ? 1.0f : weights[std::size_t(t * k + j)];
        const float term = w * layertap::bf16_to_float(y[std::size_t(std::int64_t(s) * H + c)]);
        acc += term;
        mag += std::fabs(double(term));
      }
      if (shared) {
        const float s = layertap::bf16_to_float(sh[std::size_t(t * H + c)]);
        acc += s;
        mag += std::fabs(double(s));
      }
      ref[std::size_t(t * H + c)] = acc;
      bound[std::size_t(t * H + c)] = kBf16Unit * std::fabs(double(acc)) + 1e-6 * mag + 1e-30;
    }
  fails += report(std::string("combine ") + name, compare(got, ref, &bound), kBf16Unit + 1e-6,
                  d_out.guard_damage() + d_y.guard_damage(), &got, &ref);
  return fails;
}

// Argument checks (no device).
int argument_checks() {
  int host = 0;
  kernels::RouteParams bad;
  bad.num_experts = 8, bad.top_k = 9;
  expect_throw(host, "top_k above the expert count", [&] {
    kernels::moe_route(bad, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 1, nullptr);
  });
  kernels::RouteParams groups;
  groups.kind = kernels::RouteParams::SigmoidGroupedTopk;
  groups.num_experts = 16, groups.top_k = 8, groups.n_group = 4, groups.topk_group = 1;
  auto* f = reinterpret_cast<float*>(std::uintptr_t(0x1000));
  auto* i = reinterpret_cast<std::int32_t*>(std::uintptr_t(0x2000));
  expect_throw(host, "kept groups hold fewer experts than top_k",
               [&] { kernels::moe_route(groups, f, f, nullptr, nullptr, i, f, 1, nullptr); });
  kernels::RouteParams unknown = bad;
  unknown.top_k = 2, unknown.kind = 4;
  expect_throw(host, "an unknown routing kind",
               [&] { kernels::moe_route(unknown, f, f, nullptr, nullptr, i, f, 1, nullptr); });
  auto* b = reinterpret_cast<__nv_bfloat16*>(std::uintptr_t(0x3000));
  expect_throw(host, "gather weights without their slots",
               [&] { kernels::moe_gather(b, b, i, i, 4, 8, nullptr, nullptr, f, 2); });
  return host;
}

}  // namespace

namespace layertap::gpu_test::ops {

int run(const MoeRoute& c, std::uint64_t seed, cudaStream_t stream) {
  return route_case(c.name, c.p, c.bias, c.offset, seed, stream, c.T, c.logits);
}
int run(const MoePermute& c, std::uint64_t seed, cudaStream_t stream) {
  return permute_case(c.T, c.E, c.k, c.first, c.n, c.H, c.shared, seed, stream, c.repeats, c.weight_input);
}
int moe_host_checks() { return argument_checks(); }

}  // namespace layertap::gpu_test::ops
