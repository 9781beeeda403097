// Batches in input order: which tokens of which samples each forward pass runs, and the packed
// input built from them. Plain arithmetic on sample lengths (no MPI, no I/O), so the compute core
// and the GPU tests use it too.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/packed_batch.hpp"

namespace layertap::job {

// Tokens [begin, end) of the sample at position `sample` of the rank's share.
struct Segment {
  std::size_t sample = 0;
  int64_t begin = 0, end = 0;
  int64_t tokens() const { return end - begin; }
  bool operator==(const Segment&) const = default;
};
using Batch = std::vector<Segment>;

// Batches in input order from position `begin` of `lengths`, each of at most max_tokens. A sample
// that fits a batch is never split: it opens a new batch when the current one is too full. A longer
// one runs in chunks (model/packed_batch.hpp): its first fills what the current batch has left, the
// next ones whole batches, its last shares a batch with the samples after it.
std::vector<Batch> plan_batches(const std::vector<int64_t>& lengths, std::size_t begin, int64_t max_tokens);

// The forward pass's input for `batch`: each segment's tokens of `tokens_of(sample)`, and whether it
// continues or is continued (`lengths` as planned).
template <typename TokensOf>
PackedBatch pack_batch(const Batch& batch, const std::vector<int64_t>& lengths, TokensOf&& tokens_of) {
  PackedBatch pb;
  pb.offsets.push_back(0);
  for (const Segment& s : batch) {
    const auto& tokens = tokens_of(s.sample);
    pb.tokens.insert(pb.tokens.end(), tokens.begin() + s.begin, tokens.begin() + s.end);
    pb.offsets.push_back(pb.num_tokens());
  }
  pb.first_position = batch.front().begin;
  pb.last_continues = batch.back().end < lengths[batch.back().sample];
  return pb;
}

}  // namespace layertap::job
