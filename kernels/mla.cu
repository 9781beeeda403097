// MLA steps (see mla.cuh): latent RMSNorm with strides, strided RoPE (interleaved or half-split,
// YaRN attention factor), per-head key/value assembly.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_check.hpp"
#include "launch.cuh"
#include "mla.cuh"
#include "rope_pairs.cuh"

namespace layertap::kernels {
namespace {

// ----------------------------------------------------------------------------------------------
// kernels

constexpr int kBlock = 256;
constexpr int kWarps = kBlock / 32;
constexpr std::int64_t kMaxGrid = 1 << 16;

__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ float block_sum(float v, float* shared) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_sum(v);
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  v = lane < kWarps ? shared[lane] : 0.0f;
  v = warp_sum(v);
  __syncthreads();
  return v;
}

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16_rn(v)); }

// One block per row, grid-strided.
__global__ void __launch_bounds__(kBlock)
    rmsnorm_rows_kernel(__nv_bfloat16* out, std::int64_t out_stride, const __nv_bfloat16* in, std::int64_t in_stride,
                        const __nv_bfloat16* __restrict__ weight, float eps, std::int64_t N, std::int64_t C,
                        float weight_offset) {
  __shared__ float shared[kWarps];
  for (std::int64_t row = blockIdx.x; row < N; row += gridDim.x) {
    const __nv_bfloat16* x = in + row * in_stride;
    __nv_bfloat16* o = out + row * out_stride;
    float ss = 0.0f;
    for (std::int64_t i = threadIdx.x; i < C; i += kBlock) {
      const float v = __bfloat162float(x[i]);
      ss += v * v;
    }
    const float rstd = 1.0f / sqrtf(block_sum(ss, shared) / static_cast<float>(C) + eps);
    // Each thread reads back only its own elements, all read before block_sum's barrier: in-place safe.
    for (std::int64_t i = threadIdx.x; i < C; i += kBlock)
      o[i] = __float2bfloat16_rn((weight_offset + __bfloat162float(weight[i])) * round_bf16(__bfloat162float(x[i]) * rstd));
  }
}

// One warp per (token, head).
__global__ void __launch_bounds__(kBlock)
    rope_strided_kernel(__nv_bfloat16* __restrict__ x, std::int64_t row_stride, std::int64_t head_stride,
                        std::int64_t offset, std::int64_t heads, std::int64_t dim, bool interleaved,
                        const std::int32_t* __restrict__ pos, const float* __restrict__ inv_freq, float af,
                        std::int64_t T) {
  const std::int64_t warp = std::int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (warp >= T * heads) return;
  const std::int64_t t = warp / heads, h = warp % heads;
  rope_warp(x + t * row_stride + h * head_stride + offset, dim, interleaved, static_cast<float>(pos[t]), inv_freq, af);
}

// One block per token (grid-strided), threads over the nh * (qk + vd) outputs.
__global__ void __launch_bounds__(kBlock)
    assemble_kv_kernel(__nv_bfloat16* __restrict__ k, __nv_bfloat16* __restrict__ v,
                       const __nv_bfloat16* __restrict__ kv, const __nv_bfloat16* __restrict__ k_rope,
                       std::int64_t k_rope_stride, std::int64_t T, std::int64_t nh, std::int64_t nope,
                       std::int64_t rd, std::int64_t vd) {
  const std::int64_t qk = nope + rd, kvd = nope + vd;
  for (std::int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    const __nv_bfloat16* src = kv + t * nh * kvd;
    const __nv_bfloat16* rope = k_rope + t * k_rope_stride;
    __nv_bfloat16* kt = k + t * nh * qk;
    __nv_bfloat16* vt = v + t * nh * vd;
    for (std::int64_t i = threadIdx.x; i < nh * qk; i += kBlock) {
      const std::int64_t h = i / qk, d = i % qk;
      kt[i] = d < nope ? src[h * kvd + d] : rope[d - nope];
    }
    for (std::int64_t i = threadIdx.x; i < nh * vd; i += kBlock) {
      const std::int64_t h = i / vd, d = i % vd;
      vt[i] = src[h * kvd + nope + d];
    }
  }
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// launchers

void rmsnorm_rows(__nv_bfloat16* out, std::int64_t out_stride, const __nv_bfloat16* in, std::int64_t in_stride,
                  const __nv_bfloat16* weight, float eps, std::int64_t N, std::int64_t C, cudaStream_t stream,
                  float weight_offset) {
  LT_CHECK(N >= 0 && C > 0 && out_stride >= C && in_stride >= C, "rmsnorm_rows: bad shape N=", N, " C=", C,
           " strides ", out_stride, ", ", in_stride);
  LT_CHECK(out != nullptr && in != nullptr && weight != nullptr, "rmsnorm_rows: null pointer argument");
  LT_CHECK(static_cast<const void*>(out) != static_cast<const void*>(in) || out_stride == in_stride,
           "rmsnorm_rows: in place needs equal strides");
  if (N == 0) return;
  const unsigned grid = static_cast<unsigned>(N < kMaxGrid ? N : kMaxGrid);
  // Reads N rows of C and the weight, writes N rows of C; ~20 lane instructions per element over
  // the two passes (loads, bf16 widen/round, FMA, multiplies, stores, loop).
  const double e = sizeof(__nv_bfloat16), NC = double(N) * double(C);
  const Work work{e * (NC + double(C)), e * NC, 0, 20 * NC};
  launch<rmsnorm_rows_kernel>(Grid{grid, kBlock, 0, stream, work}, out, out_stride, in, in_stride, weight, eps, N, C,
                              weight_offset);
  LT_CUDA_CHECK_LAUNCH();
}

void rope_strided(__nv_bfloat16* x, std::int64_t row_stride, std::int64_t head_stride, std::int64_t offset,
                  std::int64_t heads, std::int64_t dim, bool interleaved, const std::int32_t* pos,
                  const float* inv_freq, float attention_factor, std::int64_t T, cudaStream_t stream) {
  LT_CHECK(T >= 0 && heads > 0 && dim > 0 && dim % 2 == 0 && dim <= kRopeWarpMaxDim && offset >= 0 &&
               head_stride >= 0 && row_stride >= offset + dim,
           "rope_strided: bad shape T=", T, " heads=", heads, " dim=", dim, " (even, at most ", kRopeWarpMaxDim,
           ") offset=", offset, " strides ", row_stride, ", ", head_stride);
  LT_CHECK(x != nullptr && pos != nullptr && inv_freq != nullptr, "rope_strided: null pointer argument");
  if (T == 0) return;
  const std::int64_t blocks = (T * heads + kWarps - 1) / kWarps;
  LT_CHECK(blocks < (std::int64_t(1) << 31), "rope_strided: ", T, " tokens x ", heads, " heads is too many");
  // Reads and writes T * heads vectors of dim in place, reads pos and inv_freq; ~20 lane
  // instructions per element (sincosf per pair, rotation, rounding, loads, stores).
  const double e = sizeof(__nv_bfloat16), n = double(T) * double(heads) * double(dim);
  const Work work{e * n + 4.0 * double(T) + 2.0 * double(dim), e * n, 0, 20 * n};
  launch<rope_strided_kernel>(Grid{static_cast<unsigned>(blocks), kBlock, 0, stream, work},
      x, row_stride, head_stride, offset, heads, dim, interleaved, pos, inv_freq, attention_factor, T);
  LT_CUDA_CHECK_LAUNCH();
}

void mla_assemble_kv(__nv_bfloat16* k, __nv_bfloat16* v, const __nv_bfloat16* kv, const __nv_bfloat16* k_rope,
                     std::int64_t k_rope_stride, std::int64_t T, std::int64_t nh, std::int64_t nope, std::int64_t rd,
                     std::int64_t vd, cudaStream_t stream) {
  LT_CHECK(T >= 0 && nh > 0 && nope >= 0 && rd > 0 && vd > 0 && k_rope_stride >= rd,
           "mla_assemble_kv: bad shape T=", T, " nh=", nh, " nope=", nope, " rd=", rd, " vd=", vd);
  LT_CHECK(k != nullptr && v != nullptr && kv != nullptr && k_rope != nullptr, "mla_assemble_kv: null pointer argument");
  if (T == 0) return;
  const unsigned grid = static_cast<unsigned>(T < kMaxGrid ? T : kMaxGrid);
  // Reads kv (T, nh (nope + vd)) and the shared rope key (T, rd), writes k (T, nh (nope + rd)) and
  // v (T, nh vd); ~30 lane instructions per output (64-bit index division and modulo, select,
  // load, store).
  const double e = sizeof(__nv_bfloat16), Tn = double(T) * double(nh), out = Tn * double(nope + rd + vd);
  const Work work{e * (Tn * double(nope + vd) + double(T) * double(rd)), e * out, 0, 30 * out};
  launch<assemble_kv_kernel>(Grid{grid, kBlock, 0, stream, work}, k, v, kv, k_rope, k_rope_stride, T, nh, nope, rd,
                             vd);
  LT_CUDA_CHECK_LAUNCH();
}

}  // namespace layertap::kernels
