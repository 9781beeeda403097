// kernels/moe.cu: the router kernel against route_token on the host (the function test_cuda_moe_host
// holds bit for bit to cpu::route), the permutation, gather and weighted un-permutation against
// host references. Exit 77 without a GPU.
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

namespace {

using namespace layertap::gpu_test;
namespace kernels = layertap::kernels;

// Logits: on a grid of 1/8 in [-3, 3] (ties among them); Ties: 3 values only, so most choices
// and group scores tie and the lower index must win; Special: the grid with NaN, +inf and -inf
// sprinkled in (ranked last / first / last, NaN probabilities and weights where the host has them).
enum class Logits { Grid, Ties, Special };

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

}  // namespace

int main() {
  int host = 0;
  {
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
  }
  return run_kernel_test(host, [](cudaStream_t stream) {
    int failures = 0;
    kernels::RouteParams ds;
    ds.kind = kernels::RouteParams::SigmoidGroupedTopk;
    ds.num_experts = 16, ds.top_k = 4, ds.n_group = 4, ds.topk_group = 2, ds.norm_topk_prob = 1;
    ds.routed_scaling_factor = 2.5f;
    failures += route_case("deepseek 16 experts, 4 groups, bias", ds, true, false, 1, stream);
    kernels::RouteParams v3 = ds;
    v3.num_experts = 256, v3.top_k = 8, v3.n_group = 8, v3.topk_group = 4;
    failures += route_case("deepseek-v3 256 experts, 8 groups, bias", v3, true, false, 2, stream);
    kernels::RouteParams kimi = ds;
    kimi.num_experts = 384, kimi.top_k = 8, kimi.n_group = 1, kimi.topk_group = 1, kimi.routed_scaling_factor = 2.827f;
    failures += route_case("kimi 384 experts, bias", kimi, true, false, 3, stream);
    failures += route_case("kimi 384 experts, bias, logit offsets", kimi, true, true, 4, stream);
    kernels::RouteParams qwen;
    qwen.kind = kernels::RouteParams::SoftmaxTopk;
    qwen.num_experts = 128, qwen.top_k = 8, qwen.norm_topk_prob = 1;
    failures += route_case("qwen3 128 experts softmax", qwen, false, false, 5, stream);
    qwen.norm_topk_prob = 0;
    failures += route_case("qwen3 128 experts softmax, no renormalisation", qwen, false, true, 6, stream);

    failures += permute_case(300, 64, 8, 16, 16, 200, true, 11, stream);     // one rank of 4 (whole experts)
    failures += permute_case(300, 64, 8, 0, 64, 200, false, 12, stream);     // intermediate split: every expert
    failures += permute_case(1000, 384, 8, 336, 48, 72, true, 13, stream);   // Kimi's last rank of 8
    failures += permute_case(5, 16, 4, 12, 4, 64, true, 14, stream);         // experts with no tokens
    failures += permute_case(257, 8, 2, 0, 8, 7, true, 15, stream);          // H off the 16-byte copies

    // The warp router's edges: T of 1 and T not a multiple of the block's 8 tokens; the group
    // step with one expert per group, 64 groups (two per lane), every group kept, and E not a
    // multiple of 32; ties everywhere; NaN and infinities; top_k past 32 (picks kept in memory);
    // the largest E of the warp router (1024, 32 per lane) and the one-thread fallback past it.
    failures += route_case("deepseek-v3 256 experts, 8 groups, bias", v3, true, false, 21, stream, 1);
    failures += route_case("deepseek-v3 256 experts, 8 groups, bias", v3, true, true, 22, stream, 7);
    failures += route_case("deepseek-v3 256 experts, 8 groups, ties", v3, true, false, 23, stream, 64, Logits::Ties);
    failures += route_case("deepseek-v3 256 experts, 8 groups, NaN/inf", v3, true, false, 24, stream, 64,
                           Logits::Special);
    kernels::RouteParams single = ds;
    single.num_experts = 16, single.top_k = 4, single.n_group = 16, single.topk_group = 6;
    failures += route_case("16 groups of one expert", single, true, false, 25, stream, 40, Logits::Ties);
    kernels::RouteParams many = v3;
    many.n_group = 64, many.topk_group = 5, many.top_k = 12;
    failures += route_case("256 experts, 64 groups of 4, top 12 over 5 groups", many, true, false, 26, stream, 40);
    kernels::RouteParams all_kept = v3;
    all_kept.topk_group = 8, all_kept.norm_topk_prob = 0;
    failures += route_case("256 experts, every group kept, no renormalisation", all_kept, false, false, 27, stream, 40);
    kernels::RouteParams odd = ds;
    odd.num_experts = 72, odd.top_k = 6, odd.n_group = 3, odd.topk_group = 2;
    failures += route_case("72 experts, 3 groups of 24", odd, true, false, 28, stream, 33, Logits::Ties);
    failures += route_case("kimi 384 experts, ties", kimi, true, false, 29, stream, 40, Logits::Ties);
    failures += route_case("kimi 384 experts, NaN/inf", kimi, false, false, 30, stream, 40, Logits::Special);
    qwen.norm_topk_prob = 1;
    failures += route_case("qwen3 128 experts softmax, ties", qwen, false, false, 31, stream, 40, Logits::Ties);
    failures += route_case("qwen3 128 experts softmax, NaN/inf", qwen, false, false, 32, stream, 40, Logits::Special);
    kernels::RouteParams wide = qwen;
    wide.num_experts = 96, wide.top_k = 40;
    failures += route_case("softmax 96 experts, top 40", wide, false, false, 33, stream, 20);
    kernels::RouteParams wide_sig = ds;
    wide_sig.num_experts = 64, wide_sig.top_k = 36, wide_sig.n_group = 2, wide_sig.topk_group = 2;
    failures += route_case("sigmoid 64 experts, 2 groups, top 36", wide_sig, true, false, 34, stream, 20, Logits::Ties);
    kernels::RouteParams max_warp = kimi;
    max_warp.num_experts = 1024, max_warp.top_k = 8;
    failures += route_case("1024 experts (32 a lane)", max_warp, true, false, 35, stream, 16);
    kernels::RouteParams oss;  // GPT-OSS: the top-k logits (router bias as the logit offset), softmaxed
    oss.kind = kernels::RouteParams::TopkSoftmax;
    oss.num_experts = 128, oss.top_k = 4;
    failures += route_case("gpt-oss 128 experts, top-4 logits softmaxed, router bias", oss, false, true, 37, stream);
    failures += route_case("gpt-oss 128 experts, ties", oss, false, false, 38, stream, 40, Logits::Ties);
    failures += route_case("gpt-oss 128 experts, NaN/inf", oss, false, false, 39, stream, 40, Logits::Special);
    kernels::RouteParams oss_wide = oss;
    oss_wide.num_experts = 96, oss_wide.top_k = 40;
    failures += route_case("top-k softmax 96 experts, top 40", oss_wide, false, false, 40, stream, 20);
    kernels::RouteParams llama4;  // Llama-4: the top-k logits, each weight its sigmoid
    llama4.kind = kernels::RouteParams::TopkSigmoid;
    llama4.num_experts = 16, llama4.top_k = 1;
    failures += route_case("llama-4 16 experts, top-1 logit sigmoided", llama4, false, false, 51, stream);
    failures += route_case("llama-4 16 experts, top-1, logit offsets", llama4, false, true, 52, stream, 7);
    failures += route_case("llama-4 16 experts, top-1, ties", llama4, false, false, 53, stream, 40, Logits::Ties);
    failures += route_case("llama-4 16 experts, top-1, NaN/inf", llama4, false, false, 54, stream, 40, Logits::Special);
    kernels::RouteParams maverick = llama4;
    maverick.num_experts = 128;
    failures += route_case("llama-4 128 experts, top-1", maverick, false, false, 55, stream);
    kernels::RouteParams llama4_k = llama4;
    llama4_k.top_k = 4;
    failures += route_case("top-k sigmoid 16 experts, top 4, ties", llama4_k, false, false, 56, stream, 40, Logits::Ties);
    failures += route_case("top-k sigmoid 16 experts, top 4, NaN/inf", llama4_k, false, false, 57, stream, 40,
                           Logits::Special);
    kernels::RouteParams llama4_wide = llama4;
    llama4_wide.num_experts = 96, llama4_wide.top_k = 40;
    failures += route_case("top-k sigmoid 96 experts, top 40", llama4_wide, false, false, 58, stream, 20);
    failures += route_case("top-k sigmoid 96 experts, top 40, NaN/inf", llama4_wide, false, false, 59, stream, 20,
                           Logits::Special);
    kernels::RouteParams serial = qwen;
    serial.num_experts = 1040, serial.top_k = 4;
    failures += route_case("1040 experts softmax (one thread a token)", serial, false, true, 36, stream, 12);

    // Placement's edges: T of 1 (fewer pairs than local experts: one tile counting in `counts`),
    // one local expert, top_k above the local experts, many tiles (and a scan over several chunks
    // of the (expert, tile) table), more local experts than the shared counters hold (with
    // several tiles and with one), tiles limited by perm_token's length (top_k 300: no combine),
    // repeated experts within a token.
    failures += permute_case(1, 384, 8, 336, 48, 64, true, 41, stream);
    failures += permute_case(300, 64, 8, 5, 1, 24, true, 42, stream);
    failures += permute_case(300, 64, 8, 60, 4, 24, false, 43, stream);
    failures += permute_case(3001, 64, 8, 16, 16, 8, true, 44, stream);
    failures += permute_case(2000, 384, 8, 0, 384, 8, false, 45, stream);
    failures += permute_case(300, 1100, 8, 0, 1100, 8, true, 46, stream);
    failures += permute_case(2, 1100, 8, 0, 1100, 8, false, 50, stream);
    failures += permute_case(20, 512, 300, 0, 8, 8, false, 47, stream);
    failures += permute_case(500, 16, 8, 0, 16, 24, true, 48, stream, true);
    failures += permute_case(77, 40, 6, 8, 24, 16, false, 49, stream, true);

    // Input-weighted experts (Llama-4): top-1 on one rank of 4 (most tokens' expert elsewhere,
    // slot -1) and with every expert local; top 8 on one rank of 4; H off the 16-byte path;
    // repeated experts within a token (each row its own pair's weight).
    failures += permute_case(300, 16, 1, 4, 4, 200, true, 61, stream, false, true);
    failures += permute_case(300, 128, 1, 0, 128, 64, true, 62, stream, false, true);
    failures += permute_case(300, 64, 8, 16, 16, 200, true, 63, stream, false, true);
    failures += permute_case(257, 8, 2, 0, 8, 7, false, 64, stream, false, true);
    failures += permute_case(77, 40, 6, 8, 24, 16, true, 65, stream, true, true);
    return failures;
  });
}
