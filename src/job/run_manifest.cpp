#include "job/run_manifest.hpp"

#include <ctime>

#include "core/error.hpp"
#include "core/failpoint.hpp"
#include "core/log.hpp"
#include "core/stop_request.hpp"
#include "core/text.hpp"
#include "io/durable_file.hpp"
#include "io/output_writer.hpp"
#include "io/progress.hpp"
#include "io/shard_reader.hpp"

namespace layertap::job {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

}  // namespace

io::OutputMeta make_output_meta(const ExtractOptions& o, const ModelConfig& cfg, const CapturePlan& plan,
                                const std::string& config_sha256, const std::string& weights_fingerprint) {
  io::OutputMeta meta;
  for (const CapturePoint& p : plan.points) {
    meta.point_specs.push_back(p.spec);
    meta.point_ids.push_back(p.id);
  }
  meta.capture_request = o.capture;
  meta.convention = kCaptureConvention;
  meta.num_layers = cfg.num_layers;
  meta.hidden = cfg.hidden_size;
  meta.dtype = io::parse_storage_dtype(o.store_dtype);
  meta.compression = io::parse_compression(o.compress);
  meta.architecture = cfg.architecture;
  meta.config_sha256 = config_sha256;
  meta.weights_fingerprint = weights_fingerprint;
  return meta;
}

// Everything that changes what the output holds; a resume must match it exactly.
json run_identity(const io::OutputMeta& meta, const std::string& dataset_sha256, const WorldLayout& world,
                  MoeSplit moe_split) {
  return {{"format_version", io::kFormatVersion},     {"model_config_sha256", meta.config_sha256},
          {"model_weights_fingerprint", meta.weights_fingerprint}, {"dataset_sha256", dataset_sha256},
          {"capture_point_ids", meta.point_ids},      {"storage_dtype", dtype_name(meta.dtype)},
          {"compression", io::compression_name(meta.compression)},
          {"world_size", world.world_size},           {"tp", world.tp},
          {"moe_split", moe_split_name(moe_split)}};
}

json skipped_before_resume(const fs::path& dir, const std::vector<io::ShardInfo>& kept,
                           const std::vector<io::Sample>& mine, std::size_t done) {
  std::vector<int64_t> stored;
  for (const io::ShardInfo& s : kept)
    for (int64_t i : io::ShardReader(dir / s.file).sample_index()) stored.push_back(i);
  json skipped = json::array();
  std::size_t k = 0;
  for (std::size_t i = 0; i < done; ++i) {
    if (k < stored.size() && stored[k] == mine[i].index) {
      ++k;
      continue;
    }
    skipped.push_back({{"index", mine[i].index}, {"id", mine[i].id}, {"reason", "non-finite states (before resume)"}});
  }
  return skipped;
}

void write_manifest(const ExtractOptions& o, const ModelConfig& cfg, const CapturePlan& plan, const io::OutputMeta& meta,
                    const WorldLayout& world, std::size_t dataset_samples, int64_t total_tokens,
                    const std::string& dataset_sha256, const std::vector<std::string>& parts, bool stopped,
                    const std::string& backend_name, double seconds, double tokens_per_s, double peak_mib_max) {
  json shards = json::array(), all_skipped = json::array();
  int64_t bytes = 0, written_samples = 0, written_tokens = 0;
  for (const std::string& text : parts) {
    const json part = json::parse(text);
    for (const json& s : part["shards"]) {
      bytes += s["bytes"].get<int64_t>();
      written_samples += s["samples"].get<int64_t>();
      written_tokens += s["tokens"].get<int64_t>();
      shards.push_back(s);
    }
    for (const json& s : part["skipped"]) all_skipped.push_back(s);
  }
  const bool complete = !stopped;
  if (complete)
    LT_CHECK(written_samples + int64_t(all_skipped.size()) == int64_t(dataset_samples), "the shards hold ",
             written_samples, " samples and ", all_skipped.size(), " were skipped, but the dataset has ", dataset_samples);
  json m;
  m["format_version"] = io::kFormatVersion;
  m["complete"] = complete;
  json pts = json::array();
  for (std::size_t p = 0; p < plan.points.size(); ++p)
    pts.push_back({{"spec", plan.points[p].spec}, {"id", plan.points[p].id}, {"meaning", plan.meaning(p)}});
  m["capture"] = {{"request", o.capture}, {"convention", kCaptureConvention}, {"points", pts}};
  m["model"] = {{"dir", fs::absolute(o.model).string()},
                {"architecture", cfg.architecture},
                {"num_hidden_layers", cfg.num_layers},
                {"hidden_size", cfg.hidden_size},
                {"vocab_size", cfg.vocab_size},
                {"checkpoint_dtype", dtype_name(cfg.torch_dtype)},
                {"quantization", cfg.quant.describe()},
                {"config_sha256", meta.config_sha256},
                {"weights_fingerprint", meta.weights_fingerprint}};
  m["dataset"] = {{"path", fs::absolute(o.data).string()},
                  {"sha256", dataset_sha256},
                  {"samples", dataset_samples},
                  {"tokens", total_tokens}};
  m["storage_dtype"] = dtype_name(meta.dtype);
  m["compression"] = io::compression_name(meta.compression);
  if (meta.dtype == DType::F8_E4M3) {
    // Each point's float8 error against the bf16 states it stores, over every shard.
    std::vector<io::ShardInfo> all;
    for (const json& s : shards) all.push_back(io::shard_info_from_json(s));
    const std::vector<io::Fp8Fidelity> fidelity = io::fp8_fidelity_of(o.out, all);
    json per_point = json::array();
    for (std::size_t p = 0; p < fidelity.size(); ++p)
      per_point.push_back({{"spec", plan.points[p].spec}, {"error_vs_bfloat16", io::to_json(fidelity[p])}});
    m["float8_fidelity"] = per_point;
  }
  m["shards"] = shards;
  m["skipped_samples"] = all_skipped;
  m["totals"] = {{"samples", written_samples}, {"tokens", written_tokens}, {"bytes", bytes}};
  m["run"] = {{"command", o.command},
              {"layertap_version", LAYERTAP_VERSION},
              {"created", utc_timestamp()},
              {"backend", backend_name},
              {"world_size", world.world_size},
              {"tp", world.tp},
              {"dp", world.dp},
              {"moe_split", o.moe_split},
              {"max_batch_tokens", o.max_batch_tokens},
              {"seconds", seconds},
              {"tokens_per_s", tokens_per_s},
              {"peak_rss_mib_max", peak_mib_max}};
  if (stopped) m["run"]["stopped_by"] = stop_signal_name()[0] ? stop_signal_name() : "signal on another rank";
  failpoint("manifest");  // crash tests: die with every shard written but no manifest
  io::write_json_atomically(fs::path(o.out) / "manifest.json", m);
  log_info(complete ? "done: " : "stopped, resumable with --resume: ", written_samples, " samples, ", written_tokens,
           " tokens, ", shards.size(), " shards, ", human_bytes(bytes), " in ", seconds, " s (", int64_t(tokens_per_s),
           " tokens/s after loading) -> ", o.out);
}

}  // namespace layertap::job
