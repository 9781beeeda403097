// The dataset side of a run's plan: one validating index pass shared by every rank and the checks
// that must fail alike everywhere (the batches themselves: job/batch_plan.hpp).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "io/dataset.hpp"
#include "model/hf_config.hpp"
#include "job/batch_plan.hpp"

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

std::vector<int64_t> lengths_of(const std::vector<io::Sample>& samples);

}  // namespace layertap::job
