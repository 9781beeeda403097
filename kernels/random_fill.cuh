// Seeded pseudo-random bf16 fill on the device (synthetic weights for the benchmark and tests:
// an 8B-parameter model is never generated on the host). Usable from host C++ and .cu files.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace layertap::kernels {

// x[i] = bf16(fma(scale, u_i, offset)) for i < n, u_i uniform in [-1, 1), a pure function of
// (seed, i) (a SplitMix64 hash): the same seed gives the same values on every device and launch.
// Launches on `stream`; throws layertap::Error on bad arguments or a failed launch.
void fill_uniform_bf16(__nv_bfloat16* x, std::int64_t n, std::uint64_t seed, float offset, float scale,
                       cudaStream_t stream);

// The u_i above, on the host (for tests).
float uniform_from_hash(std::uint64_t seed, std::int64_t i);

}  // namespace layertap::kernels
