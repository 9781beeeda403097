// The routing a MoE forward chose, as outputs record it (/routed_experts) and verify replays it:
// each token's top-k global expert ids at each MoE layer. A bf16 forward can flip a near-tie that
// the float32 reference breaks the other way; replaying the recorded choice makes the reference
// compute what the output's forward computed, and a choice no bf16 forward could make is reported.
#pragma once
#include <cstdint>
#include <vector>

#include "model/hf_config.hpp"

namespace layertap {

// The ids of the model's MoE layers, in order (M of them; empty for a dense model).
std::vector<int64_t> moe_layer_ids(const ModelConfig& cfg);

// Per MoE layer [M][T * k] int32 (how the backends hold it) -> token-major [T, M, k] int16 (how a
// shard stores it: a token's row is contiguous, like its states). Expert ids must fit int16.
std::vector<int16_t> token_major_routing(const std::vector<std::vector<int32_t>>& per_layer, int64_t T, int64_t k);

// The inverse: [T, M, k] int16 -> [M][T * k] int32.
std::vector<std::vector<int32_t>> layer_major_routing(const std::vector<int16_t>& rows, int64_t M, int64_t k);

}  // namespace layertap
