// A dense decoder's weights resident on one GPU in bf16: this tensor-parallel rank's slice, in
// one allocation, with q/k/v fused into one matrix and gate/up into another (one GEMM each).
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cuda/arena.hpp"
#include "backend/cuda/cuda_resources.hpp"
#include "backend/cuda/local_shape.hpp"
#include "model/weights.hpp"

namespace layertap::cuda {

struct DeviceLinear {
  __nv_bfloat16* w = nullptr;  // (out, in), y = x @ w^T
  __nv_bfloat16* b = nullptr;  // (out) or null
  std::int64_t out = 0, in = 0;
};

struct DeviceLayer {
  __nv_bfloat16* input_norm = nullptr;      // (H)
  __nv_bfloat16* post_attn_norm = nullptr;  // (H)
  __nv_bfloat16* q_norm = nullptr;          // (hd) Qwen3, else null
  __nv_bfloat16* k_norm = nullptr;          // (hd) Qwen3, else null
  DeviceLinear qkv;      // ((heads + 2 kv_heads) * hd, H): q rows, then k rows, then v rows
  DeviceLinear o;        // (H, heads * hd)
  DeviceLinear gate_up;  // (2 I, H): gate rows, then up rows (I = this rank's intermediate size)
  DeviceLinear down;     // (H, I)
};

class DeviceWeights {
 public:
  // Device bytes the weights of `shape` take (alignment padding included).
  static std::size_t bytes(const LocalShape& shape);
  // This rank's float32 host slices (load_weights), converted to bf16 once and copied to the
  // current device. Throws naming the tensor when a slice's shape does not match `shape`.
  static DeviceWeights upload(const LocalShape& shape, const ModelWeights& host);
  // Seeded random weights made on the current device (fill_uniform_bf16), enqueued on `stream`:
  // linear weights uniform with variance 1/in, biases +-0.1, norm weights 1 +- 0.1, embedding
  // +-1. Nothing of the size of the model touches the host.
  static DeviceWeights random(const LocalShape& shape, std::uint64_t seed, cudaStream_t stream);

  __nv_bfloat16* embed = nullptr;       // (V, H)
  __nv_bfloat16* final_norm = nullptr;  // (H)
  std::vector<DeviceLayer> layers;      // (L)

 private:
  DeviceWeights() = default;
  // Places every tensor of `shape` in `arena` (counting when the arena has no memory).
  void place(Arena& arena, const LocalShape& shape);
  static DeviceWeights allocate(const LocalShape& shape);

  DeviceMemory memory_;
};

}  // namespace layertap::cuda
