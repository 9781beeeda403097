// What the CUDA backend will take of a GPU, computed before it allocates anything, and the check
// that it fits (a clear error with the numbers instead of an out-of-memory failure mid-run).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_options.hpp"
#include "backend/cuda/local_shape.hpp"

namespace layertap::cuda {

// Device memory left unclaimed for cuBLASLt's workspace, the kernels and the context's growth. NCCL's
// buffers are not in it: NcclComm connects before free memory is measured (comm/nccl_comm.hpp).
inline constexpr std::size_t kDeviceHeadroomBytes = std::size_t(768) << 20;

struct MemoryPlan {
  std::size_t weight_bytes = 0;     // this rank's weights: bf16, and packed ones as stored
  std::size_t packed_bytes = 0;     // of which packed (FP8 blocks, INT4 groups, with their scales)
  std::size_t scratch_bytes = 0;    // dequantization scratch: layer part + expert slots
  std::int64_t scratch_layer = -1;  // the layer whose packed weights but its routed experts are the largest
  std::size_t expert_scratch_bytes = 0;  // one packed routed expert expanded (0: none packed)
  std::int64_t expert_group = 0;         // experts expanded at once
  bool experts_grouped = false;          // routed experts read as stored by the grouped GEMM: no expert slots
  std::size_t workspace_bytes = 0;  // activations, capture snapshots, cuBLASLt workspace
  std::size_t capture_bytes = 0;    // of which capture snapshots (TP rank 0 only)
  std::size_t pinned_bytes = 0;     // page-locked host memory (capture targets, batch staging)
  std::size_t per_token_bytes = 0;  // workspace growth per token of max_batch_tokens
  std::size_t kept_bytes = 0;       // of the workspace, what chunked prefill keeps for the longest sample
  std::size_t per_kept_bytes = 0;   // its growth per kept position (all layers)
};

MemoryPlan plan_memory(const LocalShape& shape, const CudaBackendOptions& options);

// `shape` with its routed experts' path decided (options.experts): experts_grouped where the
// grouped GEMM reads them as stored (ExpertKernel::Auto, Grouped; Grouped throws naming why not),
// else expert_group: as many packed routed experts as options.expert_scratch_bytes holds (at least
// one, at most a layer's), 0 (all) when no routed expert is packed.
LocalShape with_expert_path(LocalShape shape, const CudaBackendOptions& options);

// Device bytes the plan needs (weights + scratch + workspace + headroom), and the largest
// max_batch_tokens that fits in `free_bytes` (-1: not even the weights fit).
std::size_t device_bytes_needed(const MemoryPlan& plan);
std::int64_t max_tokens_that_fit(const MemoryPlan& plan, std::size_t free_bytes, const CudaBackendOptions& options);
// The longest sample that fits in `free_bytes` beside batches of max_batch_tokens: longer than a
// batch, it runs in chunks and its earlier chunks' keys and values are kept (-1: not even a batch
// of max_batch_tokens fits).
std::int64_t max_sample_that_fits(const MemoryPlan& plan, std::size_t free_bytes, const CudaBackendOptions& options);

// The device plan by part, one line per part (resident weights by stored form, dequantization
// scratch, workspace per token and in all, capture buffers, kept keys and values of the longest
// sample, headroom), the longest sample that would fit beside the largest batch, and whether it fits in
// `free_bytes`: what `extract --dry-run --backend cuda` prints per rank.
std::string describe_device_plan(const MemoryPlan& plan, const LocalShape& shape, std::size_t free_bytes,
                                 const CudaBackendOptions& options);

// Throws layertap::Error when weights + dequantization scratch + workspace + headroom exceed
// `free_bytes`, naming each term in GiB, the largest max_batch_tokens that would fit, and what to
// lower.
void check_fits(const MemoryPlan& plan, std::size_t free_bytes, const std::string& device,
                const CudaBackendOptions& options);

}  // namespace layertap::cuda
