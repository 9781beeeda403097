// Every buffer a forward pass uses, allocated once at construction for the largest batch
// (CudaBackendOptions::max_batch_tokens): the forward loop never allocates device memory.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/arena.hpp"
#include "backend/cuda/cuda_resources.hpp"
#include "backend/cuda/local_shape.hpp"

namespace layertap::cuda {

class Workspace {
 public:
  // Device bytes for batches of up to `max_tokens` tokens and `max_points` distinct capture points.
  static std::size_t device_bytes(const LocalShape& shape, std::int64_t max_tokens, std::int64_t max_points);
  // Pinned host bytes: batch metadata staging and the capture buffers.
  static std::size_t pinned_bytes(const LocalShape& shape, std::int64_t max_tokens, std::int64_t max_points);
  // int32 values of the per-batch metadata: ids (T) | pos (T) | flash tiles (2 * max tiles).
  static std::int64_t meta_ints(std::int64_t max_tokens);

  Workspace(const LocalShape& shape, std::int64_t max_tokens, std::int64_t max_points);

  // Device (Tm = max_tokens, P = max_points, I = this rank's intermediate size):
  __nv_bfloat16* x = nullptr;          // (Tm, H) residual stream
  __nv_bfloat16* h = nullptr;          // (Tm, H) normed input of a sub-layer; the final norm's output
  __nv_bfloat16* delta = nullptr;      // (Tm, H) output of o_proj / down_proj (all-reduced)
  __nv_bfloat16* qkv = nullptr;        // (Tm, (heads + 2 kv_heads) * hd)
  __nv_bfloat16* ctx = nullptr;        // (Tm, heads * hd) attention output
  __nv_bfloat16* gate_up = nullptr;    // (Tm, 2I)
  __nv_bfloat16* act = nullptr;        // (Tm, I)
  __nv_bfloat16* snapshots = nullptr;  // (P, Tm, H) copies of captured states the next layers overwrite
  std::int32_t* meta = nullptr;        // (meta_ints) this batch's ids | pos | tiles, packed from the front
  std::int32_t* bad_token = nullptr;   // (1) first batch position with an id outside the vocabulary
  float* inv_freq = nullptr;           // (hd/2) RoPE frequencies
  std::byte* gemm = nullptr;           // (Gemm::kWorkspaceBytes) cuBLASLt workspace
  // Pinned host:
  std::int32_t* host_meta = nullptr;      // (meta_ints) staging for one host-to-device copy
  std::int32_t* host_bad_token = nullptr; // (1)
  std::uint16_t* host_states = nullptr;   // (P, Tm, H) bf16 bits, targets of the capture copies

 private:
  DeviceMemory device_;
  PinnedMemory pinned_;
};

}  // namespace layertap::cuda
