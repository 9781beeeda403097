// Several samples concatenated along the token axis for one forward pass. Attention is causal
// within each sample and never crosses samples; positions restart at 0 for every sample.
//
// A sample longer than the batch budget runs in chunks over consecutive batches (chunked prefill).
// Only the first segment of a batch may continue a sample, and only the last may be continued:
// at most one sample is in flight between two batches, and the backend keeps its keys and values
// (per layer; GQA: K and V of its local heads, MLA: the normed latent and the rope key).
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
  // > 0: the first segment is a later chunk of the sample in flight, starting at this position
  // (its tokens attend to the kept keys and values of positions [0, first_position)).
  int64_t first_position = 0;
  // The last segment's sample continues in the next batch: the backend keeps its keys and values.
  bool last_continues = false;

  int64_t num_tokens() const { return int64_t(tokens.size()); }
  int64_t num_samples() const { return int64_t(offsets.size()) - 1; }
};

}  // namespace layertap
