// manifest.json (docs/FORMAT.md) as one typed value, in both directions: the job fills a Manifest
// and writes manifest_json() (job/run_manifest.cpp); read_manifest type-checks a file back into one
// for inspect, verify and --resume. What a reader relies on (capture points, model identity,
// storage, shards, totals, skipped samples) is required and range-checked; what is shown only
// (the run's summary, the dataset's path and hash, point meanings) is read when present and
// well-typed, else left empty, so an older or hand-edited manifest is not refused over it.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/backend_names.hpp"
#include "io/fp8_storage.hpp"
#include "io/shard_writer.hpp"  // ShardInfo, kFormatVersion

namespace layertap::io {

struct ManifestPoint {
  std::string spec;     // "2", "32" (last), "final"
  int64_t id = 0;       // in [0, num_layers + 1]
  std::string meaning;  // "input to decoder layer 2", ...
};

struct SkippedSample {  // --on-nonfinite skip
  int64_t index = 0;    // in the dataset
  std::string id, reason;
};

// How the output was made ("run"); shown by inspect, not checked.
struct RunSummary {
  std::string command, layertap_version, created, backend = std::string(kCpuBackend), moe_split, stopped_by;
  int64_t world_size = -1, tp = -1, dp = -1, max_batch_tokens = -1;  // -1: not recorded
  double seconds = -1, tokens_per_s = -1, peak_rss_mib_max = -1;
};

struct Manifest {
  int64_t format_version = kFormatVersion;
  bool complete = false;
  std::string capture_request, capture_convention;
  std::vector<ManifestPoint> points;
  std::string model_dir, architecture, checkpoint_dtype, quantization, config_sha256, weights_fingerprint;
  int64_t num_layers = 0, hidden_size = 0, vocab_size = 0;
  std::string dataset_path, dataset_sha256;
  int64_t dataset_samples = -1, dataset_tokens = -1;  // -1: the manifest lacks it
  std::string storage_dtype;  // "bfloat16", "float32" or "float8_e4m3fn"
  std::string compression;    // canonical: "none", "lz4", "zstd:<level>", "gzip:<level>" (absent: "none")
  std::vector<Fp8Fidelity> float8_fidelity;  // [P] float8 storage: each point's error against bf16 (written only)
  std::vector<ShardInfo> shards;             // in dataset order
  std::vector<SkippedSample> skipped_samples;
  int64_t total_samples = 0, total_tokens = 0, total_bytes = 0;
  RunSummary run;

  std::vector<std::string> point_specs() const;  // [P]
  std::vector<int64_t> point_ids() const;        // [P]
};

nlohmann::json manifest_json(const Manifest& m);

// Reads and type-checks <dir>/manifest.json. Throws layertap::Error naming the key that is missing,
// of the wrong type or out of range, a format version this reader does not know, or a shard path
// that leaves the directory ("../x", "/x").
Manifest read_manifest(const std::filesystem::path& dir);

}  // namespace layertap::io
