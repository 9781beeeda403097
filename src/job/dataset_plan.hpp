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

namespace layertap::job {

// World rank 0 (`lead`) indexes the dataset in one validating pass on `threads` threads (refusing
// Kimi-K2.5's media placeholder token); every rank gets the index (32 bytes per sample) or rank
// 0's error. Each rank then parses only its own samples (io::read_samples).
io::DatasetIndex share_dataset_index(const std::string& path, const ModelConfig& cfg, int threads, bool lead);

// Every sample fits a batch: the same error on every rank, naming the line, before any weight is read.
void check_sample_lengths(const io::DatasetIndex& index, const std::string& path, int64_t max_tokens);

// Consecutive samples, in input order, up to max_tokens per batch: [first, last) positions in
// `lengths` from `begin`.
std::vector<std::pair<std::size_t, std::size_t>> plan_batches(const std::vector<int64_t>& lengths, std::size_t begin,
                                                              int64_t max_tokens);

std::vector<int64_t> lengths_of(const std::vector<io::Sample>& samples);

}  // namespace layertap::job
