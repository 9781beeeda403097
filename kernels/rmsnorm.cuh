// Fused residual add + RMSNorm over bf16 rows (the step between two decoder sub-layers).
// Usable from host C++ (g++) as well as from .cu files.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace layertap::kernels {

// For each row n < N (C columns, row-major, contiguous):
//   residual[n] = bf16(residual[n] + x[n])                 skipped when x == nullptr
//   out[n]      = bf16((weight_offset + weight) * bf16(r * rsqrt(mean(r^2) + eps)))
// where r is the updated bf16 residual widened to float32 and all arithmetic is float32:
// Hugging Face's LlamaRMSNorm (and Qwen2/Qwen3/Mistral), bit for bit up to the float32
// summation order in mean(r^2). Gemma's norms hold w and apply (1 + w): weight_offset 1.
//
//   out      (N, C)  bf16, written
//   residual (N, C)  bf16, read and written (the residual stream the model keeps)
//   x        (N, C)  bf16, read; may be null; may alias `out` (not `residual`)
//   weight   (C)     bf16
// Launches on `stream`; throws layertap::Error on bad arguments or a failed launch.
void fused_residual_rmsnorm(__nv_bfloat16* out, __nv_bfloat16* residual, const __nv_bfloat16* x,
                            const __nv_bfloat16* weight, float eps, std::int64_t N, std::int64_t C,
                            cudaStream_t stream, float weight_offset = 0.0f);

}  // namespace layertap::kernels
