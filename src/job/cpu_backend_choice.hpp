// The float32 CPU backend as a BackendChoice: every supported model, weights on the host.
#pragma once
#include "job/backend_choice.hpp"

namespace layertap::job {

std::unique_ptr<BackendChoice> cpu_backend_choice(const ModelConfig& cfg, const TpShard& shard);

}  // namespace layertap::job
