// Builds this rank's backend for `layertap extract`: the float32 CPU backend, or (in a CUDA
// build) the bf16 CUDA backend on the GPU of this rank's local rank, with NCCL inside the
// tensor-parallel group.
#pragma once
#include <memory>
#include <string>

#include "backend/backend.hpp"
#include "comm/mpi_groups.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace layertap::job {

// Resolves --backend on every rank alike: "auto" is cuda when every rank sees a GPU (and this
// build has CUDA) and the CUDA backend runs the model (cuda::unsupported_parts is empty), cpu
// otherwise. Throws for "cuda" in a build or on a machine without it, or for such a model, before
// any weight is read.
std::string resolve_backend(const std::string& requested, const ModelConfig& cfg);

// Every rank, collectively, before any weight is read: the ranks on this node can hold their float32
// weight slices (both backends load them on the host first) and a batch's activations; else an
// error with the numbers and what to change, instead of an out-of-memory kill mid-load.
void check_host_memory(const ModelConfig& cfg, const TpShard& shard, int64_t max_batch_tokens, int64_t capture_points);

// This rank's backend (its TP slice of the weights). `backend` is "cpu" or "cuda".
std::unique_ptr<Backend> make_backend(const std::string& backend, const ModelConfig& cfg, const Checkpoint& ckpt,
                                      const TpShard& shard, MpiGroups& groups, int64_t max_batch_tokens,
                                      int64_t capture_points);

}  // namespace layertap::job
