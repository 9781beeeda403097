// The benchmark's synthetic models: the shapes of released checkpoints, with no weights (the
// backend makes random ones on the device), each config.json text read by the same parser as a
// real checkpoint's config.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/hf_config.hpp"

namespace layertap {

// The names synthetic_model_config knows.
std::vector<std::string> synthetic_model_names();

// The ModelConfig of a synthetic model name (`layers` > 0 overrides its layer count); throws
// naming the known ones. kimi-k2.5 and deepseek-v3 are parsed from config.json text as the
// checkpoints' own (INT4 groups of 32 on the routed experts; FP8 blocks of 128 x 128).
ModelConfig synthetic_model_config(const std::string& name, std::int64_t layers = 0);

}  // namespace layertap
