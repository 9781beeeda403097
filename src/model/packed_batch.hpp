// Several samples concatenated along the token axis for one forward pass. Attention is causal
// within each sample and never crosses samples; positions restart at 0 for every sample.
#pragma once
#include <cstdint>
#include <vector>

namespace layertap {

// The most tokens one batch may hold, the bound of --max-batch-tokens (16M tokens: far beyond any
// device's memory at any width).
inline constexpr int64_t kMaxBatchTokens = int64_t(1) << 24;

struct PackedBatch {
  std::vector<int32_t> tokens;   // [T]
  std::vector<int64_t> offsets;  // [S+1], offsets[0] = 0, offsets[S] = T

  int64_t num_tokens() const { return int64_t(tokens.size()); }
  int64_t num_samples() const { return int64_t(offsets.size()) - 1; }
};

}  // namespace layertap
