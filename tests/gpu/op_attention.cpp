// kernels/attention.cu, both kernels, against the CPU backend's cpu::causal_attention on the same
// (widened) bf16 q/k/v: packed batches with samples of 1..300 tokens (sizes on and off the flash
// tile of 64), GQA group sizes 1..8, sliding windows, head_dim 8..256, kept keys of a sample in
// flight (key_offset), GPT-OSS's sinks, and Llama-4's attention chunks (on and off the tile, query
// tiles spanning chunk boundaries, kept keys whose positions cross one). Rows: op_cases.cpp.
//
// Tolerance, per element, with u = 2^-8 the unit roundoff of bf16 and v_max the largest |v|:
//   reference: the only bf16 rounding is the output's, <= u |ref|. Both it and the CPU reference
//              compute the scores in float32 in different orders: an error d in a score moves the
//              output by at most 2 d v_max, and d is ~sqrt(hd) 2^-24 sum|q k| / sqrt(hd) ~ 1e-5 for
//              these inputs (q, k ~ N(0, 1.3^2), hd <= 256; worst case hd 2^-24 ... ~2.6e-4):
//              we allow 2e-4 v_max for all float32 effects. Bound u |ref| + 2e-4 v_max.
//   flash:     also rounds each probability p_j to bf16 before the product with V (relative u
//              each) while the denominator sums them unrounded, which moves the output by at
//              most u sum_j p_j |v_j| / sum_j p_j <= u v_max. Bound u |ref| + (u + 2e-4) v_max.
// The normalized error is held to u + 2e-4 (reference) and 2u + 2e-4 (flash). A mask off by one
// key moves outputs by ~v_max / n (> 3e-3 v_max for the n <= 300 keys here; chunks see fewer):
// far outside.
// Sinks only add mass without value to the denominators, so every term above keeps its bound.
// A scale other than 1/sqrt(hd) (Gemma-3's query_pre_attn_scalar^-0.5, within 15% of it in the
// rows) keeps the scores of the same order: the same bound.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <vector>

#include "backend/cpu/ops.hpp"
#include "core/error.hpp"
#include "gpu_compare.hpp"
#include "gpu_test.hpp"
#include "kernels/attention.cuh"
#include "op_table.hpp"

namespace {

using namespace layertap::gpu_test;
namespace kernels = layertap::kernels;

using Case = layertap::gpu_test::ops::Attention;

int run_case(const Case& c, std::uint64_t seed, cudaStream_t stream) {
  std::vector<std::int64_t> offsets{0};
  for (const std::int64_t n : c.lengths) offsets.push_back(offsets.back() + n);
  const std::int64_t T = offsets.back(), P = c.kept, hd = c.hd, qd = c.hq * hd, kd = c.hkv * hd, row = qd + 2 * kd;
  const float scale = c.scale != 0.0f ? c.scale : 1.0f / std::sqrt(float(hd));
  std::mt19937_64 rng(seed);
  // Scores q.k / sqrt(hd) of order 1..3: softmax neither uniform nor one-hot. Rows (P + T, (hq +
  // 2hkv) hd): the kept rows' keys and values, then the batch's fused projection; the kept rows'
  // q part is unused.
  const std::vector<bf16_bits> qkv = normal_bf16(rng, (P + T) * row, 1.3f);
  std::vector<std::int32_t> pos(static_cast<std::size_t>(T));
  for (std::size_t s = 0; s + 1 < offsets.size(); ++s)
    for (std::int64_t t = offsets[s]; t < offsets[s + 1]; ++t)
      pos[std::size_t(t)] = std::int32_t(t - offsets[s] + (s == 0 ? P : 0));
  // Sinks of the scores' order of size: some rows give them most of their mass.
  std::vector<float> sinks;
  if (c.sinks) {
    std::uniform_real_distribution<float> d(-3.0f, 3.0f);
    for (std::int64_t h = 0; h < c.hq; ++h) sinks.push_back(d(rng));
  }

  // CPU reference on contiguous q (T, hq hd), k and v (P + T, hkv hd); segment 0's keys are the
  // kept ones and its own.
  const std::vector<float> in = widen(qkv);
  std::vector<float> q(std::size_t(T * qd)), k(std::size_t((P + T) * kd)), v(std::size_t((P + T) * kd)),
      ref(std::size_t(T * qd));
  double v_max = 0;
  for (std::int64_t t = 0; t < P + T; ++t) {
    if (t >= P)
      for (std::int64_t i = 0; i < qd; ++i) q[std::size_t((t - P) * qd + i)] = in[std::size_t(t * row + i)];
    for (std::int64_t i = 0; i < kd; ++i) {
      k[std::size_t(t * kd + i)] = in[std::size_t(t * row + qd + i)];
      v[std::size_t(t * kd + i)] = in[std::size_t(t * row + qd + kd + i)];
      v_max = std::max(v_max, std::fabs(double(v[std::size_t(t * kd + i)])));
    }
  }
  std::vector<std::int64_t> kv_offsets{0};
  for (std::size_t s = 1; s < offsets.size(); ++s) kv_offsets.push_back(offsets[s] + P);
  layertap::cpu::causal_attention(q.data(), offsets, k.data(), v.data(), kv_offsets, ref.data(),
                                  {c.hq, c.hkv, hd, hd, scale, c.window,
                                   c.sinks ? sinks.data() : nullptr, c.chunk});

  Guarded<bf16_bits> d_qkv((P + T) * row), d_ctx(T * qd);
  Guarded<std::int32_t> d_pos(T);
  Guarded<float> d_sinks(c.hq);
  d_qkv.upload(qkv);
  d_pos.upload(pos);
  if (c.sinks) d_sinks.upload(sinks);
  const std::vector<std::int32_t> tiles = kernels::flash_query_tiles(offsets);
  Guarded<std::int32_t> d_tiles(std::int64_t(tiles.size()));
  d_tiles.upload(tiles);

  const std::int64_t pairs = kernels::count_attended_pairs(offsets, P, c.window, c.chunk);  // the stated work
  int fails = 0;
  for (const bool flash : {false, true}) {
    char name[180];
    std::snprintf(name, sizeof name,
                  "%-9s T=%-4lld S=%zu hq=%lld hkv=%lld hd=%-3lld window=%lld kept=%lld chunk=%lld%s",
                  flash ? "flash" : "reference", (long long)T, c.lengths.size(), (long long)c.hq, (long long)c.hkv,
                  (long long)hd, (long long)c.window, (long long)P, (long long)c.chunk, c.sinks ? " sinks" : "");
    if (c.scale != 0.0f)
      std::snprintf(name + std::strlen(name), sizeof name - std::strlen(name), " scale=%.4f", double(c.scale));
    if (flash && !kernels::flash_attention_supported(hd)) {
      std::printf("skip %s (flash: head_dim 64 or 128 on sm_80+ only)\n", name);
      continue;
    }
    poison_bf16(d_ctx);
    kernels::AttentionLayout layout =
        kernels::fused_qkv_layout(as_bf16(d_qkv.data()), c.hq, c.hkv, hd, scale);
    layout.q += P * row;  // query t's row is P + t; its own key row is t + key_offset
    layout.key_offset = P;
    layout.attended_pairs = pairs;
    layout.chunk = c.chunk;
    if (c.sinks) layout.sinks = d_sinks.data();
    if (flash) {
      kernels::attention_flash(as_bf16(d_ctx.data()), layout, d_pos.data(), d_tiles.data(),
                               std::int64_t(tiles.size()) / 2, T, c.window, stream);
    } else {
      kernels::attention_reference(as_bf16(d_ctx.data()), layout, d_pos.data(), T, c.window, stream);
    }
    LT_CUDA_CHECK(cudaStreamSynchronize(stream));
    const std::vector<float> got = widen(d_ctx.download());
    const double abs_part = (flash ? kBf16Unit : 0.0) * v_max + 2e-4 * v_max;
    std::vector<double> bound(ref.size());
    for (std::size_t i = 0; i < ref.size(); ++i) bound[i] = kBf16Unit * std::fabs(double(ref[i])) + abs_part;
    const double norm_tol = (flash ? 2.0 : 1.0) * kBf16Unit + 2e-4;
    const std::int64_t damage =
        d_ctx.guard_damage() + d_qkv.guard_damage() + d_pos.guard_damage() + d_tiles.guard_damage() +
        d_sinks.guard_damage();
    fails += report(name, compare(got, ref, &bound), norm_tol, damage, &got, &ref);
  }
  return fails;
}

// The tile table on its own (no device needed): tiles cover every token once, stay inside their
// sample, hold at most kFlashTile tokens, and never outnumber max_flash_tiles.
int tile_checks() {
  int fails = 0;
  const std::vector<std::vector<std::int64_t>> batches = {
      {0, 1}, {0, 64}, {0, 65}, {0, 1, 2, 3}, {0, 63, 63, 191, 200}, {0, 4096}, {0, 0, 5}};
  for (const auto& off : batches) {
    const std::vector<std::int32_t> t = kernels::flash_query_tiles(off);
    std::int64_t next = 0;
    bool ok = t.size() % 2 == 0 && std::int64_t(t.size()) / 2 <= kernels::max_flash_tiles(off.back());
    for (std::size_t i = 0; ok && i < t.size(); i += 2) {
      const std::int64_t b = t[i], e = t[i + 1];
      const auto s = std::upper_bound(off.begin(), off.end(), b) - off.begin() - 1;  // sample holding b
      ok = b == next && e > b && e - b <= kernels::kFlashTile && e <= off[std::size_t(s) + 1];
      next = e;
    }
    ok = ok && next == off.back();
    std::printf("%s flash_query_tiles over %zu samples, %lld tokens: %zu tiles\n", ok ? "ok  " : "FAIL", off.size() - 1,
                (long long)off.back(), t.size() / 2);
    fails += ok ? 0 : 1;
  }
  return fails;
}

// count_attended_pairs (no device needed): stated figures, then a count key by key as the kernels
// mask them (keys 0 .. u of the query's sample, u its position, that are among the last `window`
// and in u's chunk).
int pairs_checks() {
  struct Want {
    std::vector<std::int64_t> offsets;
    std::int64_t first_position, window, pairs;
    std::int64_t chunk = 0;
  };
  const std::vector<Want> wants = {
      {{0, 3, 8}, 0, 0, 6 + 15},     {{0, 3, 8}, 0, 2, 5 + 9},      {{0, 3, 8}, 4, 0, 18 + 15},
      {{0, 3, 8}, 4, 2, 6 + 9},      {{0, 3, 8}, 1, 3, 8 + 12},     {{0, 0, 5}, 7, 0, 15},
      {{0, 1}, 0, 0, 1},             {{0, 300}, 0, 17, 17 * 18 / 2 + 283 * 17},
      // chunks of 2: positions 0..2 see 1, 2, 1 keys, 0..4 see 1, 2, 1, 2, 1, and 4..6 as 0..2
      {{0, 3, 8}, 0, 0, 4 + 7, 2},   {{0, 3, 8}, 4, 0, 4 + 7, 2},
      // chunk 5: no mask on positions 0..4; 4..6 see 5, 1, 2
      {{0, 3, 8}, 0, 0, 6 + 15, 5},  {{0, 3, 8}, 4, 0, 5 + 1 + 2 + 15, 5},
      // chunk 1 (each its own key), and window 3 in 60 chunks of 5 (1, 2, 3, 3, 3 each)
      {{0, 3, 8}, 0, 2, 3 + 5, 1},   {{0, 300}, 0, 3, 60 * (1 + 2 + 3 + 3 + 3), 5},
      // kept positions 150..219 cross the chunk boundary at 200: 51..100, then 1..20 keys
      {{0, 70, 71}, 150, 0, (51 + 100) * 50 / 2 + 20 * 21 / 2 + 1, 100}};
  int fails = 0;
  for (const Want& w : wants) {
    const std::int64_t got = kernels::count_attended_pairs(w.offsets, w.first_position, w.window, w.chunk);
    std::int64_t brute = 0;
    for (std::size_t s = 0; s + 1 < w.offsets.size(); ++s)
      for (std::int64_t t = w.offsets[s]; t < w.offsets[s + 1]; ++t) {
        const std::int64_t u = t - w.offsets[s] + (s == 0 ? w.first_position : 0);  // own key, sample-relative
        for (std::int64_t j = 0; j <= u; ++j)
          brute += (w.window == 0 || j > u - w.window) && (w.chunk == 0 || j / w.chunk == u / w.chunk) ? 1 : 0;
      }
    const bool ok = got == w.pairs && brute == w.pairs;
    std::printf("%s count_attended_pairs over %zu samples, first position %lld, window %lld, chunk %lld: %lld "
                "(want %lld, key by key %lld)\n",
                ok ? "ok  " : "FAIL", w.offsets.size() - 1, (long long)w.first_position, (long long)w.window,
                (long long)w.chunk, (long long)got, (long long)w.pairs, (long long)brute);
    fails += ok ? 0 : 1;
  }
  return fails;
}

}  // namespace

namespace layertap::gpu_test::ops {

int run(const Attention& c, std::uint64_t seed, cudaStream_t stream) { return run_case(c, seed, stream); }
int attention_host_checks() { return tile_checks() + pairs_checks(); }

}  // namespace layertap::gpu_test::ops
