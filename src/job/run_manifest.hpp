// What a run records: the shards' root attributes (OutputMeta), the identity a --resume must
// match (run.json), and manifest.json, written last by world rank 0 (docs/FORMAT.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/world_layout.hpp"
#include "io/dataset.hpp"
#include "io/shard_writer.hpp"
#include "job/extract_options.hpp"
#include "model/capture.hpp"
#include "model/hf_config.hpp"
#include "model/weights.hpp"

namespace layertap::job {

io::OutputMeta make_output_meta(const ExtractOptions& o, const ModelConfig& cfg, const CapturePlan& plan,
                                const std::string& config_sha256, const std::string& weights_fingerprint);

// Everything that changes what the output holds; a resume must match it exactly (the dataset by
// its SHA-256 and its sample count, which a complete run's manifest must repeat). `backend` ("cpu"
// or "cuda") is part of it: the two hold different fidelities (float32-exact, the bf16 bound), and
// one manifest names one.
nlohmann::json run_identity(const io::OutputMeta& meta, const std::string& dataset_sha256, int64_t dataset_samples,
                            const WorldLayout& world, MoeSplit moe_split, const std::string& backend);

// Samples of `mine` before position `done` that the kept shards do not hold: skipped before the resume.
nlohmann::json skipped_before_resume(const std::filesystem::path& dir, const std::vector<io::ShardInfo>& kept,
                                     const std::vector<io::Sample>& mine, std::size_t done);

// What manifest.json records of a run beside its shards.
struct RunRecord {
  const ExtractOptions& opts;
  const ModelConfig& cfg;
  const CapturePlan& plan;
  const io::OutputMeta& meta;
  WorldLayout world;
  struct Dataset {
    std::size_t samples = 0;
    int64_t tokens = 0;
    std::string sha256;
  } dataset;
  std::string backend;  // the backend's name()
  double seconds = 0, tokens_per_s = 0, peak_rss_mib_max = 0;
  bool stopped = false;  // by a stop signal: the manifest says "complete": false
};

// Rank 0: the manifest, from every rank's shard list (`parts`, in rank order = input order).
void write_manifest(const RunRecord& run, const std::vector<std::string>& parts);

}  // namespace layertap::job
