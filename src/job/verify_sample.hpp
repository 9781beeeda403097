// One stored sample as verify's per-sample checks read it (job/verify_recompute, job/verify_lm_head).
#pragma once
#include <cstdint>
#include <span>
#include <string>

namespace layertap::job {

struct StoredSample {
  std::string where;              // "sample 3 (shard-00000.h5 #3, 24 tokens)", for messages
  std::span<const int32_t> ids;   // [T] token ids
  std::span<const uint8_t> mask;  // [T] loss mask
  std::span<const float> states;  // [T, P, H] as stored, in float32
};

}  // namespace layertap::job
