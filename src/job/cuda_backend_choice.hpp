// The bf16 CUDA backend as a BackendChoice (CUDA builds only): one GPU per rank, NCCL inside the
// tensor-parallel group, weights read from the checkpoint to the GPU in their stored form.
#pragma once
#include <string>

#include "job/backend_choice.hpp"

namespace layertap::job {

// Whether this rank sees a GPU.
bool cuda_gpu_here();
// What of `cfg` the CUDA backend does not implement ("" when it runs the model).
std::string cuda_unsupported_parts(const ModelConfig& cfg);
std::unique_ptr<BackendChoice> cuda_backend_choice(const ModelConfig& cfg, const TpShard& shard);

}  // namespace layertap::job
