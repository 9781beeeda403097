// Gated activations (see swiglu.cuh): one block per token row (grid-strided), 16-byte accesses
// when I % 8 == 0.
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

__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// One output; `limit` is r(f.limit), the bf16 bound torch.clamp applies.
__device__ __nv_bfloat16 activate(__nv_bfloat16 gate, __nv_bfloat16 up, const GateActivation& f, float limit) {
  const float g = __bfloat162float(gate), u = __bfloat162float(up);
  if (f.kind == GateActivation::ClampedSwiglu) {
    const float gc = g > limit ? limit : g;                                   // NaN stays NaN
    const float uc = u < -limit ? -limit : (u > limit ? limit : u);
    const float sig = round_bf16(1.0f / (1.0f + expf(-round_bf16(gc * f.alpha))));
    return __float2bfloat16_rn(round_bf16(uc + 1.0f) * round_bf16(gc * sig));
  }
  // PyTorch's gelu(approximate="tanh") constants: sqrt(2/pi) and 0.044715.
  const float a = f.kind == GateActivation::GeluTanh
                      ? 0.5f * g * (1.0f + tanhf(0.7978845608028654f * (g + 0.044715f * g * g * g)))
                      : g / (1.0f + expf(-g));
  return __float2bfloat16_rn(round_bf16(a) * u);
}

// VEC: outputs per access (8 = one uint4 of each of gate and up, or two uint4 of interleaved
// pairs; 1 = scalar); I % VEC == 0.
template <int VEC>
__global__ void __launch_bounds__(kBlock)
    swiglu_kernel(__nv_bfloat16* __restrict__ act,            // (T, I)
                  const __nv_bfloat16* __restrict__ gate_up,  // (T, 2I)
                  std::int64_t T, std::int64_t I, const std::int32_t* __restrict__ rows, GateActivation f) {
  if (rows != nullptr) T = *rows < T ? (*rows > 0 ? *rows : 0) : T;
  const float limit = round_bf16(f.limit);
  // Gate i and up i of a row at gate_up + row * 2I + gi(i) and + ui(i).
  const std::int64_t gate_step = f.interleaved ? 2 : 1, up_at = f.interleaved ? 1 : I;
  for (std::int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    const __nv_bfloat16* in = gate_up + t * 2 * I;
    __nv_bfloat16* out = act + t * I;
    for (std::int64_t i = std::int64_t(threadIdx.x) * VEC; i < I; i += std::int64_t(kBlock) * VEC) {
      if constexpr (VEC == 8) {
        uint4 gv[2], uv[2];  // the 8 gates and ups (split: gv[0], uv[0]; interleaved: 16 values in gv)
        if (f.interleaved) {
          gv[0] = *reinterpret_cast<const uint4*>(in + 2 * i);
          gv[1] = *reinterpret_cast<const uint4*>(in + 2 * i + 8);
        } else {
          gv[0] = *reinterpret_cast<const uint4*>(in + i);
          uv[0] = *reinterpret_cast<const uint4*>(in + I + i);
        }
        const auto* g = reinterpret_cast<const __nv_bfloat16*>(gv);
        const auto* u = f.interleaved ? g + 1 : reinterpret_cast<const __nv_bfloat16*>(uv);
        uint4 ov;
        auto* o = reinterpret_cast<__nv_bfloat16*>(&ov);
#pragma unroll
        for (int k = 0; k < 8; ++k) o[k] = activate(g[k * gate_step], u[k * gate_step], f, limit);
        *reinterpret_cast<uint4*>(out + i) = ov;
      } else {
        out[i] = activate(in[i * gate_step], in[i * gate_step + up_at], f, limit);
      }
    }
  }
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// launchers

void swiglu(__nv_bfloat16* act, const __nv_bfloat16* gate_up, std::int64_t T, std::int64_t I,
            const GateActivation& activation, cudaStream_t stream, const std::int32_t* rows) {
  LT_CHECK(T >= 0 && I > 0, "swiglu: bad shape T=", T, " I=", I);
  LT_CHECK(act != nullptr && gate_up != nullptr, "swiglu: null pointer argument");
  LT_CHECK(activation.kind == GateActivation::Silu || activation.kind == GateActivation::GeluTanh ||
               activation.kind == GateActivation::ClampedSwiglu,
           "swiglu: unknown activation kind ", std::int32_t(activation.kind));
  if (T == 0) return;
  constexpr std::int64_t kMaxGrid = 1 << 20;
  const unsigned grid = static_cast<unsigned>(T < kMaxGrid ? T : kMaxGrid);
  const bool aligned = I % 8 == 0 && reinterpret_cast<std::uintptr_t>(act) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(gate_up) % 16 == 0;
  // Reads gate_up (T, 2I), writes act (T, I); ~25 lane instructions per output (expf, IEEE
  // division, two bf16 roundings, loads and stores), ~35 for the clamped SwiGLU (two clamps, five
  // roundings). With `rows`, T is the bound the host knows.
  const double e = sizeof(__nv_bfloat16), TI = double(T) * double(I);
  const double ops = activation.kind == GateActivation::ClampedSwiglu ? 35 : 25;
  const Grid g{grid, kBlock, 0, stream, Work{2 * e * TI, e * TI, 0, ops * TI}};
  if (aligned) {
    launch<swiglu_kernel<8>>(g, act, gate_up, T, I, rows, activation);
  } else {
    launch<swiglu_kernel<1>>(g, act, gate_up, T, I, rows, activation);
  }
  LT_CUDA_CHECK_LAUNCH();
}

}  // namespace layertap::kernels
