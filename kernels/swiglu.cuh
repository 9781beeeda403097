// Gated activations (SwiGLU, GeGLU, GPT-OSS's clamped SwiGLU) of the fused gate/up projection, bf16.
// Usable from host C++ and .cu files.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace layertap::kernels {

// Which activation swiglu computes, and where gate_up's columns hold gate and up.
struct GateActivation {
  enum Kind : std::int32_t { Silu, GeluTanh, ClampedSwiglu };
  Kind kind = Silu;
  float alpha = 0, limit = 0;  // ClampedSwiglu (GPT-OSS: swiglu_alpha 1.702, swiglu_limit 7)
  // false: gate in columns [0, I), up in [I, 2I); true: (gate_0, up_0, gate_1, up_1, ...), GPT-OSS's
  // stored order.
  bool interleaved = false;
};

// For each token t < T and i < I, with g and u the row's gate i and up i widened to float32, and
// r(x) = bf16(x), Hugging Face's ops on bf16 tensors, each rounding its result:
//   Silu           act[t, i] = r(r(g / (1 + exp(-g))) * u)                                 (SwiGLU)
//   GeluTanh       act[t, i] = r(r(0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))) * u)  (GeGLU)
//   ClampedSwiglu  with L = r(limit) (torch.clamp takes a bf16 tensor's bounds as bf16; clamps
//                  are exact and keep NaN): gc = min(g, L), uc = clamp(u, -L, L),
//                  act[t, i] = r(r(uc + 1) * r(gc * r(1 / (1 + exp(-r(gc * alpha))))))
//                  (transformers' GptOssExperts: glu = gate * sigmoid(gate * alpha); (up + 1) * glu)
//   act      (T, I)      bf16, written
//   gate_up  (T, 2 * I)  bf16, gate and up as activation.interleaved says
//   rows     device int32, or null: when set, only the first min(*rows, T) rows are computed (a MoE
//            layer's routed rows, counted on the device; T is then the host's bound on them)
// Launches on `stream`; throws layertap::Error on bad arguments or a failed launch.
void swiglu(__nv_bfloat16* act, const __nv_bfloat16* gate_up, std::int64_t T, std::int64_t I,
            const GateActivation& activation, cudaStream_t stream, const std::int32_t* rows = nullptr);

}  // namespace layertap::kernels
