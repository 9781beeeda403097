// Seeded uniform bf16 fill (see random_fill.cuh): a grid-stride loop over a counter-based hash.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_check.hpp"
#include "launch.cuh"
#include "random_fill.cuh"

namespace layertap::kernels {
namespace {

// ----------------------------------------------------------------------------------------------
// kernels

constexpr int kBlock = 256;

// SplitMix64's output function of (seed, i); top 24 bits -> [-1, 1) exactly representable.
__host__ __device__ float hash_uniform(std::uint64_t seed, std::uint64_t i) {
  std::uint64_t z = seed + (i + 1) * 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  return static_cast<float>(static_cast<std::int32_t>(z >> 40) - (1 << 23)) * (1.0f / float(1 << 23));
}

__global__ void __launch_bounds__(kBlock)
    fill_uniform_kernel(__nv_bfloat16* __restrict__ x, std::int64_t n, std::uint64_t seed, float offset,
                        float scale) {
  const std::int64_t stride = std::int64_t(gridDim.x) * kBlock;
  for (std::int64_t i = std::int64_t(blockIdx.x) * kBlock + threadIdx.x; i < n; i += stride) {
    // One fused multiply-add, so that the host (std::fma) reproduces every value bit for bit.
    x[i] = __float2bfloat16_rn(__fmaf_rn(scale, hash_uniform(seed, static_cast<std::uint64_t>(i)), offset));
  }
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// launchers

void fill_uniform_bf16(__nv_bfloat16* x, std::int64_t n, std::uint64_t seed, float offset, float scale,
                       cudaStream_t stream) {
  LT_CHECK(n >= 0, "fill_uniform_bf16: negative count ", n);
  LT_CHECK(x != nullptr || n == 0, "fill_uniform_bf16: null pointer");
  if (n == 0) return;
  constexpr std::int64_t kMaxGrid = 1 << 16;  // grid-stride beyond 16M elements
  const std::int64_t blocks = (n + kBlock - 1) / kBlock;
  // Writes n bf16, reads nothing; ~40 lane instructions per element (SplitMix64's three 64-bit
  // multiplies and shifts, conversion, FMA, rounding, store, loop).
  const Work work{0, sizeof(__nv_bfloat16) * double(n), 0, 40 * double(n)};
  launch<fill_uniform_kernel>(
      Grid{static_cast<unsigned>(blocks < kMaxGrid ? blocks : kMaxGrid), kBlock, 0, stream, work}, x, n, seed, offset,
      scale);
  LT_CUDA_CHECK_LAUNCH();
}

float uniform_from_hash(std::uint64_t seed, std::int64_t i) {
  return hash_uniform(seed, static_cast<std::uint64_t>(i));
}

}  // namespace layertap::kernels
