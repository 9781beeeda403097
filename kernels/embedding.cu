// Token embedding lookup (see embedding.cuh): one block per token, 16-byte copies when H % 8 == 0.
#include <climits>
#include <cstdint>
#include <type_traits>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_check.hpp"
#include "launch.cuh"
#include "embedding.cuh"

namespace layertap::kernels {
namespace {

// ----------------------------------------------------------------------------------------------
// kernels

constexpr int kBlock = 128;

// VEC: bf16 elements per access (8 = one 16-byte uint4, 1 = scalar); H % VEC == 0.
template <int VEC>
__global__ void __launch_bounds__(kBlock)
    embedding_kernel(__nv_bfloat16* __restrict__ out,          // (T, H)
                     const std::int32_t* __restrict__ ids,     // (T)
                     const __nv_bfloat16* __restrict__ table,  // (V, H)
                     std::int64_t T, std::int64_t H, std::int64_t V,
                     std::int32_t* __restrict__ bad_position, float scale) {
  using Vec = typename std::conditional<VEC == 8, uint4, __nv_bfloat16>::type;
  for (std::int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    const std::int64_t id = ids[t];
    const bool ok = id >= 0 && id < V;
    if (!ok && threadIdx.x == 0) atomicMin(bad_position, static_cast<std::int32_t>(t));
    Vec* dst = reinterpret_cast<Vec*>(out + t * H);
    const Vec* src = reinterpret_cast<const Vec*>(table + (ok ? id : 0) * H);
    for (std::int64_t i = threadIdx.x; i < H / VEC; i += kBlock) {
      if (ok && scale == 1.0f) {
        dst[i] = src[i];
      } else if (ok) {  // bf16(x * scale) per element
        Vec v = src[i];
        auto* e = reinterpret_cast<__nv_bfloat16*>(&v);
        for (int k = 0; k < VEC; ++k) e[k] = __float2bfloat16_rn(__bfloat162float(e[k]) * scale);
        dst[i] = v;
      } else {
        dst[i] = Vec{};  // zero bits: +0.0 in bf16
      }
    }
  }
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// launchers

void embedding_lookup(__nv_bfloat16* out, const std::int32_t* ids, const __nv_bfloat16* table,
                      std::int64_t T, std::int64_t H, std::int64_t V, std::int32_t* bad_position,
                      cudaStream_t stream, float scale) {
  LT_CHECK(T >= 0 && T < INT_MAX && H > 0 && V > 0, "embedding_lookup: bad shape T=", T, " H=", H, " V=", V);
  LT_CHECK(out != nullptr && ids != nullptr && table != nullptr && bad_position != nullptr,
           "embedding_lookup: null pointer argument");
  if (T == 0) return;
  constexpr std::int64_t kMaxGrid = 1 << 20;
  const unsigned grid = static_cast<unsigned>(T < kMaxGrid ? T : kMaxGrid);
  const bool aligned = H % 8 == 0 && reinterpret_cast<std::uintptr_t>(out) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(table) % 16 == 0;
  // Reads ids and one table row per token, writes out (T, H); ~5 lane instructions per access of
  // 8 or 1 elements (load, store, index, compare, branch).
  const double e = sizeof(__nv_bfloat16), TH = double(T) * double(H);
  const Work work{4.0 * double(T) + e * TH, e * TH, 0, 5 * TH / (aligned ? 8 : 1)};
  if (aligned) {
    launch<embedding_kernel<8>>(Grid{grid, kBlock, 0, stream, work}, out, ids, table, T, H, V, bad_position,
                                      scale);
  } else {
    launch<embedding_kernel<1>>(Grid{grid, kBlock, 0, stream, work}, out, ids, table, T, H, V, bad_position,
                                      scale);
  }
  LT_CUDA_CHECK_LAUNCH();
}

}  // namespace layertap::kernels
