// Packed weights to bf16 (see dequant.cuh): one thread per 8 output elements (one INT4 word, or
// 8 FP8 codes), grid-strided; elements decoded by quant_element.hpp, the host-tested functions.
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

__device__ __forceinline__ std::uint64_t splitmix64(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Chunk i covers columns [8 (i % chunks), +8) of row i / chunks.
__global__ void __launch_bounds__(kBlock)
    fp8_block_kernel(std::uint16_t* __restrict__ dst, const std::uint8_t* __restrict__ codes,
                     const float* __restrict__ scale_inv, std::int64_t rows, std::int64_t cols, std::int64_t br,
                     std::int64_t bc, std::int64_t row_phase, std::int64_t col_phase) {
  const std::int64_t chunks = (cols + 7) / 8;
  const std::int64_t scale_cols = (col_phase + cols + bc - 1) / bc;
  for (std::int64_t i = std::int64_t(blockIdx.x) * kBlock + threadIdx.x; i < rows * chunks;
       i += std::int64_t(gridDim.x) * kBlock) {
    const std::int64_t r = i / chunks, c0 = (i % chunks) * 8;
    const float* srow = scale_inv + ((r + row_phase) / br) * scale_cols;
    const std::uint8_t* in = codes + r * cols;
    std::uint16_t* out = dst + r * cols;
    for (std::int64_t c = c0; c < c0 + 8 && c < cols; ++c) out[c] = fp8_block_element(in[c], srow[(c + col_phase) / bc]);
  }
}

// One thread per word of 8 nibbles.
__global__ void __launch_bounds__(kBlock)
    int4_group_kernel(std::uint16_t* __restrict__ dst, const std::uint32_t* __restrict__ words,
                      const void* __restrict__ scales, ScaleType st, std::int64_t rows, std::int64_t cols,
                      std::int64_t group) {
  const std::int64_t row_words = (cols + 7) / 8;
  const std::int64_t scale_cols = (cols + group - 1) / group;
  for (std::int64_t i = std::int64_t(blockIdx.x) * kBlock + threadIdx.x; i < rows * row_words;
       i += std::int64_t(gridDim.x) * kBlock) {
    const std::int64_t r = i / row_words, c0 = (i % row_words) * 8;
    const std::uint32_t w = words[i];
    std::uint16_t* out = dst + r * cols;
    for (int k = 0; k < 8 && c0 + k < cols; ++k) {
      const std::int64_t c = c0 + k;
      const float s = scale_value(scales, r * scale_cols + c / group, st);
      out[c] = int4_group_element((w >> (4 * k)) & 0xfu, s, st);
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

void dequantize_fp8_block(__nv_bfloat16* dst, const std::uint8_t* codes, const float* scale_inv, std::int64_t rows,
                          std::int64_t cols, std::int64_t block_rows, std::int64_t block_cols, std::int64_t row_phase,
                          std::int64_t col_phase, cudaStream_t stream) {
  LT_CHECK(rows >= 0 && cols >= 0 && block_rows > 0 && block_cols > 0 && row_phase >= 0 && row_phase < block_rows &&
               col_phase >= 0 && col_phase < block_cols,
           "dequantize_fp8_block: bad shape rows=", rows, " cols=", cols, " block [", block_rows, ", ", block_cols,
           "] phase (", row_phase, ", ", col_phase, ")");
  LT_CHECK(dst != nullptr && codes != nullptr && scale_inv != nullptr, "dequantize_fp8_block: null pointer argument");
  if (rows == 0 || cols == 0) return;
  launch<fp8_block_kernel>(Grid{grid_for(rows * ((cols + 7) / 8)), kBlock, 0, stream},
      reinterpret_cast<std::uint16_t*>(dst), codes, scale_inv, rows, cols, block_rows, block_cols, row_phase,
      col_phase);
  LT_CUDA_CHECK_LAUNCH();
}

void dequantize_int4_group(__nv_bfloat16* dst, const std::uint32_t* words, const void* scales, ScaleType scale_type,
                           std::int64_t rows, std::int64_t cols, std::int64_t group, cudaStream_t stream) {
  LT_CHECK(rows >= 0 && cols >= 0 && group > 0, "dequantize_int4_group: bad shape rows=", rows, " cols=", cols,
           " group=", group);
  LT_CHECK(scale_type == ScaleType::BF16 || scale_type == ScaleType::F16 || scale_type == ScaleType::F32,
           "dequantize_int4_group: unknown scale type");
  LT_CHECK(dst != nullptr && words != nullptr && scales != nullptr, "dequantize_int4_group: null pointer argument");
  if (rows == 0 || cols == 0) return;
  launch<int4_group_kernel>(Grid{grid_for(rows * ((cols + 7) / 8)), kBlock, 0, stream},
      reinterpret_cast<std::uint16_t*>(dst), words, scales, scale_type, rows, cols, group);
  LT_CUDA_CHECK_LAUNCH();
}

void fill_random_fp8(std::uint8_t* codes, std::int64_t n, std::uint64_t seed, cudaStream_t stream) {
  LT_CHECK(n >= 0 && (codes != nullptr || n == 0), "fill_random_fp8: bad arguments");
  if (n == 0) return;
  launch<fill_fp8_kernel>(Grid{grid_for(n), kBlock, 0, stream}, codes, n, seed);
  LT_CUDA_CHECK_LAUNCH();
}

void fill_random_int4(std::uint32_t* words, std::int64_t n, std::uint64_t seed, cudaStream_t stream) {
  LT_CHECK(n >= 0 && (words != nullptr || n == 0), "fill_random_int4: bad arguments");
  if (n == 0) return;
  launch<fill_int4_kernel>(Grid{grid_for(n), kBlock, 0, stream}, words, n, seed);
  LT_CUDA_CHECK_LAUNCH();
}

void fill_uniform_f32(float* x, std::int64_t n, std::uint64_t seed, float offset, float scale, cudaStream_t stream) {
  LT_CHECK(n >= 0 && (x != nullptr || n == 0), "fill_uniform_f32: bad arguments");
  if (n == 0) return;
  launch<fill_f32_kernel>(Grid{grid_for(n), kBlock, 0, stream}, x, n, seed, offset, scale);
  LT_CUDA_CHECK_LAUNCH();
}

}  // namespace layertap::kernels
