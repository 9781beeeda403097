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
// copies, weights in 16-byte ones). Rows: op_cases.cpp.
//
// Reference: each expert's weight decoded on the host by kernels/quant_element.hpp (the decoders
// kernels/dequant.cu runs, themselves held bit for bit to the CPU backend's by the dequant rows and
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
#include "op_table.hpp"

namespace {

using namespace layertap::gpu_test;
namespace kernels = layertap::kernels;
using kernels::GroupedFormat;
using kernels::ScaleType;

using Case = layertap::gpu_test::ops::GroupedGemm;

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

namespace layertap::gpu_test::ops {

int run(const GroupedGemm& c, std::uint64_t seed, cudaStream_t stream) { return run_case(c, seed, stream); }
int grouped_gemm_host_checks() { return argument_checks(); }

}  // namespace layertap::gpu_test::ops
