#include "job/dataset_plan.hpp"

#include <cstring>

#include "comm/mpi_groups.hpp"
#include "core/error.hpp"

namespace layertap::job {
namespace {

// Kimi-K2.5 is multimodal; layertap runs its text model only, so a sample holding the media
// placeholder (whose states would need the vision tower) is an error, never silently wrong states.
void refuse_media_placeholder(const io::Sample& s, const ModelConfig& cfg) {
  if (cfg.media_placeholder_token_id < 0) return;
  for (std::size_t t = 0; t < s.input_ids.size(); ++t)
    LT_CHECK(s.input_ids[t] != cfg.media_placeholder_token_id, "sample ", s.index, " (id '", s.id,
             "') holds the media placeholder token ", cfg.media_placeholder_token_id, " at position ", t, ": ",
             cfg.architecture, " is extracted as a text-only model; remove image/video samples from the dataset");
}

}  // namespace

// Consecutive samples, in input order, up to max_tokens per batch: [first, last) positions in
// `lengths` from `begin` (every length is at most max_tokens: check_sample_lengths ran first).
std::vector<std::pair<std::size_t, std::size_t>> plan_batches(const std::vector<int64_t>& lengths, std::size_t begin,
                                                              int64_t max_tokens) {
  std::vector<std::pair<std::size_t, std::size_t>> batches;
  std::size_t first = begin;
  int64_t tokens = 0;
  for (std::size_t i = begin; i < lengths.size(); ++i) {
    if (tokens + lengths[i] > max_tokens && i > first) {
      batches.emplace_back(first, i);
      first = i;
      tokens = 0;
    }
    tokens += lengths[i];
  }
  if (first < lengths.size()) batches.emplace_back(first, lengths.size());
  return batches;
}

std::vector<int64_t> lengths_of(const std::vector<io::Sample>& samples) {
  std::vector<int64_t> n;
  for (const io::Sample& s : samples) n.push_back(int64_t(s.input_ids.size()));
  return n;
}

// The same error on every rank, before any sample is parsed for the run.
void check_sample_lengths(const io::DatasetIndex& index, const std::string& path, int64_t max_tokens) {
  for (std::size_t i = 0; i < index.samples.size(); ++i) {
    const io::SampleSpan& s = index.samples[i];
    LT_CHECK(s.tokens <= max_tokens, "dataset '", path, "' line ", s.line, " (sample ", i, ") has ", s.tokens,
             " tokens, more than --max-batch-tokens ", max_tokens, "; raise --max-batch-tokens");
  }
}

// World rank 0 indexes the dataset in one validating pass on `threads` threads and every rank gets
// the index (32 bytes per sample) or rank 0's error; each rank then parses only its own samples.
io::DatasetIndex share_dataset_index(const std::string& path, const ModelConfig& cfg, int threads, bool lead) {
  io::DatasetIndex index;
  run_on_world_root(lead, [&] {
    index = io::index_jsonl_dataset(path, cfg.vocab_size, threads,
                                    [&](const io::Sample& s) { refuse_media_placeholder(s, cfg); });
  });
  // The spans as bytes (only rank 0's are filled; memcpy of zero bytes from an empty vector's null
  // data() is still undefined, hence the guards).
  std::string spans(index.samples.size() * sizeof(io::SampleSpan), '\0');
  if (!spans.empty()) std::memcpy(spans.data(), index.samples.data(), spans.size());
  broadcast_from_world_root(spans);
  broadcast_from_world_root(index.sha256);
  index.samples.resize(spans.size() / sizeof(io::SampleSpan));
  if (!spans.empty()) std::memcpy(index.samples.data(), spans.data(), spans.size());
  index.lines = broadcast_from_world_root(index.lines);
  return index;
}

}  // namespace layertap::job
