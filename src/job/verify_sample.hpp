// One stored sample as verify's per-sample checks read it (job/verify_recompute, job/verify_lm_head).
#pragma once
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace layertap::job {

struct StoredSample {
  std::string where;              // "sample 3 (shard-00000.h5 #3, 24 tokens)", for messages
  std::span<const int32_t> ids;   // [T] token ids
  std::span<const uint8_t> mask;  // [T] loss mask
  std::span<const float> states;  // [T, P, H] as stored, in float32
  // MoE outputs: [T, M, k] the routing the output's forward chose (model/routing_record.hpp);
  // empty for dense models and outputs written before it was recorded.
  std::vector<int16_t> routing;
};

}  // namespace layertap::job
