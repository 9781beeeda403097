// kernels/grouped_gemm.cu against a host reference, a table of cases in the spirit of ggml's
// test-backend-ops: INT4 groups (bf16, f16, f32 scales; groups of 32, 64, 128), MXFP4 (INT4 groups
// of 32 with E8M0 scales; K 1440, GPT-OSS's 2880 at TP 2), FP8 blocks (128 x 128, small blocks,
// phases; blocks and column phases of any multiple of 8 columns, which take the kernel's
// scale-per-8-k path, among them the DeepSeek-V3 test fixture's 16 x 8 blocks at its shapes) and
// bf16 weights; empty experts, one-row experts, one expert taking every row, row counts on and off
// the 64-row tile, K on and off the INT4 group and FP8 block (and off 16-byte rows: the kernel's
// 4-byte copies), N on and off the 128-column tile (odd N too), gate/up weights in 2 parts,
// offsets[0] > 0 and rows past offsets[n]. K off 8 (x and weights in 4-byte copies): bf16 K 12 and
// 6 (the test fixtures' MoE down projections sliced for tensor parallelism, moe_intermediate_size
// 24 at TP 2 and 4) and FP8 K 12; x 4 bytes past 16-byte alignment with K % 8 == 0 (x in 4-byte
// copies, weights in 16-byte ones). Exit 77 without a GPU.
//
// Reference: each expert's weight decoded on the host by kernels/quant_element.hpp (the decoders
// kernels/dequant.cu runs, themselves held bit for bit to the CPU backend's by test_dequant and
// test_cuda_moe_host), y = sum_k x w in double.
//
// Tolerance, from first principles: the kernel's weight values are those bf16 values exactly, a
// product of two bf16 values is exact in float32 (8 + 8 significant bits), and the products are
// summed in float32 in some order, then rounded to bf16 once. K float32 additions, each erring by
// at most 2^-24 (round to nearest; 2^-23 allowed, as tensor cores may truncate) of a partial sum
// no larger than S = sum_k |x w|, leave s within E = K 2^-23 S of the exact sum; rounding s to
// bf16 moves it by at most half a bf16 ulp (2^-8 relative to its binade). So
//   |y - ref| <= half_ulp_bf16(|ref| + E) + E   for every element of the expert rows,
// y finite, and every row outside [offsets[0], offsets[n]) untouched (it stays the NaN poison).
// The one-hot cases (x rows unit vectors) make y[r, n] = W[n, k_r] exactly: there each output
// must equal the decoded weight bit for bit (every FP8 code but the NaNs, all 16 nibbles, scales
// over 36 binades, E8M0 scales over 251, f16 rounding to subnormals), which checks the kernel's
// register decoders against quant_element.hpp. Their decoded values stay normal bf16 numbers (what
// tensor cores do with subnormal operands is not this test's subject).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "gpu_compare.hpp"
#include "gpu_test.hpp"
#include "kernels/grouped_gemm.cuh"
#include "kernels/quant_element.hpp"

namespace {

using namespace layertap::gpu_test;
namespace kernels = layertap::kernels;
using kernels::GroupedFormat;
using kernels::ScaleType;

struct Case {
  std::string name;
  GroupedFormat format = GroupedFormat::Int4Group;
  ScaleType scale = ScaleType::BF16;
  std::vector<std::int64_t> counts;  // rows of each expert
  std::int64_t N = 0, K = 0, P = 1;  // W_e (N, K) in P parts
  std::int64_t first = 0;            // offsets[0]
  std::int64_t slack = 0;            // max_rows - offsets[n]
  std::int64_t group = 32;                                     // INT4
  std::int64_t br = 128, bc = 128, rp = 0, cp = 0;             // FP8
  std::int64_t x_shift = 0;  // x starts this many bf16 past a 16-byte boundary (2: 4-byte aligned)
  bool one_hot = false;
  bool bias = false;  // every part with a bias (GPT-OSS's experts): y = bf16(bf16(sum) + b)
};

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Half a bf16 ulp at magnitude v >= 0 (8 significant bits: ulp 2^(q - 7) in [2^q, 2^(q+1))).
double half_ulp_bf16(double v) {
  if (v < 0x1p-126) return 0x1p-134;
  int e = 0;
  (void)std::frexp(v, &e);  // v = m 2^e, m in [0.5, 1): q = e - 1
  return std::ldexp(1.0, e - 1 - 8);
}

// One stored part (data and scales as the device holds them) and its decoded (rows, K) values.
struct Part {
  std::vector<std::uint8_t> data, scales;
};

std::uint8_t finite_fp8(std::uint64_t i) {  // the 254 non-NaN codes, 0x7f and 0xff skipped
  const auto u = std::uint32_t(i % 254u);
  return std::uint8_t(u < 127u ? u : u + 1u);
}

// A scale of type t holding (about) v, as bytes.
void put_scale(std::vector<std::uint8_t>& out, ScaleType t, float v) {
  if (t == ScaleType::F32) {
    std::uint8_t b[4];
    std::memcpy(b, &v, 4);
    out.insert(out.end(), b, b + 4);
  } else {
    const std::uint16_t h = t == ScaleType::BF16 ? layertap::float_to_bf16(v) : layertap::float_to_fp16(v);
    out.push_back(std::uint8_t(h & 0xffu));
    out.push_back(std::uint8_t(h >> 8));
  }
}

// Makes part p of an expert (rows [row0, row0 + rows) of W_e) and decodes it into W (N, K).
Part make_part(const Case& cs, std::int64_t rows, std::int64_t row0, std::mt19937_64& rng, std::vector<float>& W) {
  const std::int64_t K = cs.K;
  Part part;
  std::uniform_real_distribution<float> mant(0.5f, 1.0f);
  const auto sign = [&] { return rng() % 2 ? 1.0f : -1.0f; };
  switch (cs.format) {
    case GroupedFormat::Int4Group: {
      const std::int64_t words = K / 8, groups = ceil_div(K, cs.group);
      part.data.resize(std::size_t(rows * words * 4));
      for (auto& b : part.data) b = std::uint8_t(rng());
      // Scales over many binades; one-hot: from 2^-26 (f16: subnormal products) to 2^10 (f16 to
      // 2^12, so that q s stays finite in f16); otherwise near the 1/sqrt(K) of real weights.
      // E8M0 (MXFP4) codes 127 + e; one-hot: e from -125 to 125, every binade whose products
      // (0.5 to 6 times 2^e) are normal bf16 numbers.
      if (cs.scale == ScaleType::E8M0) {
        std::uniform_int_distribution<int> e(cs.one_hot ? -125 : -8, cs.one_hot ? 125 : -2);
        for (std::int64_t i = 0; i < rows * groups; ++i) part.scales.push_back(std::uint8_t(127 + e(rng)));
      } else {
        std::uniform_int_distribution<int> expo(cs.one_hot ? -26 : -8, cs.one_hot ? (cs.scale == ScaleType::F16 ? 11 : 10) : -2);
        for (std::int64_t i = 0; i < rows * groups; ++i) put_scale(part.scales, cs.scale, sign() * std::ldexp(mant(rng), expo(rng)));
      }
      for (std::int64_t r = 0; r < rows; ++r) {
        for (std::int64_t k = 0; k < K; ++k) {
          std::uint32_t word;
          std::memcpy(&word, &part.data[std::size_t((r * words + k / 8) * 4)], 4);
          const std::uint32_t nibble = (word >> (4 * (k % 8))) & 0xfu;
          const float s = kernels::scale_value(part.scales.data(), r * groups + k / cs.group, cs.scale);
          W[std::size_t((row0 + r) * K + k)] = kernels::bf16_value(kernels::int4_group_element(nibble, s, cs.scale));
        }
      }
      break;
    }
    case GroupedFormat::Fp8Block: {
      part.data.resize(std::size_t(rows * K));
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t k = 0; k < K; ++k)
          part.data[std::size_t(r * K + k)] = cs.one_hot ? finite_fp8(std::uint64_t((row0 + r) * K + k)) : finite_fp8(rng());
      const std::int64_t srows = ceil_div(cs.rp + rows, cs.br), scols = ceil_div(cs.cp + K, cs.bc);
      std::uniform_real_distribution<float> lg(-20.0f, 2.0f);
      std::vector<float> sinv(std::size_t(srows * scols));
      for (std::size_t i = 0; i < sinv.size(); ++i) {
        sinv[i] = std::exp2(lg(rng));
        if (cs.one_hot && i % 7 == 3) sinv[i] = 0x1p100f;  // codes up to 448 * 2^100: still finite
      }
      part.scales.resize(sinv.size() * 4);
      std::memcpy(part.scales.data(), sinv.data(), part.scales.size());
      for (std::int64_t r = 0; r < rows; ++r)
        for (std::int64_t k = 0; k < K; ++k)
          W[std::size_t((row0 + r) * K + k)] = kernels::bf16_value(kernels::fp8_block_element(
              part.data[std::size_t(r * K + k)], sinv[std::size_t(((r + cs.rp) / cs.br) * scols + (k + cs.cp) / cs.bc)]));
      break;
    }
    case GroupedFormat::Bf16: {
      part.data.resize(std::size_t(rows * K * 2));
      std::normal_distribution<float> d(0.0f, 1.0f / std::sqrt(float(K)));
      for (std::int64_t i = 0; i < rows * K; ++i) {
        std::uint16_t b = layertap::float_to_bf16(d(rng));
        if (cs.one_hot) {  // any normal bf16: exponent 1..254
          b = std::uint16_t(rng());
          b = std::uint16_t((b & 0x807fu) | std::uint16_t((1 + rng() % 254) << 7));
        }
        std::memcpy(&part.data[std::size_t(i * 2)], &b, 2);
        W[std::size_t(row0 * K + i)] = layertap::bf16_to_float(b);
      }
      break;
    }
  }
  return part;
}

int run_case(const Case& cs, std::uint64_t seed, cudaStream_t stream) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto n = std::int64_t(cs.counts.size());
  const std::int64_t N = cs.N, K = cs.K, P = cs.P, part_rows = N / P;
  std::vector<std::int32_t> off(std::size_t(n + 1));
  off[0] = std::int32_t(cs.first);
  for (std::int64_t e = 0; e < n; ++e) off[std::size_t(e + 1)] = off[std::size_t(e)] + std::int32_t(cs.counts[std::size_t(e)]);
  const std::int64_t max_rows = off[std::size_t(n)] + cs.slack;
  std::mt19937_64 rng(seed);

  // Weights: every part its own device allocation (as DeviceWeights' arena takes), the table of
  // parts on the device.
  std::vector<std::vector<float>> W(std::size_t(n), std::vector<float>(std::size_t(N * K)));
  std::vector<std::vector<bf16_bits>> B(static_cast<std::size_t>(n));  // (N) each, with cs.bias
  std::vector<std::unique_ptr<Guarded<std::uint8_t>>> buffers;
  std::vector<std::unique_ptr<Guarded<bf16_bits>>> bias_buffers;
  std::uniform_real_distribution<float> bias_value(-0.5f, 0.5f);
  std::vector<kernels::GroupedWeightPart> table;
  for (std::int64_t e = 0; e < n; ++e) {
    for (std::int64_t p = 0; p < P; ++p) {
      const Part part = make_part(cs, part_rows, p * part_rows, rng, W[std::size_t(e)]);
      kernels::GroupedWeightPart d;
      buffers.push_back(std::make_unique<Guarded<std::uint8_t>>(std::int64_t(part.data.size())));
      buffers.back()->upload(part.data);
      d.data = buffers.back()->data();
      if (!part.scales.empty()) {
        buffers.push_back(std::make_unique<Guarded<std::uint8_t>>(std::int64_t(part.scales.size())));
        buffers.back()->upload(part.scales);
        d.scales = buffers.back()->data();
      }
      if (cs.bias) {
        std::vector<bf16_bits> b(static_cast<std::size_t>(part_rows));
        for (bf16_bits& v : b) v = layertap::float_to_bf16(bias_value(rng));
        B[std::size_t(e)].insert(B[std::size_t(e)].end(), b.begin(), b.end());
        bias_buffers.push_back(std::make_unique<Guarded<bf16_bits>>(part_rows));
        bias_buffers.back()->upload(b);
        d.bias = as_bf16(bias_buffers.back()->data());
      }
      table.push_back(d);
    }
  }
  Guarded<kernels::GroupedWeightPart> d_table(std::max<std::int64_t>(1, n * P));
  if (n > 0) d_table.upload(table);

  // x: random, or unit rows (row r: 1 at column r % K); y poisoned with NaN. x rows outside
  // [offsets[0], offsets[n]) and kXTail values past the last row are NaN: the kernel must not read
  // them (a copy past a row's K, whose products with the weights' zero padding would otherwise
  // vanish, reads the next row's first values: NaN past the last routed row).
  std::vector<bf16_bits> x(std::size_t(max_rows * K));
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::int64_t r = 0; r < max_rows; ++r)
    for (std::int64_t k = 0; k < K; ++k)
      x[std::size_t(r * K + k)] = cs.one_hot ? layertap::float_to_bf16(k == r % K ? 1.0f : 0.0f)
                                             : layertap::float_to_bf16(u(rng));
  constexpr std::int64_t kXTail = 8;
  for (std::int64_t r = 0; r < max_rows; ++r)
    if (r < off[0] || r >= off[std::size_t(n)])
      std::fill_n(x.begin() + std::ptrdiff_t(r * K), K, bf16_bits(0x7fc1));
  Guarded<bf16_bits> d_x(cs.x_shift + max_rows * K + kXTail), d_y(max_rows * N);
  Guarded<std::int32_t> d_off(n + 1);
  {
    std::vector<bf16_bits> stored(std::size_t(cs.x_shift), bf16_bits(0));
    stored.insert(stored.end(), x.begin(), x.end());
    stored.insert(stored.end(), std::size_t(kXTail), bf16_bits(0x7fc1));
    d_x.upload(stored);
  }
  d_off.upload(off);
  poison_bf16(d_y);

  kernels::GroupedWeights w;
  w.format = cs.format;
  w.parts = d_table.data();
  w.parts_per_expert = P;
  w.part_rows = part_rows;
  w.block_rows = cs.br;
  w.block_cols = cs.bc;
  w.row_phase = cs.rp;
  w.col_phase = cs.cp;
  w.group = cs.group;
  w.scale_type = cs.scale;
  kernels::grouped_gemm(as_bf16(d_y.data()), as_bf16(d_x.data() + cs.x_shift), d_off.data(), n, max_rows, N, K, w,
                        stream);
  LT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<bf16_bits> y = d_y.download();

  std::int64_t outside_written = 0, nonfinite = 0, over = 0, checked = 0;
  double worst = 0.0;  // largest |y - ref| / bound
  std::int64_t first_bad = -1;
  double first_got = 0, first_ref = 0;
  for (std::int64_t r = 0; r < max_rows; ++r) {
    if (r < off[0] || r >= off[std::size_t(n)]) {
      for (std::int64_t c = 0; c < N; ++c) outside_written += y[std::size_t(r * N + c)] != 0x7fc1u;
      continue;
    }
    const std::int64_t e = std::upper_bound(off.begin(), off.end(), std::int32_t(r)) - off.begin() - 1;
    const std::vector<float>& We = W[std::size_t(e)];
    for (std::int64_t c = 0; c < N; ++c) {
      const float got = layertap::bf16_to_float(y[std::size_t(r * N + c)]);
      double ref = 0, mag = 0;
      for (std::int64_t k = 0; k < K; ++k) {
        const double p = double(layertap::bf16_to_float(x[std::size_t(r * K + k)])) * double(We[std::size_t(c * K + k)]);
        ref += p;
        mag += std::fabs(p);
      }
      ++checked;
      bool bad;
      if (!std::isfinite(got)) {
        ++nonfinite;
        bad = true;
      } else if (cs.one_hot) {
        bad = got != We[std::size_t(c * K + r % K)];
        over += bad;
      } else {
        const double E = double(K) * 0x1p-23 * mag;
        double bound = half_ulp_bf16(std::fabs(ref) + E) + E;
        if (cs.bias) {  // the rounded product plus the bias, rounded once more
          ref += double(layertap::bf16_to_float(B[std::size_t(e)][std::size_t(c)]));
          bound += half_ulp_bf16(std::fabs(ref) + bound);
        }
        const double err = std::fabs(double(got) - ref);
        worst = std::max(worst, err / bound);
        bad = err > bound;
        over += bad;
      }
      if (bad && first_bad < 0) {
        first_bad = r * N + c;
        first_got = got;
        first_ref = cs.one_hot ? We[std::size_t(c * K + r % K)] : ref;
      }
    }
  }
  const std::int64_t damage = d_y.guard_damage() + d_x.guard_damage() + d_off.guard_damage();
  const bool ok = outside_written == 0 && nonfinite == 0 && over == 0 && damage == 0;
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  std::printf("%s %-52s n=%lld rows=%lld/%lld N=%lld K=%lld: %lld checked, %s %lld, non-finite %lld, "
              "outside written %lld, guard damage %lld (%.2f s)\n",
              ok ? "ok  " : "FAIL", cs.name.c_str(), (long long)n, (long long)(off[std::size_t(n)] - off[0]),
              (long long)max_rows, (long long)N, (long long)K, (long long)checked,
              cs.one_hot ? "not bit-exact" : "over bound", (long long)over, (long long)nonfinite,
              (long long)outside_written, (long long)damage, secs);
  if (!cs.one_hot && checked > 0) std::printf("     worst |y - ref| / bound %.3f\n", worst);
  if (first_bad >= 0)
    std::printf("     first bad: row %lld col %lld got %.9g want %.9g\n", (long long)(first_bad / N),
                (long long)(first_bad % N), first_got, first_ref);
  return ok ? 0 : 1;
}

Case make_case(std::string name, GroupedFormat f, ScaleType st, std::vector<std::int64_t> counts, std::int64_t N,
               std::int64_t K, std::int64_t P, std::int64_t first, std::int64_t slack) {
  Case c;
  c.name = std::move(name);
  c.format = f;
  c.scale = st;
  c.counts = std::move(counts);
  c.N = N;
  c.K = K;
  c.P = P;
  c.first = first;
  c.slack = slack;
  return c;
}

std::vector<Case> cases() {
  using F = GroupedFormat;
  using S = ScaleType;
  std::vector<Case> t;
  // name, format, scale type, rows per expert, N, K, parts, offsets[0], rows past offsets[n]
  t.push_back(make_case("int4 bf16: gate/up in 2 parts, K 256", F::Int4Group, S::BF16, {37, 0, 1, 64, 90}, 192, 256, 2, 0, 8));
  t.push_back(make_case("int4 bf16: K 200 off groups (4-byte copies), N 136", F::Int4Group, S::BF16, {70, 0, 65}, 136, 200, 1, 3, 5));
  t.push_back(make_case("int4 bf16: one expert takes every row", F::Int4Group, S::BF16, {0, 0, 150, 0}, 72, 96, 1, 0, 0));
  t.push_back(make_case("int4 f16 scales", F::Int4Group, S::F16, {20, 33, 1}, 64, 128, 2, 0, 4));
  t.push_back(make_case("int4 f32 scales, odd N 129, K 160", F::Int4Group, S::F32, {66, 2}, 129, 160, 1, 0, 3));
  t.push_back(make_case("int4 groups of 64, K 320", F::Int4Group, S::BF16, {40, 41}, 64, 320, 1, 0, 0));
  t.back().group = 64;
  t.push_back(make_case("int4 groups of 128, K 192 (half a last group)", F::Int4Group, S::BF16, {12}, 40, 192, 1, 0, 0));
  t.back().group = 128;
  {
    std::mt19937_64 rng(17);
    std::vector<std::int64_t> counts(40);
    for (auto& c : counts) c = std::int64_t(rng() % 8);
    t.push_back(make_case("int4: 40 experts of 0..7 rows", F::Int4Group, S::BF16, counts, 16, 64, 1, 0, 2));
  }
  t.push_back(make_case("int4: every expert empty", F::Int4Group, S::BF16, {0, 0, 0}, 32, 64, 1, 7, 9));
  // MXFP4 (INT4 groups of 32, E8M0 scales): gate/up in 2 parts with ragged experts; K 160, half a
  // last K step (GPT-OSS's 2880 at TP 2: 1440 = 22.5 steps); many small experts.
  t.push_back(make_case("mxfp4: gate/up in 2 parts, ragged experts, K 256", F::Int4Group, S::E8M0, {37, 0, 1, 64, 90}, 192, 256, 2, 0, 8));
  t.push_back(make_case("mxfp4: K 160 (half a K step), N 136", F::Int4Group, S::E8M0, {70, 0, 65, 3}, 136, 160, 1, 3, 5));
  {
    std::mt19937_64 rng(29);
    std::vector<std::int64_t> counts(32);
    for (auto& c : counts) c = std::int64_t(rng() % 9);
    t.push_back(make_case("mxfp4: 32 experts of 0..8 rows, K 1440", F::Int4Group, S::E8M0, counts, 64, 1440, 2, 0, 1));
  }
  // Expert biases (GPT-OSS): interleaved gate/up in one part, down; a ragged, odd N in 2 parts.
  t.push_back(make_case("mxfp4 + bias: gate/up in 1 part, N 256, K 192", F::Int4Group, S::E8M0, {9, 0, 70, 1}, 256, 192, 1, 0, 3));
  t.back().bias = true;
  t.push_back(make_case("bf16 + bias: odd N 129 in 1 part, K 96", F::Bf16, S::BF16, {40, 2}, 129, 96, 1, 1, 2));
  t.back().bias = true;
  t.push_back(make_case("int4 + bias: 2 parts of 48, K 128", F::Int4Group, S::BF16, {33, 64}, 96, 128, 2, 0, 0));
  t.back().bias = true;
  t.push_back(make_case("fp8 128x128: gate/up in 2 parts of 96 rows, K 256", F::Fp8Block, S::F32, {1, 63, 0, 100}, 192, 256, 2, 0, 6));
  t.push_back(make_case("fp8 K 200 partial block (4-byte copies), N 136", F::Fp8Block, S::F32, {65, 64, 2}, 136, 200, 1, 0, 1));
  t.push_back(make_case("fp8 row phase 32, K 320", F::Fp8Block, S::F32, {120, 30}, 72, 320, 1, 0, 0));
  t.back().rp = 32;
  t.push_back(make_case("fp8 blocks 16x128, phases (5, 64), 2 parts of 50", F::Fp8Block, S::F32, {50, 0, 14}, 100, 192, 2, 2, 2));
  t.back().br = 16;
  t.back().rp = 5;
  t.back().cp = 64;
  t.push_back(make_case("fp8: one expert, one row", F::Fp8Block, S::F32, {1}, 128, 128, 1, 0, 0));
  // FP8 blocks that do not span whole 64-k steps (a scale per 8 k). First the DeepSeek-V3 fixture
  // (tests/fixtures/models/deepseek_v3_fp8: weight_block_size [16, 8], hidden 72,
  // moe_intermediate_size 32, 8 routed experts): gate/up (64, 72) in 2 parts, down (72, 32), and a
  // tensor-parallel half of gate/up's rows and of down's K.
  const std::vector<std::int64_t> fixture_rows = {9, 0, 23, 1, 66, 3, 0, 40};
  t.push_back(make_case("fp8 16x8 fixture gate/up: 2 parts of 32, K 72 (4-byte)", F::Fp8Block, S::F32, fixture_rows, 64, 72, 2, 0, 3));
  t.back().br = 16;
  t.back().bc = 8;
  t.push_back(make_case("fp8 16x8 fixture down: N 72, K 32", F::Fp8Block, S::F32, fixture_rows, 72, 32, 1, 5, 0));
  t.back().br = 16;
  t.back().bc = 8;
  t.push_back(make_case("fp8 16x8 fixture, TP 2: gate/up 2 parts of 16, K 72", F::Fp8Block, S::F32, {4, 17, 0, 70}, 32, 72, 2, 0, 0));
  t.back().br = 16;
  t.back().bc = 8;
  t.push_back(make_case("fp8 16x8 fixture, TP 2: down N 72, K 16", F::Fp8Block, S::F32, {4, 17, 0, 70}, 72, 16, 1, 0, 1));
  t.back().br = 16;
  t.back().bc = 8;
  t.push_back(make_case("fp8 blocks 128x32, phases (100, 8), K 256", F::Fp8Block, S::F32, {70, 5}, 96, 256, 1, 0, 2));
  t.back().rp = 100;
  t.back().cp = 8;
  t.push_back(make_case("fp8 blocks 16x8, K 200 (4-byte copies), N 136", F::Fp8Block, S::F32, {65, 2, 0, 33}, 136, 200, 1, 1, 0));
  t.back().br = 16;
  t.back().bc = 8;
  t.push_back(make_case("fp8 blocks 128x128 at col phase 8 (steps cross), K 320", F::Fp8Block, S::F32, {100}, 130, 320, 1, 0, 0));
  t.back().cp = 8;
  t.push_back(make_case("fp8 blocks 40x24, phases (7, 16), K 136 (4-byte), 2 parts", F::Fp8Block, S::F32, {30, 70}, 100, 136, 2, 0, 0));
  t.back().br = 40;
  t.back().bc = 24;
  t.back().rp = 7;
  t.back().cp = 16;
  t.push_back(make_case("fp8 blocks 16x192, col phase 136, K 192", F::Fp8Block, S::F32, {33, 64}, 48, 192, 1, 0, 0));
  t.back().br = 16;
  t.back().bc = 192;
  t.back().cp = 136;
  t.push_back(make_case("bf16: gate/up in 2 parts, K 256", F::Bf16, S::BF16, {50, 50, 0, 77}, 192, 256, 2, 0, 3));
  t.push_back(make_case("bf16: K 72, N 8, one-row experts", F::Bf16, S::BF16, {1, 1, 1}, 8, 72, 1, 10, 20));
  // K % 8 != 0 (x rows 4-byte aligned only; x and weights in 4-byte copies): the test fixtures' MoE
  // down projection (N = hidden 72) at moe_intermediate_size 24 sliced for TP 2 (K 12) and 4 (K 6).
  t.push_back(make_case("bf16 K 12 (TP 2 down, 4-byte x), fixture rows", F::Bf16, S::BF16, fixture_rows, 72, 12, 1, 5, 3));
  t.push_back(make_case("bf16 K 6 (TP 4 down, 4-byte x), N 72", F::Bf16, S::BF16, {4, 17, 0, 70, 1}, 72, 6, 1, 3, 2));
  t.push_back(make_case("bf16 K 12, 2 parts of 12", F::Bf16, S::BF16, {0, 1, 66, 9}, 24, 12, 2, 0, 1));
  t.push_back(make_case("bf16 K 6, 2 parts of 68 (N 136)", F::Bf16, S::BF16, {0, 1, 65, 7, 0, 2}, 136, 6, 2, 1, 0));
  t.push_back(make_case("bf16 K 134 (3 steps, 4-byte x), odd N 41", F::Bf16, S::BF16, {30, 1, 0}, 41, 134, 1, 0, 2));
  t.push_back(make_case("fp8 16x8 K 12 (4-byte x and codes), N 72", F::Fp8Block, S::F32, fixture_rows, 72, 12, 1, 0, 2));
  t.back().br = 16;
  t.back().bc = 8;
  t.push_back(make_case("fp8 16x16 K 12, phases (3, 8), 2 parts of 36", F::Fp8Block, S::F32, {1, 0, 40}, 72, 12, 2, 2, 0));
  t.back().br = 16;
  t.back().bc = 16;
  t.back().rp = 3;
  t.back().cp = 8;
  t.push_back(make_case("fp8 128x128 K 20 (4-byte x and codes)", F::Fp8Block, S::F32, {3, 64}, 40, 20, 1, 0, 0));
  // x 4 bytes past 16-byte alignment, K % 8 != 0: x in 4-byte copies.
  t.push_back(make_case("bf16 K 12, x 4-byte aligned", F::Bf16, S::BF16, {3, 0, 65}, 40, 12, 2, 0, 1));
  t.back().x_shift = 2;
  t.push_back(make_case("fp8 16x8 K 12, x 4-byte aligned", F::Fp8Block, S::F32, {20, 0, 1}, 72, 12, 1, 0, 0));
  t.back().x_shift = 2;
  t.back().br = 16;
  t.back().bc = 8;
  // The decoders bit for bit: unit x rows.
  const std::size_t first_one_hot = t.size();
  t.push_back(make_case("one-hot int4 bf16 scales", F::Int4Group, S::BF16, {0, 128, 64}, 128, 128, 1, 0, 0));
  t.push_back(make_case("one-hot int4 f16 scales", F::Int4Group, S::F16, {64}, 64, 64, 1, 0, 0));
  t.push_back(make_case("one-hot int4 f32 scales", F::Int4Group, S::F32, {64}, 64, 64, 1, 0, 0));
  t.push_back(make_case("one-hot mxfp4 (E8M0 scales 2^-125..2^125)", F::Int4Group, S::E8M0, {0, 128, 64}, 128, 128, 1, 0, 0));
  t.push_back(make_case("one-hot mxfp4, K 96", F::Int4Group, S::E8M0, {33, 96}, 64, 96, 2, 0, 0));
  t.push_back(make_case("one-hot fp8 (all 254 codes), blocks 16x64", F::Fp8Block, S::F32, {192}, 128, 192, 1, 0, 0));
  t.back().br = 16;
  t.back().bc = 64;
  t.push_back(make_case("one-hot fp8 (all 254 codes), blocks 16x8, K 72 (4-byte)", F::Fp8Block, S::F32, {80, 72}, 64, 72, 2, 0, 0));
  t.back().br = 16;
  t.back().bc = 8;
  t.push_back(make_case("one-hot fp8 (all 254 codes), 8x16 at phases (3, 8)", F::Fp8Block, S::F32, {160}, 128, 160, 1, 0, 0));
  t.back().br = 8;
  t.back().bc = 16;
  t.back().rp = 3;
  t.back().cp = 8;
  t.push_back(make_case("one-hot bf16", F::Bf16, S::BF16, {64}, 64, 64, 1, 0, 0));
  t.push_back(make_case("one-hot bf16 K 6 (4-byte x), 2 parts of 36", F::Bf16, S::BF16, {20, 0, 1, 45}, 72, 6, 2, 0, 0));
  t.push_back(make_case("one-hot fp8 16x8 K 12 (4-byte x)", F::Fp8Block, S::F32, {70}, 64, 12, 1, 0, 0));
  t.back().br = 16;
  t.back().bc = 8;
  for (std::size_t i = first_one_hot; i < t.size(); ++i) t[i].one_hot = true;
  return t;
}

// `f` must throw a layertap::Error whose message holds `needle`.
template <class F>
int expect_error(const char* what, const char* needle, F&& f) {
  try {
    f();
    std::printf("FAIL %s: did not throw\n", what);
    return 1;
  } catch (const layertap::Error& e) {
    const bool ok = std::string(e.what()).find(needle) != std::string::npos;
    std::printf("%s %s throws: %s\n", ok ? "ok  " : "FAIL", what, e.what());
    return ok ? 0 : 1;
  }
}

int argument_checks() {
  int fails = 0;
  auto* y = reinterpret_cast<__nv_bfloat16*>(std::uintptr_t(0x10000));
  const auto* x = reinterpret_cast<const __nv_bfloat16*>(std::uintptr_t(0x20000));
  const auto* off = reinterpret_cast<const std::int32_t*>(std::uintptr_t(0x30000));
  const auto* parts = reinterpret_cast<const kernels::GroupedWeightPart*>(std::uintptr_t(0x40000));
  const auto base = [&] {
    kernels::GroupedWeights w;
    w.format = GroupedFormat::Int4Group;
    w.parts = parts;
    w.part_rows = 64;
    return w;
  };
  fails += expect_error("K odd", "multiple of 2", [&] {
    kernels::GroupedWeights w = base();
    w.format = GroupedFormat::Bf16;
    kernels::grouped_gemm(y, x, off, 2, 10, 64, 7, w, nullptr);
  });
  fails += expect_error("INT4 K not a multiple of 8", "multiple of 8", [&] { kernels::grouped_gemm(y, x, off, 2, 10, 64, 36, base(), nullptr); });
  fails += expect_error("FP8 K not a multiple of 4", "multiple of 4", [&] {
    kernels::GroupedWeights w = base();
    w.format = GroupedFormat::Fp8Block;
    kernels::grouped_gemm(y, x, off, 2, 10, 64, 6, w, nullptr);
  });
  fails += expect_error("parts that do not make N", "do not make N", [&] { kernels::grouped_gemm(y, x, off, 2, 10, 128, 64, base(), nullptr); });
  fails += expect_error("INT4 groups of 16", "groups of 16", [&] {
    kernels::GroupedWeights w = base();
    w.group = 16;
    kernels::grouped_gemm(y, x, off, 2, 10, 64, 64, w, nullptr);
  });
  fails += expect_error("FP8 column phase 4", "phase", [&] {
    kernels::GroupedWeights w = base();
    w.format = GroupedFormat::Fp8Block;
    w.col_phase = 4;
    kernels::grouped_gemm(y, x, off, 2, 10, 64, 64, w, nullptr);
  });
  fails += expect_error("FP8 blocks of 12 columns", "block_cols", [&] {
    kernels::GroupedWeights w = base();
    w.format = GroupedFormat::Fp8Block;
    w.block_cols = 12;
    kernels::grouped_gemm(y, x, off, 2, 10, 64, 64, w, nullptr);
  });
  fails += expect_error("FP8 column phase past the block", "phase", [&] {
    kernels::GroupedWeights w = base();
    w.format = GroupedFormat::Fp8Block;
    w.block_cols = 8;
    w.col_phase = 8;
    kernels::grouped_gemm(y, x, off, 2, 10, 64, 64, w, nullptr);
  });
  fails += expect_error("x not 16-byte aligned with K % 8 == 0", "16-byte aligned", [&] {
    kernels::grouped_gemm(y, reinterpret_cast<const __nv_bfloat16*>(std::uintptr_t(0x20004)), off, 2, 10, 64, 64, base(),
                          nullptr);
  });
  fails += expect_error("x not 4-byte aligned with K % 8 != 0", "4-byte aligned", [&] {
    kernels::GroupedWeights w = base();
    w.format = GroupedFormat::Bf16;
    kernels::grouped_gemm(y, reinterpret_cast<const __nv_bfloat16*>(std::uintptr_t(0x20002)), off, 2, 10, 64, 12, w,
                          nullptr);
  });
  fails += expect_error("null offsets", "null pointer", [&] { kernels::grouped_gemm(y, x, nullptr, 2, 10, 64, 64, base(), nullptr); });
  // No experts or no rows: nothing to launch, nothing checked beyond the shapes.
  try {
    kernels::grouped_gemm(nullptr, nullptr, nullptr, 0, 10, 64, 64, base(), nullptr);
    kernels::grouped_gemm(nullptr, nullptr, nullptr, 3, 0, 64, 64, base(), nullptr);
    std::printf("ok   n == 0 and max_rows == 0 launch nothing\n");
  } catch (const std::exception& e) {
    std::printf("FAIL n == 0 or max_rows == 0: %s\n", e.what());
    ++fails;
  }
  const bool blocks_ok = kernels::grouped_gemm_blocks(4, 200, 192) == 2 * ((200 + 4 * 63) / 64) &&
                         kernels::grouped_gemm_blocks(1, 64, 128) == 1 && kernels::grouped_gemm_blocks(0, 0, 8) == 0;
  std::printf("%s grouped_gemm_blocks\n", blocks_ok ? "ok  " : "FAIL");
  return fails + (blocks_ok ? 0 : 1);
}

}  // namespace

int main() {
  const int host = argument_checks();
  return run_kernel_test(host, [](cudaStream_t stream) {
    const auto t0 = std::chrono::steady_clock::now();
    int failures = 0;
    std::uint64_t seed = 3401;
    for (const Case& c : cases()) failures += run_case(c, seed++, stream);
    std::printf("%zu cases in %.1f s\n", cases().size(),
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    return failures;
  });
}
