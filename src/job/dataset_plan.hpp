// The dataset side of a run's plan: one validating index pass shared by every rank, the checks
// that must fail alike everywhere, and batches packed in input order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/dataset.hpp"
#include "model/hf_config.hpp"
#include "model/packed_batch.hpp"

namespace layertap::job {

// World rank 0 (`lead`) indexes the dataset in one validating pass on `threads` threads (refusing
// Kimi-K2.5's media placeholder token); every rank gets the index (32 bytes per sample) or rank
// 0's error. Each rank then parses only its own samples (io::read_samples).
io::DatasetIndex share_dataset_index(const std::string& path, const ModelConfig& cfg, int threads, bool lead);

// What bounds a sample's length.
struct SampleLimits {
  int64_t max_batch_tokens = 0;
  bool chunks = false;        // the backend runs longer samples in chunks (chunked prefill)
  int64_t max_positions = 0;  // the config's max_position_embeddings; 0: not given
  int64_t max_sample_tokens = 0;  // --max-sample-tokens; 0: not given
};

// Every sample can run: the same error on every rank, naming the line, before any weight is read.
// Longer than max_batch_tokens it runs in chunks where the backend chunks, else it is refused;
// longer than the model's max_position_embeddings or --max-sample-tokens it is refused either way,
// and so is a --max-sample-tokens beyond max_position_embeddings.
void check_sample_lengths(const io::DatasetIndex& index, const std::string& path, const SampleLimits& limits);

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

std::vector<int64_t> lengths_of(const std::vector<io::Sample>& samples);

}  // namespace layertap::job
