// SwiGLU (see swiglu.cuh): one block per token row (grid-strided), 16-byte accesses when I % 8 == 0.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_check.hpp"
#include "launch.cuh"
#include "swiglu.cuh"

namespace layertap::kernels {
namespace {

// ----------------------------------------------------------------------------------------------
// kernels

constexpr int kBlock = 256;

__device__ __nv_bfloat16 swiglu_one(__nv_bfloat16 gate, __nv_bfloat16 up, bool gelu_tanh) {
  const float g = __bfloat162float(gate);
  // PyTorch's gelu(approximate="tanh") constants: sqrt(2/pi) and 0.044715.
  const float a = gelu_tanh ? 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)))
                            : g / (1.0f + expf(-g));
  return __float2bfloat16_rn(__bfloat162float(__float2bfloat16_rn(a)) * __bfloat162float(up));
}

// VEC: bf16 elements per access (8 = one uint4, 1 = scalar); I % VEC == 0.
template <int VEC>
__global__ void __launch_bounds__(kBlock)
    swiglu_kernel(__nv_bfloat16* __restrict__ act,            // (T, I)
                  const __nv_bfloat16* __restrict__ gate_up,  // (T, 2I)
                  std::int64_t T, std::int64_t I, const std::int32_t* __restrict__ rows, bool gelu_tanh) {
  if (rows != nullptr) T = *rows < T ? (*rows > 0 ? *rows : 0) : T;
  for (std::int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    const __nv_bfloat16* gate = gate_up + t * 2 * I;
    const __nv_bfloat16* up = gate + I;
    __nv_bfloat16* out = act + t * I;
    for (std::int64_t i = std::int64_t(threadIdx.x) * VEC; i < I; i += std::int64_t(kBlock) * VEC) {
      if constexpr (VEC == 8) {
        const uint4 gv = *reinterpret_cast<const uint4*>(gate + i);
        const uint4 uv = *reinterpret_cast<const uint4*>(up + i);
        const auto* g = reinterpret_cast<const __nv_bfloat16*>(&gv);
        const auto* u = reinterpret_cast<const __nv_bfloat16*>(&uv);
        uint4 ov;
        auto* o = reinterpret_cast<__nv_bfloat16*>(&ov);
#pragma unroll
        for (int k = 0; k < 8; ++k) o[k] = swiglu_one(g[k], u[k], gelu_tanh);
        *reinterpret_cast<uint4*>(out + i) = ov;
      } else {
        out[i] = swiglu_one(gate[i], up[i], gelu_tanh);
      }
    }
  }
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// launchers

void swiglu(__nv_bfloat16* act, const __nv_bfloat16* gate_up, std::int64_t T, std::int64_t I,
            cudaStream_t stream, const std::int32_t* rows, bool gelu_tanh) {
  LT_CHECK(T >= 0 && I > 0, "swiglu: bad shape T=", T, " I=", I);
  LT_CHECK(act != nullptr && gate_up != nullptr, "swiglu: null pointer argument");
  if (T == 0) return;
  constexpr std::int64_t kMaxGrid = 1 << 20;
  const unsigned grid = static_cast<unsigned>(T < kMaxGrid ? T : kMaxGrid);
  const bool aligned = I % 8 == 0 && reinterpret_cast<std::uintptr_t>(act) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(gate_up) % 16 == 0;
  // Reads gate_up (T, 2I), writes act (T, I); ~25 lane instructions per output (expf, IEEE
  // division, two bf16 roundings, loads and stores). With `rows`, T is the bound the host knows.
  const double e = sizeof(__nv_bfloat16), TI = double(T) * double(I);
  const Grid g{grid, kBlock, 0, stream, Work{2 * e * TI, e * TI, 0, 25 * TI}};
  if (aligned) {
    launch<swiglu_kernel<8>>(g, act, gate_up, T, I, rows, gelu_tanh);
  } else {
    launch<swiglu_kernel<1>>(g, act, gate_up, T, I, rows, gelu_tanh);
  }
  LT_CUDA_CHECK_LAUNCH();
}

}  // namespace layertap::kernels
