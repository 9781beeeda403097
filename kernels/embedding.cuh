// Token embedding lookup for a packed batch, bf16. Usable from host C++ (g++) and from .cu files.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace layertap::kernels {

// out[t, :] = table[ids[t], :] for t < T, times `scale` (rounded to bf16) when it is not 1 (Gemma's
// scaled embeddings: sqrt(hidden)).
//   out          (T, H)  bf16, written
//   ids          (T)     int32 token ids
//   table        (V, H)  bf16
//   bad_position (1)     int32: an id outside [0, V) writes a zero row and lowers *bad_position to
//                        its t (atomicMin). Initialise it to a value >= T before the launch and read
//                        it once per batch: *bad_position < T names the first bad token.
// Launches on `stream`; throws layertap::Error on bad arguments or a failed launch.
void embedding_lookup(__nv_bfloat16* out, const std::int32_t* ids, const __nv_bfloat16* table,
                      std::int64_t T, std::int64_t H, std::int64_t V, std::int32_t* bad_position,
                      cudaStream_t stream, float scale = 1.0f);

}  // namespace layertap::kernels
