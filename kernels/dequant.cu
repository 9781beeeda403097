// Packed weights to bf16 (see dequant.cuh), at memory speed: a 2D grid of (row, run of columns),
// each thread one run of 8 to 32 consecutive elements of a row, with one 8- or 16-byte load of its
// codes, its scale loaded once, and 16-byte stores of 8 bf16; index arithmetic once per thread, in
// 32 bits. Each element is the bf16 that quant_element.hpp defines (fp8_block_element,
// int4_group_element, for MXFP4 too: E8M0 scales): the fast path computes the same float32 product
// and rounds it to bf16 the same way (one cvt.rn.bf16x2.f32 for two elements on the device, round
// to nearest even as bf16_bits_of) and is taken only where that product cannot be NaN (a finite
// scale, no NaN code); everything else (NaN codes, infinite or NaN scales, runs that cross a scale
// block or group, row tails, unaligned buffers) takes quant_element.hpp's functions element by
// element.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_check.hpp"
#include "launch.cuh"
#include "dequant.cuh"
#include "quant_element.hpp"

namespace layertap::kernels {
namespace {

// ----------------------------------------------------------------------------------------------
// kernels

constexpr int kBlock = 256;
constexpr int kMaxGridY = 65535;

__device__ __forceinline__ std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// bf16 bits of two floats that are not NaN (lo in the low half), rounded to nearest even as
// bf16_bits_of rounds them (for a NaN the two may differ in payload: never given one).
__device__ __forceinline__ std::uint32_t bf16x2_rn(float lo, float hi) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // cvt.rn.bf16x2.f32
  return *reinterpret_cast<const std::uint32_t*>(&v);
#else
  return std::uint32_t(bf16_bits_of(lo)) | std::uint32_t(bf16_bits_of(hi)) << 16;
#endif
}

__device__ __forceinline__ bool finite(float x) { return x - x == 0.0f; }  // false for inf and NaN

// float(code) * scale_inv for an e4m3 code that is not NaN (bits 8 and up ignored), given
// s120 = scale_inv * 2^120 (finite, hence exact). The magnitude bits shifted into a float32's
// exponent and mantissa fields are |value| * 2^-120 exactly (e4m3's subnormals land on float32
// subnormals), so the product is the same real number, rounded once: the same float32.
__device__ __forceinline__ float fp8_times(std::uint32_t code, float s120) {
  const float magnitude = bits_to_float((code & 0x7fu) << 20);
  return bits_to_float(float_to_bits(magnitude * s120) ^ ((code & 0x80u) << 24));
}

// Whether any byte of w is an e4m3 NaN code (0x7f or 0xff): low 7 bits 0x7f carry into bit 7.
__device__ __forceinline__ std::uint32_t fp8_nan_bytes(std::uint32_t w) {
  return ((w & 0x7f7f7f7fu) + 0x01010101u) & 0x80808080u;
}

// Thread (x, y): codes [c0, c0 + VEC) of rows y, y + rows per grid, ...; VEC = 16 (16-byte loads)
// or 8 (8-byte loads). `aligned`: cols % VEC == 0 and both buffers aligned for those loads and for
// 16-byte stores, else every run takes the element path.
template <int VEC>
__global__ void __launch_bounds__(kBlock)
    fp8_block_kernel(std::uint16_t* __restrict__ dst, const std::uint8_t* __restrict__ codes,
                     const float* __restrict__ scale_inv, std::int32_t rows, std::int32_t cols, std::int32_t br,
                     std::int32_t bc, std::int32_t row_phase, std::int32_t col_phase, bool aligned) {
  const std::int32_t c0 = (std::int32_t(blockIdx.x) * std::int32_t(blockDim.x) + std::int32_t(threadIdx.x)) * VEC;
  if (c0 >= cols) return;
  const std::int32_t scale_cols = (col_phase + cols + bc - 1) / bc;
  const std::int32_t sc = (c0 + col_phase) / bc;             // the block column of the run's first code
  const std::int32_t next_block = (sc + 1) * bc - col_phase;  // the first column of the next one
  const bool whole = aligned && c0 + VEC <= next_block;       // the run inside one block column
  const std::int32_t row_step = std::int32_t(gridDim.y) * std::int32_t(blockDim.y);
  for (std::int32_t r = std::int32_t(blockIdx.y) * std::int32_t(blockDim.y) + std::int32_t(threadIdx.y); r < rows;
       r += row_step) {
    const float* srow = scale_inv + std::int64_t((r + row_phase) / br) * scale_cols;
    const std::uint8_t* in = codes + std::int64_t(r) * cols;
    std::uint16_t* out = dst + std::int64_t(r) * cols;
    const float s = srow[sc];
    if (whole) {
      std::uint32_t w[VEC / 4];
      if constexpr (VEC == 16) {
        const uint4 v = *reinterpret_cast<const uint4*>(in + c0);
        w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
      } else {
        const uint2 v = *reinterpret_cast<const uint2*>(in + c0);
        w[0] = v.x, w[1] = v.y;
      }
      std::uint32_t nan = 0;
#pragma unroll
      for (int q = 0; q < VEC / 4; ++q) nan |= fp8_nan_bytes(w[q]);
      const float s120 = s * 0x1p120f;
      if (nan == 0 && finite(s120)) {
#pragma unroll
        for (int h = 0; h < VEC / 8; ++h) {  // 8 codes -> one 16-byte store
          uint4 o;
          std::uint32_t* ow = &o.x;
#pragma unroll
          for (int q = 0; q < 2; ++q) {
            const std::uint32_t x = w[2 * h + q];
            ow[2 * q] = bf16x2_rn(fp8_times(x, s120), fp8_times(x >> 8, s120));
            ow[2 * q + 1] = bf16x2_rn(fp8_times(x >> 16, s120), fp8_times(x >> 24, s120));
          }
          *reinterpret_cast<uint4*>(out + c0 + 8 * h) = o;
        }
        continue;
      }
    }
    // Element by element, the scale block followed without a division.
    std::int32_t b = sc, next = next_block;
    float sb = s;
    const std::int32_t end = c0 + VEC < cols ? c0 + VEC : cols;
    for (std::int32_t c = c0; c < end; ++c) {
      if (c >= next) {
        ++b;
        next += bc;
        sb = srow[b];
      }
      out[c] = fp8_block_element(in[c], sb);
    }
  }
}

// q * scale as int4_value computes it, for a finite scale, before the rounding to bf16: for bf16
// scales int4_value's rounding to bf16 is the final one's (bf16 of a bf16 value is itself); for
// f16 scales the f16 round trip stays; E8M0 (MXFP4) is int4_value's exact e2m1 product.
template <ScaleType ST>
__device__ __forceinline__ float int4_times(std::uint32_t nibble, float scale) {
  if constexpr (ST == ScaleType::E8M0) return e2m1_value(nibble & 0xfu) * scale;
  const float q = bits_to_float(0x4b000000u | (nibble & 0xfu)) - 8388616.0f;  // 2^23 + nibble - (2^23 + 8), exact
  const float product = q * scale;
  if constexpr (ST == ScaleType::F16) return f16_value(f16_bits_of(product));
  return product;
}

// Thread (x, y): words [w0, w0 + WORDS) (columns [8 w0, 8 w0 + 8 WORDS)) of rows y, y + rows per
// grid, ...; WORDS = 4 (16-byte loads) or 1. `aligned`: 16-byte stores (cols % 8 == 0, dst
// aligned) and, for WORDS = 4, 16-byte loads (words per row % 4 == 0, words aligned).
template <ScaleType ST, int WORDS>
__global__ void __launch_bounds__(kBlock)
    int4_group_kernel(std::uint16_t* __restrict__ dst, const std::uint32_t* __restrict__ words,
                      const void* __restrict__ scales, std::int32_t rows, std::int32_t cols, std::int32_t group,
                      bool aligned) {
  const std::int32_t row_words = (cols + 7) / 8;
  const std::int32_t w0 = (std::int32_t(blockIdx.x) * std::int32_t(blockDim.x) + std::int32_t(threadIdx.x)) * WORDS;
  if (w0 >= row_words) return;
  const std::int32_t c0 = w0 * 8, n = 8 * WORDS;
  const std::int32_t scale_cols = (cols + group - 1) / group;
  const std::int32_t g0 = c0 / group, next_group = (g0 + 1) * group;
  const bool whole = aligned && c0 + n <= cols && c0 + n <= next_group;  // a full run inside one group
  const std::int32_t row_step = std::int32_t(gridDim.y) * std::int32_t(blockDim.y);
  for (std::int32_t r = std::int32_t(blockIdx.y) * std::int32_t(blockDim.y) + std::int32_t(threadIdx.y); r < rows;
       r += row_step) {
    const std::uint32_t* wrow = words + std::int64_t(r) * row_words;
    std::uint16_t* out = dst + std::int64_t(r) * cols;
    const std::int64_t srow = std::int64_t(r) * scale_cols;
    const float s = scale_value(scales, srow + g0, ST);
    if (whole && finite(s)) {
      std::uint32_t w[WORDS];
      if constexpr (WORDS == 4) {
        const uint4 v = *reinterpret_cast<const uint4*>(wrow + w0);
        w[0] = v.x, w[1] = v.y, w[2] = v.z, w[3] = v.w;
      } else {
        w[0] = wrow[w0];
      }
#pragma unroll
      for (int q = 0; q < WORDS; ++q) {  // one word, 8 elements -> one 16-byte store
        const std::uint32_t x = w[q];
        uint4 o;
        o.x = bf16x2_rn(int4_times<ST>(x, s), int4_times<ST>(x >> 4, s));
        o.y = bf16x2_rn(int4_times<ST>(x >> 8, s), int4_times<ST>(x >> 12, s));
        o.z = bf16x2_rn(int4_times<ST>(x >> 16, s), int4_times<ST>(x >> 20, s));
        o.w = bf16x2_rn(int4_times<ST>(x >> 24, s), int4_times<ST>(x >> 28, s));
        *reinterpret_cast<uint4*>(out + c0 + 8 * q) = o;
      }
      continue;
    }
    // Element by element, the group followed without a division.
    std::int32_t g = g0, next = next_group;
    float sg = s;
    const std::int32_t end = c0 + n < cols ? c0 + n : cols;
    for (std::int32_t c = c0; c < end; ++c) {
      if (c >= next) {
        ++g;
        next += group;
        sg = scale_value(scales, srow + g, ST);
      }
      out[c] = int4_group_element((wrow[c / 8] >> (4 * (c % 8))) & 0xfu, sg, ST);
    }
  }
}

// The 254 finite e4m3 codes, 0x00..0x7e and 0x80..0xfe, equally likely.
__global__ void fill_fp8_kernel(std::uint8_t* codes, std::int64_t n, std::uint64_t seed) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::uint32_t u = std::uint32_t(splitmix64(seed ^ splitmix64(std::uint64_t(i))) % 254u);
    codes[i] = std::uint8_t(u < 127u ? u : u + 1u);  // skips 0x7f; 253 -> 0xfe
  }
}

__global__ void fill_int4_kernel(std::uint32_t* words, std::int64_t n, std::uint64_t seed) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    words[i] = std::uint32_t(splitmix64(seed ^ splitmix64(std::uint64_t(i))) >> 16);
  }
}

__global__ void fill_f32_kernel(float* x, std::int64_t n, std::uint64_t seed, float offset, float scale) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += std::int64_t(gridDim.x) * blockDim.x) {
    const std::uint64_t h = splitmix64(seed ^ splitmix64(std::uint64_t(i)));
    const float u = float(h >> 40) * 0x1p-23f - 1.0f;  // 24 random bits: uniform in [-1, 1)
    x[i] = fmaf(scale, u, offset);
  }
}

unsigned grid_for(std::int64_t items) {
  constexpr std::int64_t kMaxGrid = 1 << 16;
  const std::int64_t blocks = (items + kBlock - 1) / kBlock;
  return static_cast<unsigned>(blocks < kMaxGrid ? (blocks > 0 ? blocks : 1) : kMaxGrid);
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// launchers

namespace {

// A block of (x, y) = (runs, rows) threads, x as many runs as a row has (at most kBlock), and the
// grid over all runs and rows (rows grid-strided past kMaxGridY blocks).
struct RunGrid {
  dim3 grid, block;
};
RunGrid run_grid(std::int64_t rows, std::int64_t runs_per_row) {
  const std::int64_t x = runs_per_row < kBlock ? runs_per_row : kBlock, y = kBlock / x;
  const std::int64_t gx = (runs_per_row + x - 1) / x, gy = (rows + y - 1) / y;
  return RunGrid{dim3(static_cast<unsigned>(gx), static_cast<unsigned>(gy < kMaxGridY ? gy : kMaxGridY)),
                 dim3(static_cast<unsigned>(x), static_cast<unsigned>(y))};
}

bool aligned_to(const void* p, std::uintptr_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

constexpr std::int64_t kInt32Range = std::int64_t(1) << 31;

template <ScaleType ST>
void launch_int4(const Grid& g, std::uint16_t* dst, const std::uint32_t* words, const void* scales, std::int32_t rows,
                 std::int32_t cols, std::int32_t group, int per_thread, bool aligned) {
  if (per_thread == 4) {
    launch<int4_group_kernel<ST, 4>>(g, dst, words, scales, rows, cols, group, aligned);
  } else {
    launch<int4_group_kernel<ST, 1>>(g, dst, words, scales, rows, cols, group, aligned);
  }
}

}  // namespace

void dequantize_fp8_block(__nv_bfloat16* dst, const std::uint8_t* codes, const float* scale_inv, std::int64_t rows,
                          std::int64_t cols, std::int64_t block_rows, std::int64_t block_cols, std::int64_t row_phase,
                          std::int64_t col_phase, cudaStream_t stream) {
  LT_CHECK(rows >= 0 && cols >= 0 && block_rows > 0 && block_cols > 0 && row_phase >= 0 && row_phase < block_rows &&
               col_phase >= 0 && col_phase < block_cols,
           "dequantize_fp8_block: bad shape rows=", rows, " cols=", cols, " block [", block_rows, ", ", block_cols,
           "] phase (", row_phase, ", ", col_phase, ")");
  LT_CHECK(rows + 2 * block_rows < kInt32Range && cols + 2 * block_cols < kInt32Range,
           "dequantize_fp8_block: rows ", rows, " or cols ", cols, " beyond 32-bit indexing");
  LT_CHECK(dst != nullptr && codes != nullptr && scale_inv != nullptr, "dequantize_fp8_block: null pointer argument");
  if (rows == 0 || cols == 0) return;
  // 16 codes a thread where rows keep 16-byte alignment, else 8 (element by element unless 8-byte).
  const bool out_ok = cols % 8 == 0 && aligned_to(dst, 16);
  const int vec = out_ok && cols % 16 == 0 && aligned_to(codes, 16) ? 16 : 8;
  const bool aligned = out_ok && cols % vec == 0 && aligned_to(codes, std::uintptr_t(vec));
  const RunGrid rg = run_grid(rows, (cols + vec - 1) / vec);
  const double elements = double(rows) * double(cols);
  const double scale_rows = double((row_phase + rows + block_rows - 1) / block_rows);
  const double scale_cols = double((col_phase + cols + block_cols - 1) / block_cols);
  // Bytes: codes once, each scale once (a thread's reuse across its rows and the block's threads
  // hit L1), the bf16 out. Per element ~7 lane instructions on the fast path (byte shift and mask,
  // float multiply, sign xor, half a bf16x2 conversion and packing, the NaN-code test), plus ~40 per
  // thread and row (two 32-bit divisions, addresses, the scale load, the loads and stores).
  Work work;
  work.read = elements + scale_rows * scale_cols * 4;
  work.written = elements * 2;
  work.ops = elements * (7.0 + 40.0 / vec);
  const Grid g{rg.grid, rg.block, 0, stream, work};
  const auto r32 = std::int32_t(rows), c32 = std::int32_t(cols), br = std::int32_t(block_rows),
             bc = std::int32_t(block_cols), rp = std::int32_t(row_phase), cp = std::int32_t(col_phase);
  auto* out = reinterpret_cast<std::uint16_t*>(dst);
  if (vec == 16) {
    launch<fp8_block_kernel<16>>(g, out, codes, scale_inv, r32, c32, br, bc, rp, cp, aligned);
  } else {
    launch<fp8_block_kernel<8>>(g, out, codes, scale_inv, r32, c32, br, bc, rp, cp, aligned);
  }
  LT_CUDA_CHECK_LAUNCH();
}

void dequantize_int4_group(__nv_bfloat16* dst, const std::uint32_t* words, const void* scales, ScaleType scale_type,
                           std::int64_t rows, std::int64_t cols, std::int64_t group, cudaStream_t stream) {
  LT_CHECK(rows >= 0 && cols >= 0 && group > 0, "dequantize_int4_group: bad shape rows=", rows, " cols=", cols,
           " group=", group);
  LT_CHECK(rows < kInt32Range && cols + 2 * group < kInt32Range, "dequantize_int4_group: rows ", rows, " or cols ", cols,
           " beyond 32-bit indexing");
  LT_CHECK(scale_type == ScaleType::BF16 || scale_type == ScaleType::F16 || scale_type == ScaleType::F32 ||
               scale_type == ScaleType::E8M0,
           "dequantize_int4_group: unknown scale type");
  LT_CHECK(dst != nullptr && words != nullptr && scales != nullptr, "dequantize_int4_group: null pointer argument");
  if (rows == 0 || cols == 0) return;
  const std::int64_t row_words = (cols + 7) / 8;
  // 4 words (32 elements) a thread where rows keep 16-byte alignment, else 1.
  const bool aligned = cols % 8 == 0 && aligned_to(dst, 16);
  const int per_thread = aligned && row_words % 4 == 0 && aligned_to(words, 16) ? 4 : 1;
  const RunGrid rg = run_grid(rows, (row_words + per_thread - 1) / per_thread);
  const double elements = double(rows) * double(cols);
  // Bytes: the words and scales once, the bf16 out. Per element ~5 lane instructions on the fast
  // path (nibble shift and mask, the exact float of q, the multiply, half a bf16x2 conversion and
  // packing; f16 scales ~20 more for the f16 rounding, E8M0 ~2 more for the e2m1 bits and their
  // 2^126), plus ~40 per thread and row (the division for the group, addresses, the scale load,
  // the loads and stores).
  Work work;
  work.read = double(rows) * double(row_words) * 4 +
              double(rows) * double((cols + group - 1) / group) * double(scale_size(scale_type));
  work.written = elements * 2;
  work.ops = elements * (5.0 + (scale_type == ScaleType::F16 ? 20.0 : scale_type == ScaleType::E8M0 ? 2.0 : 0.0) +
                         40.0 / (8 * per_thread));
  const Grid g{rg.grid, rg.block, 0, stream, work};
  auto* out = reinterpret_cast<std::uint16_t*>(dst);
  const auto r32 = std::int32_t(rows), c32 = std::int32_t(cols), g32 = std::int32_t(group);
  switch (scale_type) {
    case ScaleType::BF16: launch_int4<ScaleType::BF16>(g, out, words, scales, r32, c32, g32, per_thread, aligned); break;
    case ScaleType::F16: launch_int4<ScaleType::F16>(g, out, words, scales, r32, c32, g32, per_thread, aligned); break;
    case ScaleType::E8M0: launch_int4<ScaleType::E8M0>(g, out, words, scales, r32, c32, g32, per_thread, aligned); break;
    default: launch_int4<ScaleType::F32>(g, out, words, scales, r32, c32, g32, per_thread, aligned); break;
  }
  LT_CUDA_CHECK_LAUNCH();
}

void fill_random_fp8(std::uint8_t* codes, std::int64_t n, std::uint64_t seed, cudaStream_t stream) {
  LT_CHECK(n >= 0 && (codes != nullptr || n == 0), "fill_random_fp8: bad arguments");
  if (n == 0) return;
  // n bytes written; ~70 lane instructions each (two splitmix64 rounds of 64-bit multiplies, the
  // modulo by a constant).
  launch<fill_fp8_kernel>(Grid{grid_for(n), kBlock, 0, stream, Work{0, double(n), 0, double(n) * 70}}, codes, n, seed);
  LT_CUDA_CHECK_LAUNCH();
}

void fill_random_int4(std::uint32_t* words, std::int64_t n, std::uint64_t seed, cudaStream_t stream) {
  LT_CHECK(n >= 0 && (words != nullptr || n == 0), "fill_random_int4: bad arguments");
  if (n == 0) return;
  // 4n bytes written; ~60 lane instructions per word (two splitmix64 rounds).
  launch<fill_int4_kernel>(Grid{grid_for(n), kBlock, 0, stream, Work{0, double(n) * 4, 0, double(n) * 60}}, words, n,
                           seed);
  LT_CUDA_CHECK_LAUNCH();
}

void fill_uniform_f32(float* x, std::int64_t n, std::uint64_t seed, float offset, float scale, cudaStream_t stream) {
  LT_CHECK(n >= 0 && (x != nullptr || n == 0), "fill_uniform_f32: bad arguments");
  if (n == 0) return;
  // 4n bytes written; ~65 lane instructions per value (two splitmix64 rounds, the conversion, an fma).
  launch<fill_f32_kernel>(Grid{grid_for(n), kBlock, 0, stream, Work{0, double(n) * 4, 0, double(n) * 65}}, x, n, seed,
                          offset, scale);
  LT_CUDA_CHECK_LAUNCH();
}

}  // namespace layertap::kernels
