// kernels/dequant.cu against the CPU decoders of src/model/quant_formats.cpp: FP8 blocks (partial
// edge blocks, windows that start inside a block), INT4 groups (bf16, f16 and f32 scales,
// row-parallel windows) and MXFP4 (INT4 groups of 32 with E8M0 scales), each element bit for bit
// equal to float_to_bf16 of the CPU's float32 (NaN codes must come out NaN) and to
// quant_element.hpp's element functions on the host; the kernels' vector paths (16 or 8 codes, 4 or
// 1 INT4 words a thread), the runs they leave to the element path (crossing a scale block or group,
// row tails, NaN codes, non-finite scales, unaligned buffers), and special scales; plus the random
// packed fills of the synthetic models. Guard regions around every output, outputs poisoned with
// NaN first. Rows: op_cases.cpp.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "gpu_compare.hpp"
#include "gpu_test.hpp"
#include "kernels/dequant.cuh"
#include "model/quant_formats.hpp"
#include "op_table.hpp"

namespace {

using namespace layertap::gpu_test;
namespace kernels = layertap::kernels;
namespace quant = layertap::quant;
using layertap::DType;

using Variant = layertap::gpu_test::ops::DequantVariant;

const char* variant_name(const Variant& v) {
  return v.specials ? (v.misalign ? ", special scales, misaligned" : ", special scales")
                    : (v.misalign ? ", misaligned" : "");
}

// got (bf16 bits) vs bf16(want) and vs want_bits, the bits quant_element.hpp's element functions
// give on the host, for every element; NaN must meet NaN (its payload is not compared: even on the
// host, NaN * NaN keeps whichever operand the compiler put first).
int compare_bits(const std::string& name, const std::vector<bf16_bits>& got, const std::vector<float>& want,
                 const std::vector<bf16_bits>& want_bits, std::int64_t damage) {
  std::int64_t differ = 0, first = -1;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const bool ok = std::isnan(want[i]) ? (got[i] & 0x7fffu) > 0x7f80u
                                        : got[i] == layertap::float_to_bf16(want[i]) && got[i] == want_bits[i];
    if (!ok && first < 0) first = std::int64_t(i);
    differ += ok ? 0 : 1;
  }
  const bool ok = differ == 0 && damage == 0;
  std::printf("%s %-60s %zu elements, %lld differ, guard damage %lld\n", ok ? "ok  " : "FAIL", name.c_str(), got.size(),
              (long long)differ, (long long)damage);
  if (first >= 0)
    std::printf("     first: [%lld] got 0x%04x want %.8g\n", (long long)first, got[std::size_t(first)],
                double(want[std::size_t(first)]));
  return ok ? 0 : 1;
}

// A window [row0, +rows) x [col0, +cols) of an [out, in] FP8 matrix with blocks [br, bc].
int fp8_case(std::int64_t out, std::int64_t in, std::int64_t br, std::int64_t bc, const quant::Window& win,
             std::uint64_t seed, cudaStream_t stream, Variant variant = {}) {
  std::mt19937_64 rng(seed);
  std::vector<std::uint8_t> codes(std::size_t(out * in));
  for (auto& c : codes) c = std::uint8_t(rng());  // NaN codes 0x7f / 0xff included
  const std::int64_t grid_rows = (out + br - 1) / br, grid_cols = (in + bc - 1) / bc;
  std::vector<float> scales(std::size_t(grid_rows * grid_cols));
  std::uniform_real_distribution<float> u(-20.0f, 2.0f);
  for (auto& s : scales) s = std::exp2(u(rng));
  if (variant.specials) {
    // inf/NaN scales; 2^9 (scale * 2^120 overflows: the element path); subnormal scales; 2^100
    // (products overflow to inf); zeros; a negative scale.
    const float special[] = {INFINITY, -INFINITY, NAN, 512.0f, 0x1p-140f, 0x1p-127f, 0x1p100f, 0.0f, -0.0f, -0.75f};
    for (std::size_t i = 0; i < scales.size(); i += 3) scales[i] = special[(i / 3) % std::size(special)];
  }
  std::vector<float> want(std::size_t(win.rows * win.cols));
  quant::dequantize_fp8_block(reinterpret_cast<const std::byte*>(codes.data()),
                              reinterpret_cast<const std::byte*>(scales.data()), out, in, br, bc, win, want.data());
  // The window's bytes as read_packed_linear cuts them.
  const std::int64_t rp = win.row0 % br, cp = win.col0 % bc;
  const std::int64_t sr = (rp + win.rows + br - 1) / br, sc = (cp + win.cols + bc - 1) / bc;
  std::vector<std::uint8_t> wc(std::size_t(win.rows * win.cols));
  for (std::int64_t r = 0; r < win.rows; ++r)
    std::memcpy(&wc[std::size_t(r * win.cols)], &codes[std::size_t((win.row0 + r) * in + win.col0)],
                std::size_t(win.cols));
  std::vector<float> ws(std::size_t(sr * sc));
  for (std::int64_t r = 0; r < sr; ++r)
    for (std::int64_t c = 0; c < sc; ++c)
      ws[std::size_t(r * sc + c)] = scales[std::size_t((win.row0 / br + r) * grid_cols + win.col0 / bc + c)];
  std::vector<bf16_bits> want_bits(want.size());
  for (std::int64_t r = 0; r < win.rows; ++r)
    for (std::int64_t c = 0; c < win.cols; ++c)
      want_bits[std::size_t(r * win.cols + c)] = kernels::fp8_block_element(
          wc[std::size_t(r * win.cols + c)], ws[std::size_t(((r + rp) / br) * sc + (c + cp) / bc)]);
  Guarded<std::uint8_t> d_codes(std::int64_t(wc.size()), variant.misalign ? 4096 + 4 : 4096);
  Guarded<float> d_scales(std::int64_t(ws.size()));
  Guarded<bf16_bits> d_out(win.rows * win.cols, variant.misalign ? 2048 + 1 : 2048);
  d_codes.upload(wc);
  d_scales.upload(ws);
  poison_bf16(d_out);
  kernels::dequantize_fp8_block(as_bf16(d_out.data()), d_codes.data(), d_scales.data(), win.rows, win.cols, br, bc, rp,
                                cp, stream);
  LT_CUDA_CHECK(cudaStreamSynchronize(stream));
  char name[200];
  std::snprintf(name, sizeof name, "fp8 [%lld, %lld] blocks [%lld, %lld] window rows %lld+%lld cols %lld+%lld%s",
                (long long)out, (long long)in, (long long)br, (long long)bc, (long long)win.row0, (long long)win.rows,
                (long long)win.col0, (long long)win.cols, variant_name(variant));
  return compare_bits(name, d_out.download(), want, want_bits,
                      d_out.guard_damage() + d_codes.guard_damage() + d_scales.guard_damage());
}

// A window of INT4-group words `wp` [rows, ceil(cols / 8)] and its scales `wsc` (ceil(cols / group)
// per row, of `type`) expanded by kernels::dequantize_int4_group, held bit for bit to the element
// decode of each nibble and to `want` (the host decoder's float32). INT4 and MXFP4 (E8M0 scales,
// groups of 32) share it: only the scales' decode differs.
int int4_window_on_device(const std::string& name, const std::vector<std::uint32_t>& wp,
                          const std::vector<std::uint8_t>& wsc, std::int64_t rows, std::int64_t cols,
                          std::int64_t group, kernels::ScaleType type, const std::vector<float>& want,
                          const Variant& variant, cudaStream_t stream) {
  const std::int64_t wwords = (cols + 7) / 8, wgroups = (cols + group - 1) / group;
  std::vector<bf16_bits> want_bits(want.size());
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::uint32_t nibble = (wp[std::size_t(r * wwords + c / 8)] >> (4 * (c % 8))) & 0xfu;
      const float scale = kernels::scale_value(wsc.data(), r * wgroups + c / group, type);
      want_bits[std::size_t(r * cols + c)] = kernels::int4_group_element(nibble, scale, type);
    }
  Guarded<std::uint32_t> d_words(std::int64_t(wp.size()), variant.misalign ? 1024 + 1 : 1024);
  Guarded<std::uint8_t> d_scales(std::int64_t(wsc.size()));
  Guarded<bf16_bits> d_out(rows * cols, variant.misalign ? 2048 + 1 : 2048);
  d_words.upload(wp);
  d_scales.upload(wsc);
  poison_bf16(d_out);
  kernels::dequantize_int4_group(as_bf16(d_out.data()), d_words.data(), d_scales.data(), type, rows, cols, group,
                                 stream);
  LT_CUDA_CHECK(cudaStreamSynchronize(stream));
  return compare_bits(name, d_out.download(), want, want_bits,
                      d_out.guard_damage() + d_words.guard_damage() + d_scales.guard_damage());
}

// A window of an [out, in] INT4 matrix with groups of `group` (col0 on a group boundary).
int int4_case(std::int64_t out, std::int64_t in, std::int64_t group, DType st, const quant::Window& win,
              std::uint64_t seed, cudaStream_t stream, Variant variant = {}) {
  std::mt19937_64 rng(seed);
  const std::int64_t words = (in + 7) / 8, groups = (in + group - 1) / group, ss = st == DType::F32 ? 4 : 2;
  std::vector<std::uint32_t> packed(std::size_t(out * words));
  for (auto& w : packed) w = std::uint32_t(rng());
  std::vector<std::byte> scales(std::size_t(out * groups * ss));
  std::uniform_real_distribution<float> mant(0.5f, 1.0f);
  std::uniform_int_distribution<int> expo(-26, 10);
  // inf/NaN scales, zeros, scales whose products overflow (to inf: 2^126 in bf16/f32, 65504 as
  // f16) or land on subnormals (f16: 2^-24, 3e-5; bf16/f32: 2^-130, 2^-140).
  const float special_bf[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 0x1p126f, -0x1p126f, 0x1p-130f, 0x1p-140f};
  const float special_h[] = {INFINITY, -INFINITY, NAN, 0.0f, -0.0f, 65504.0f, -40000.0f, 0x1p-24f, 3e-5f};
  for (std::int64_t i = 0; i < out * groups; ++i) {
    float v = std::ldexp(mant(rng), expo(rng)) * (rng() % 2 ? 1.0f : -1.0f);
    if (variant.specials && i % 3 == 0) v = (st == DType::F16 ? special_h : special_bf)[(i / 3) % 9];
    if (st == DType::F32) {
      std::memcpy(&scales[std::size_t(i * 4)], &v, 4);
    } else {
      const std::uint16_t b = st == DType::BF16 ? layertap::float_to_bf16(v) : layertap::float_to_fp16(v);
      std::memcpy(&scales[std::size_t(i * 2)], &b, 2);
    }
  }
  std::vector<float> want(std::size_t(win.rows * win.cols));
  quant::dequantize_int4_group(reinterpret_cast<const std::byte*>(packed.data()), scales.data(), st, out, in, group, win,
                               want.data());
  const std::int64_t wwords = (win.cols + 7) / 8, wgroups = (win.cols + group - 1) / group;
  std::vector<std::uint32_t> wp(std::size_t(win.rows * wwords));
  std::vector<std::uint8_t> wsc(std::size_t(win.rows * wgroups * ss));
  for (std::int64_t r = 0; r < win.rows; ++r) {
    std::memcpy(&wp[std::size_t(r * wwords)], &packed[std::size_t((win.row0 + r) * words + win.col0 / 8)],
                std::size_t(wwords * 4));
    std::memcpy(&wsc[std::size_t(r * wgroups * ss)], &scales[std::size_t(((win.row0 + r) * groups + win.col0 / group) * ss)],
                std::size_t(wgroups * ss));
  }
  const kernels::ScaleType type = st == DType::BF16 ? kernels::ScaleType::BF16
                                  : st == DType::F16 ? kernels::ScaleType::F16
                                                     : kernels::ScaleType::F32;
  char name[200];
  std::snprintf(name, sizeof name, "int4 [%lld, %lld] groups of %lld, %s scales, window rows %lld+%lld cols %lld+%lld%s",
                (long long)out, (long long)in, (long long)group, std::string(layertap::dtype_name(st)).c_str(), (long long)win.row0,
                (long long)win.rows, (long long)win.col0, (long long)win.cols, variant_name(variant));
  return int4_window_on_device(name, wp, wsc, win.rows, win.cols, group, type, want, variant, stream);
}

// A window of an [out, in] MXFP4 matrix (in % 32 == 0; col0 on a block boundary), expanded as
// INT4 groups of 32 with E8M0 scales. Scale codes near 127, or with `specials` every third one of
// 0 (2^-127: subnormal products), 1, 126, 127, 128, 253, 254 (products overflowing to inf) and 255
// (NaN: the element path).
int mxfp4_case(std::int64_t out, std::int64_t in, const quant::Window& win, std::uint64_t seed, cudaStream_t stream,
               Variant variant = {}) {
  std::mt19937_64 rng(seed);
  const std::int64_t row_bytes = in / 2, blocks = in / 32;
  std::vector<std::uint8_t> codes(std::size_t(out * row_bytes)), scales(std::size_t(out * blocks));
  for (auto& c : codes) c = std::uint8_t(rng());
  const std::uint8_t special[] = {0, 1, 126, 127, 128, 253, 254, 255};
  for (std::size_t i = 0; i < scales.size(); ++i)
    scales[i] = variant.specials && i % 3 == 0 ? special[(i / 3) % 8] : std::uint8_t(107 + rng() % 30);
  std::vector<float> want(std::size_t(win.rows * win.cols));
  quant::dequantize_mxfp4(reinterpret_cast<const std::byte*>(codes.data()),
                          reinterpret_cast<const std::byte*>(scales.data()), out, in, win, want.data());
  // The window's bytes as whole words (its columns a multiple of 8) and its scales.
  const std::int64_t wwords = (win.cols + 7) / 8, wblocks = (win.cols + 31) / 32;
  std::vector<std::uint32_t> wp(std::size_t(win.rows * wwords));
  std::vector<std::uint8_t> wsc(std::size_t(win.rows * wblocks));
  for (std::int64_t r = 0; r < win.rows; ++r) {
    std::memcpy(&wp[std::size_t(r * wwords)], &codes[std::size_t((win.row0 + r) * row_bytes + win.col0 / 2)],
                std::size_t(wwords * 4));
    std::memcpy(&wsc[std::size_t(r * wblocks)], &scales[std::size_t((win.row0 + r) * blocks + win.col0 / 32)],
                std::size_t(wblocks));
  }
  char name[200];
  std::snprintf(name, sizeof name, "mxfp4 [%lld, %lld] window rows %lld+%lld cols %lld+%lld%s", (long long)out,
                (long long)in, (long long)win.row0, (long long)win.rows, (long long)win.col0, (long long)win.cols,
                variant_name(variant));
  return int4_window_on_device(name, wp, wsc, win.rows, win.cols, 32, kernels::ScaleType::E8M0, want, variant,
                               stream);
}

int fills(cudaStream_t stream) {
  int fails = 0;
  const std::int64_t n = 100003;
  Guarded<std::uint8_t> codes(n);
  Guarded<std::uint32_t> words(n), words2(n);
  Guarded<float> f(n);
  kernels::fill_random_fp8(codes.data(), n, 7, stream);
  kernels::fill_random_int4(words.data(), n, 9, stream);
  kernels::fill_random_int4(words2.data(), n, 9, stream);
  kernels::fill_uniform_f32(f.data(), n, 11, 0.25f, 0.125f, stream);
  LT_CUDA_CHECK(cudaStreamSynchronize(stream));
  const std::vector<std::uint8_t> c = codes.download();
  const std::set<std::uint8_t> distinct(c.begin(), c.end());
  const bool fp8_ok = distinct.size() == 254 && !distinct.count(0x7f) && !distinct.count(0xff);
  std::printf("%s fill_random_fp8: %zu distinct codes, none NaN\n", fp8_ok ? "ok  " : "FAIL", distinct.size());
  const std::vector<std::uint32_t> w = words.download();
  std::set<std::uint32_t> nibbles;
  for (const std::uint32_t x : w)
    for (int k = 0; k < 8; ++k) nibbles.insert((x >> (4 * k)) & 0xfu);
  const bool int4_ok = nibbles.size() == 16 && w == words2.download();
  std::printf("%s fill_random_int4: all 16 nibbles, same seed same words\n", int4_ok ? "ok  " : "FAIL");
  const std::vector<float> v = f.download();
  const bool f32_ok = std::all_of(v.begin(), v.end(), [](float x) { return x >= 0.125f && x < 0.375f; });
  std::printf("%s fill_uniform_f32: %lld values in [0.125, 0.375)\n", f32_ok ? "ok  " : "FAIL", (long long)n);
  const std::int64_t damage = codes.guard_damage() + words.guard_damage() + f.guard_damage();
  if (damage != 0) std::printf("FAIL fills: guard damage %lld\n", (long long)damage);
  fails += fp8_ok && int4_ok && f32_ok && damage == 0 ? 0 : 1;
  return fails;
}

// Argument checks (no device).
int argument_checks() {
  int host = 0;
  auto* p = reinterpret_cast<__nv_bfloat16*>(std::uintptr_t(0x1000));
  const auto* c = reinterpret_cast<const std::uint8_t*>(std::uintptr_t(0x2000));
  const auto* s = reinterpret_cast<const float*>(std::uintptr_t(0x3000));
  expect_throw(host, "fp8 phase beyond its block", [&] { kernels::dequantize_fp8_block(p, c, s, 4, 4, 2, 2, 2, 0, nullptr); });
  expect_throw(host, "int4 group 0", [&] {
    kernels::dequantize_int4_group(p, reinterpret_cast<const std::uint32_t*>(c), s, kernels::ScaleType::BF16, 4, 8, 0,
                                   nullptr);
  });
  return host;
}

}  // namespace

namespace layertap::gpu_test::ops {

int run(const DequantFp8& c, std::uint64_t seed, cudaStream_t stream) {
  return fp8_case(c.out, c.in, c.br, c.bc, c.win, seed, stream, c.variant);
}
int run(const DequantInt4& c, std::uint64_t seed, cudaStream_t stream) {
  return int4_case(c.out, c.in, c.group, c.st, c.win, seed, stream, c.variant);
}
int run(const DequantMxfp4& c, std::uint64_t seed, cudaStream_t stream) {
  return mxfp4_case(c.out, c.in, c.win, seed, stream, c.variant);
}
int dequant_host_checks() { return argument_checks(); }
int dequant_device_checks(cudaStream_t stream) { return fills(stream); }

}  // namespace layertap::gpu_test::ops
