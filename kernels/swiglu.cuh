// SwiGLU activation of the fused gate/up projection, bf16. Usable from host C++ and .cu files.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace layertap::kernels {

// For each token t < T and i < I, with g = gate_up[t, i] and u = gate_up[t, I + i] widened to float32:
//   act[t, i] = bf16(bf16(g / (1 + exp(-g))) * u)                                 (SwiGLU)
//   act[t, i] = bf16(bf16(0.5 g (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))) * u)  (gelu_tanh: GeGLU)
// i.e. Hugging Face's act_fn(gate) * up with a bf16 tensor between the two ops.
//   act      (T, I)      bf16, written
//   gate_up  (T, 2 * I)  bf16: gate in columns [0, I), up in [I, 2I)
//   rows     device int32, or null: when set, only the first min(*rows, T) rows are computed (a MoE
//            layer's routed rows, counted on the device; T is then the host's bound on them)
// Launches on `stream`; throws layertap::Error on bad arguments or a failed launch.
void swiglu(__nv_bfloat16* act, const __nv_bfloat16* gate_up, std::int64_t T, std::int64_t I,
            cudaStream_t stream, const std::int32_t* rows = nullptr, bool gelu_tanh = false);

}  // namespace layertap::kernels
