// Every buffer a forward pass uses, allocated once at construction for the largest batch
// (CudaBackendOptions::max_batch_tokens): the forward loop never allocates device memory.
#pragma once
#include <cuda_bf16.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/arena.hpp"
#include "backend/cuda/cuda_resources.hpp"
#include "backend/cuda/local_shape.hpp"
#include "kernels/grouped_gemm.cuh"

namespace layertap::cuda {

// The buffers: pointers into the Workspace's two allocations.
struct WorkspaceBuffers {
  // Device (Tm = max_tokens, P = max_points, I = the widest dense or shared-expert intermediate
  // slice, R = shape.max_routed_rows(Tm); buffers of parts the model lacks are null):
  __nv_bfloat16* x = nullptr;          // (Tm, H) residual stream
  __nv_bfloat16* h = nullptr;          // (Tm, H) normed input of a sub-layer; the final norm's output
  __nv_bfloat16* delta = nullptr;      // (Tm, H) output of o_proj / the FFN (all-reduced)
  __nv_bfloat16* qkv = nullptr;        // GQA (Tm, (heads + 2 kv_heads) * hd)
  __nv_bfloat16* ctx = nullptr;        // (Tm, heads * hd) GQA / (Tm, heads * v) MLA attention output
  // MLA (nh = this rank's heads, qk = nope + rope)
  __nv_bfloat16* mla_q = nullptr;       // (Tm, nh * qk) queries
  __nv_bfloat16* mla_qa = nullptr;      // (Tm, q_lora) q_a_proj output, normed in place
  __nv_bfloat16* mla_ckv = nullptr;     // (Tm, kv_lora + rope) kv_a_proj_with_mqa output
  // The key side spans K + Tm rows (K = max_kept): the kept rows of the sample in flight, then the batch's.
  __nv_bfloat16* mla_latent = nullptr;  // (K + Tm, kv_lora) normed latent
  __nv_bfloat16* mla_kv = nullptr;      // (K + Tm, nh * (nope + v)) kv_b_proj output
  __nv_bfloat16* mla_k = nullptr;       // (K + Tm, nh * qk) keys
  __nv_bfloat16* mla_v = nullptr;       // (K + Tm, nh * v) values
  // Chunked prefill (K = max_kept positions, L layers; null when K = 0):
  __nv_bfloat16* kept = nullptr;  // (L, K * kept_row) the sample in flight's rows per layer: GQA (K, 2 hkv hd)
                                  // K | V of the local kv heads after RoPE; MLA (K, kv_lora) normed latents
                                  // then (K, rope) rope keys
  __nv_bfloat16* keys = nullptr;  // GQA (K + Tm, 2 hkv hd): the kept rows, then the batch's K | V
  // Dense FFN and shared experts
  __nv_bfloat16* gate_up = nullptr;    // (Tm, 2I)
  __nv_bfloat16* act = nullptr;        // (Tm, I)
  // MoE (E experts, k per token, n = local experts, Ie = local expert intermediate size)
  float* logits = nullptr;              // (Tm, E) router logits, then scores
  float* choice = nullptr;              // (Tm, E) routing scratch
  std::int32_t* route_experts = nullptr;  // (Tm, k)
  float* route_weights = nullptr;       // (Tm, k)
  std::int32_t* slot = nullptr;         // (Tm, k) row of each (token, choice) pair, -1 off this rank
  std::int32_t* perm_token = nullptr;   // (R) token of each permuted row
  std::int32_t* counts = nullptr;       // (n) rows per local expert
  std::int32_t* offsets = nullptr;      // (n + 1) first row of each local expert
  __nv_bfloat16* x_perm = nullptr;      // (R, H) tokens grouped by expert
  __nv_bfloat16* gu_perm = nullptr;     // (R, 2 Ie)
  __nv_bfloat16* act_perm = nullptr;    // (R, Ie)
  __nv_bfloat16* y_perm = nullptr;      // (R, H) expert outputs
  __nv_bfloat16* shared_out = nullptr;  // (Tm, H) shared experts' output
  float* logit_offset = nullptr;        // (E) synthetic routing skew, zero unless set
  // (M, n, kGroupedPartsPerExpert) the grouped GEMM's tables of the experts' stored parts
  // (grouped_experts.hpp), when the shape's experts are grouped
  kernels::GroupedWeightPart* expert_parts = nullptr;
  // Capture, metadata, tables
  __nv_bfloat16* snapshots = nullptr;  // (P, Tm, H) copies of captured states the next layers overwrite
  std::int32_t* meta = nullptr;        // (meta_ints) this batch's ids | pos | tiles, packed from the front
  std::int32_t* bad_token = nullptr;   // (1) first batch position with an id outside the vocabulary
  float* inv_freq = nullptr;           // (L, LocalShape::rope_freqs()) each layer's RoPE frequencies
  std::byte* gemm = nullptr;           // (Gemm::kWorkspaceBytes) cuBLASLt workspace
  // Pinned host:
  std::int32_t* host_meta = nullptr;      // (meta_ints) staging for one host-to-device copy
  std::int32_t* host_bad_token = nullptr; // (1)
  std::int32_t* host_counts = nullptr;    // (M, n) rows per local expert of each of the M MoE layers
  std::uint16_t* host_states = nullptr;   // (P, Tm, H) bf16 bits, targets of the capture copies
  std::int32_t* host_routes = nullptr;    // (M, T, k) each MoE layer's choices (capturing rank of a MoE model)
};

// What sizes a workspace.
struct WorkspaceSize {
  std::int64_t max_tokens = 0;  // Tm: the largest batch
  std::int64_t max_points = 0;  // P: distinct capture points (0 on ranks that do not capture)
  std::int64_t max_kept = 0;    // K: positions kept of a sample in flight (chunked prefill; 0: none)
};

class Workspace : public WorkspaceBuffers {
 public:
  // Device bytes of the buffers above.
  static std::size_t device_bytes(const LocalShape& shape, const WorkspaceSize& size);
  // Pinned host bytes: batch metadata staging, MoE expert counts and the capture buffers.
  static std::size_t pinned_bytes(const LocalShape& shape, const WorkspaceSize& size);
  // int32 values of the per-batch metadata: ids (T) | pos (T) | flash tiles (2 * max tiles).
  static std::int64_t meta_ints(std::int64_t max_tokens);
  // bf16 values kept per layer and position of the sample in flight (GQA 2 hkv hd, MLA kv_lora + rope).
  static std::int64_t kept_row(const LocalShape& shape);

  Workspace(const LocalShape& shape, const WorkspaceSize& size);

 private:
  DeviceMemory device_;
  PinnedMemory pinned_;
};

}  // namespace layertap::cuda
