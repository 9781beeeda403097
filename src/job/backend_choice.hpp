// Builds this rank's backend for `layertap extract`: the float32 CPU backend, or (in a CUDA
// build) the bf16 CUDA backend on the GPU of this rank's local rank, with NCCL inside the
// tensor-parallel group; and what each holds of the host and the device, checked before any weight
// is read and printed by --dry-run.
#pragma once
#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "comm/mpi_groups.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace layertap::job {

// What a rank is asked to hold, beyond the model: the settings that size its buffers.
struct RankLoad {
  int64_t max_batch_tokens = 0;
  int64_t capture_points = 0;  // of the plan; only the group's writer (TP rank 0) holds capture buffers
  int64_t dataset_bytes = 0;   // this rank's share of the parsed dataset
  double gpu_memory_gib = 0;   // --gpu-memory (0: the device's free memory)
};

// Resolves --backend on every rank alike: "auto" is cuda when every rank sees a GPU (and this
// build has CUDA) and the CUDA backend runs the model (cuda::unsupported_parts is empty), cpu
// otherwise. Throws for "cuda" in a build or on a machine without it, or for such a model, before
// any weight is read. `planning` (--dry-run with --gpu-memory) accepts cuda on a machine without a
// GPU: the plan is host arithmetic.
std::string resolve_backend(const std::string& requested, const ModelConfig& cfg, bool planning);

// Whether this rank sees a GPU (false in a build without CUDA).
bool gpu_visible();

// Every rank, collectively, before any weight is read: the ranks on this node can hold what their
// backend keeps on the host (cpu: the float32 weight slices and a batch's activations; cuda: the
// loader's staging ring, pinned batch and capture buffers and the dataset share); else an error
// with the numbers and what to change, instead of an out-of-memory kill mid-load.
void check_host_memory(const std::string& backend, const ModelConfig& cfg, const TpShard& shard, const RankLoad& load);
// The same check's verdict (collective, the same on every rank): "" when it passes, else the
// message check_host_memory throws (--dry-run reports it and goes on with the plan).
std::string host_memory_problem(const std::string& backend, const ModelConfig& cfg, const TpShard& shard,
                                const RankLoad& load);

// This rank's backend (its TP slice of the weights). `backend` is "cpu" or "cuda".
std::unique_ptr<Backend> make_backend(const std::string& backend, const ModelConfig& cfg, const Checkpoint& ckpt,
                                      const TpShard& shard, MpiGroups& groups, const RankLoad& load);

// --dry-run: this rank's memory plan, a few indented lines (cuda: the device plan by part, whether it
// fits and the largest --max-batch-tokens that would, NCCL's buffers; both: the host plan). Collective
// over the TP group (cuda at TP > 1 connects NCCL first and measures free memory after it, as a
// real run does). Throws for a cuda plan without --gpu-memory on a rank that sees no GPU.
struct RankPlan {
  std::string text;
  bool fits = true;  // the device plan fits (cpu: always)
};
RankPlan describe_rank_plan(const std::string& backend, const ModelConfig& cfg, const Checkpoint& ckpt,
                            const TpShard& shard, MpiGroups& groups, const RankLoad& load);

// --dry-run --read-weights: reads every byte this rank would load through its backend's load path
// (cuda: the load plan through the staging ring into host buffers; cpu: the float32 loader) and
// returns one line: bytes, seconds, GB/s, peak anonymous memory. Throws naming file and tensor.
std::string pre_read_weights(const std::string& backend, const ModelConfig& cfg, const Checkpoint& ckpt,
                             const TpShard& shard);

}  // namespace layertap::job
