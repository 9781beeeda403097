// The checks of an output directory against its manifest (io/manifest.hpp): the counts, and each
// shard before any value is read. `inspect`, `verify` and `--resume` share them, so a damaged or
// tampered output gives them the same findings and neither reads past a buffer.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "io/manifest.hpp"

namespace layertap::io {

// What a complete output holds, by the manifest's own counts: the one rule that inspect, verify
// and --resume (before "nothing to do") apply. The totals equal the sums over the shard entries
// (samples, tokens, bytes); a run marked complete names its dataset's size, and its shards hold
// every sample of it but those listed in skipped_samples (each index once, inside the dataset).
// One finding per line, prefixed "manifest.json: "; empty when the counts agree. Whether the shard
// files agree with their entries is check_shard's part.
std::vector<std::string> manifest_count_problems(const Manifest& m);

struct ShardFindings {
  std::vector<std::string> problems;  // each prefixed with the shard's file name
  std::vector<int64_t> shape;         // /hidden_states dims as found (empty if unreadable)
  std::string dtype;                  // its stored type as found ("" if unreadable)
  // Present and consistent with the manifest in every dimension and attribute: its values can be
  // read with the manifest's shapes.
  bool sound = false;
};

// One shard against its manifest entry: a regular file of the recorded size (and SHA-256 when
// `checksum`), readable HDF5 whose datasets have the ranks, lengths and shapes the manifest implies,
// whose /sample_index runs from the entry's first_sample to its last_sample (read_manifest holds
// the entries in dataset order, so the shards' samples increase across the run), and whose
// attributes (format version, points, hidden size, dtype, model identity) match.
ShardFindings check_shard(const std::filesystem::path& dir, const ShardInfo& shard, const Manifest& m,
                          bool checksum);

}  // namespace layertap::io
