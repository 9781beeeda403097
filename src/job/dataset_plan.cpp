#include "job/dataset_plan.hpp"

#include <algorithm>
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

std::vector<int64_t> lengths_of(const std::vector<io::Sample>& samples) {
  std::vector<int64_t> n;
  for (const io::Sample& s : samples) n.push_back(int64_t(s.input_ids.size()));
  return n;
}

// The same error on every rank, before any sample is parsed for the run.
void check_sample_lengths(const io::DatasetIndex& index, const std::string& path, const SampleLimits& limits) {
  LT_CHECK(limits.max_positions <= 0 || limits.max_sample_tokens <= limits.max_positions, "--max-sample-tokens ",
           limits.max_sample_tokens, " is more than the model's max_position_embeddings ", limits.max_positions,
           " (config.json)");
  for (std::size_t i = 0; i < index.samples.size(); ++i) {
    const io::SampleSpan& s = index.samples[i];
    LT_CHECK(limits.max_positions <= 0 || s.tokens <= limits.max_positions, "dataset '", path, "' line ", s.line,
             " (sample ", i, ") has ", s.tokens, " tokens, more than the model's max_position_embeddings ",
             limits.max_positions, " (config.json)");
    LT_CHECK(limits.max_sample_tokens <= 0 || s.tokens <= limits.max_sample_tokens, "dataset '", path, "' line ",
             s.line, " (sample ", i, ") has ", s.tokens, " tokens, more than --max-sample-tokens ",
             limits.max_sample_tokens);
    LT_CHECK(limits.chunks || s.tokens <= limits.max_batch_tokens, "dataset '", path, "' line ", s.line, " (sample ",
             i, ") has ", s.tokens, " tokens, more than --max-batch-tokens ", limits.max_batch_tokens,
             "; raise --max-batch-tokens (this backend does not run a sample in chunks)");
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
