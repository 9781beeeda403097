// An output directory as its manifest.json describes it (docs/FORMAT.md), type-checked, and each
// shard checked against it before any value is read. `inspect` and `verify` share this, so a
// damaged or tampered output gives them the same findings and neither reads past a buffer.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace layertap::io {

struct ManifestShard {
  std::string file;  // a plain file name inside the output directory
  std::string sha256;
  int64_t samples = 0, tokens = 0, bytes = 0;
};

// The fields a reader relies on; `raw` keeps the rest (run, dataset) for display.
struct Manifest {
  nlohmann::json raw;
  int64_t format_version = 0;
  bool complete = false;
  std::string storage_dtype;  // "bfloat16", "float32" or "float8_e4m3fn"
  std::string backend;        // run.backend: "cpu" or "cuda" ("cpu" when absent)
  std::string compression;    // canonical: "none", "lz4", "zstd:<level>", "gzip:<level>" (absent before: "none")
  std::string model_dir, architecture, config_sha256, weights_fingerprint;
  int64_t num_layers = 0, hidden_size = 0, vocab_size = 0;
  std::string capture_request;
  std::vector<std::string> point_specs;
  std::vector<int64_t> point_ids;  // each in [0, num_layers + 1]
  std::vector<ManifestShard> shards;
  int64_t total_samples = 0, total_tokens = 0, total_bytes = 0;
  int64_t dataset_samples = -1;         // dataset.samples; -1 when the manifest lacks it
  std::vector<int64_t> skipped_samples;  // skipped_samples[].index (--on-nonfinite skip), in its order
};

// Reads and type-checks <dir>/manifest.json. Throws layertap::Error naming the key that is missing,
// of the wrong type or out of range, or a shard path that leaves the directory ("../x", "/x").
Manifest read_manifest(const std::filesystem::path& dir);

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
// and whose attributes (format version, points, hidden size, dtype, model identity) match.
ShardFindings check_shard(const std::filesystem::path& dir, const ManifestShard& shard, const Manifest& m,
                          bool checksum);

}  // namespace layertap::io
