// What differs per backend, behind one interface chosen once per run (choose_backend): what a
// rank holds of the host (checked before any weight is read), its --dry-run plan, its pre-read of
// the weights, the Backend it builds, and what it does not run. The CPU backend is in every build
// (job/cpu_backend_choice.cpp); the CUDA one in a CUDA build (job/cuda_backend_choice.cpp).
// Adding a backend: one more BackendChoice and one more case in choose_backend.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "backend/backend.hpp"
#include "comm/mpi_groups.hpp"
#include "core/backend_names.hpp"
#include "job/extract_options.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace layertap::job {

// What a rank is asked to hold, beyond the model: the settings that size its buffers.
struct RankLoad {
  int64_t max_batch_tokens = 0;
  int64_t max_sample_tokens = 0;  // --max-sample-tokens, or the longest sample of the rank's share (longer than
                                  // a batch: run in chunks, its earlier chunks' keys and values kept)
  int64_t capture_points = 0;  // of the plan; only the group's writer (TP rank 0) holds capture buffers
  int64_t dataset_bytes = 0;   // this rank's share of the parsed dataset
  double gpu_memory_gib = 0;   // --gpu-memory (0: the device's free memory)
};

// What a rank holds of the host: named parts and their sum.
struct HostPlan {
  std::vector<std::pair<std::string, int64_t>> parts;
  int64_t total() const;
  std::string describe() const;  // "part 1.2 GiB + part 3 MiB"
};

// --dry-run: a rank's memory plan, a few indented lines, and whether its device plan fits.
struct RankPlan {
  std::string text;
  bool fits = true;  // the device plan fits (cpu: always)
};

// --max-batch-tokens auto: the cpu backend's batch (its speed does not grow with the batch), and the
// most the cuda backend takes (beyond it the per-layer costs are amortized; the host's buffers
// grow with it: Kimi-K2.5, 4 points, about 11 GiB per writing rank at 65536).
inline constexpr int64_t kCpuBatchTokens = 8192;
inline constexpr int64_t kAutoBatchCap = 65536;

class BackendChoice {
 public:
  BackendChoice(const ModelConfig& cfg, const TpShard& shard) : cfg_(cfg), shard_(shard) {}
  virtual ~BackendChoice() = default;
  BackendChoice(const BackendChoice&) = delete;
  BackendChoice& operator=(const BackendChoice&) = delete;

  virtual const char* name() const = 0;  // kCpuBackend | kCudaBackend (core/backend_names.hpp)
  // What this rank keeps on the host (cpu: the float32 weight slices; cuda: no weights).
  virtual HostPlan host_plan(const RankLoad& load) const = 0;
  // --dry-run's plan of this rank (cuda: the device plan by part and NCCL's buffers; both: the
  // host plan). Collective over the TP group.
  virtual RankPlan describe_plan(const Checkpoint& ckpt, MpiGroups& groups, const RankLoad& load) const = 0;
  // --dry-run --read-weights: every byte this rank would load, through the backend's own load path
  // and value checks; one line (bytes, seconds, GB/s, peak memory). Throws naming file and tensor.
  virtual std::string pre_read(const Checkpoint& ckpt) const = 0;
  // This rank's backend, its TP slice of the weights loaded (collective over the TP group).
  virtual std::unique_ptr<Backend> build(const Checkpoint& ckpt, MpiGroups& groups, const RankLoad& load) const = 0;
  // The batch this backend would take under --max-batch-tokens auto, as far as its device goes
  // (`load` as it will be but for max_batch_tokens; cuda: the largest batch its device plan fits,
  // at most kAutoBatchCap; cpu: kCpuBatchTokens). Collective over the TP group. auto_batch_tokens
  // bounds it by the host too.
  virtual int64_t device_batch_tokens(MpiGroups& groups, const RankLoad& load) const = 0;
  // Whether this rank can run the backend now (cuda planned with --gpu-memory without a GPU: no).
  virtual bool runs_here() const { return true; }
  // Whether it runs a sample longer than --max-batch-tokens in chunks (model/packed_batch.hpp).
  virtual bool chunks_long_samples() const = 0;
  // Appended to the not-enough-host-memory message: what else would help.
  virtual std::string host_memory_hint() const { return ""; }

  const TpShard& shard() const { return shard_; }

 protected:
  const ModelConfig& cfg_;  // the run's, which outlives the choice
  TpShard shard_;
};

// Resolves --backend on every rank alike (collective): auto is cuda when every rank sees a GPU,
// the build has CUDA and the CUDA backend runs the model, cpu otherwise. Throws for cuda in a
// build or on a machine without it, or for a model it does not run, before any weight is read.
// `planning` (--dry-run with --gpu-memory) accepts cuda on a machine without a GPU: the plan is
// host arithmetic.
std::unique_ptr<BackendChoice> choose_backend(BackendRequest requested, const ModelConfig& cfg,
                                              const TpShard& shard, bool planning);

// The host-memory check of every rank, collectively, before any weight is read: "" when the ranks
// on each node can hold what their backend keeps on the host, else the message (with the numbers
// and what to change) that a real run stops with; --dry-run reports it and goes on.
std::string host_memory_problem(const BackendChoice& backend, const RankLoad& load);

// --max-batch-tokens auto: the backend's device_batch_tokens, lowered until every rank's host plan
// fits the host's memory as host_memory_problem counts it (halving, not below 1); the smallest over
// all ranks, so every rank plans the same batches. Collective over the world.
int64_t auto_batch_tokens(const BackendChoice& backend, MpiGroups& groups, const RankLoad& load);

std::string gb_per_s(int64_t bytes, double seconds);  // "1.23 GB/s", or "-" for no time

}  // namespace layertap::job
