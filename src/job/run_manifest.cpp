#include "job/run_manifest.hpp"

#include <ctime>

#include "core/error.hpp"
#include "core/failpoint.hpp"
#include "core/log.hpp"
#include "core/stop_request.hpp"
#include "core/text.hpp"
#include "io/durable_file.hpp"
#include "io/manifest.hpp"
#include "io/output_writer.hpp"
#include "io/progress.hpp"
#include "io/shard_reader.hpp"
#include "model/routing_record.hpp"

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
  meta.dtype = o.store_dtype;
  meta.compression = o.compress;
  meta.architecture = cfg.architecture;
  meta.config_sha256 = config_sha256;
  meta.weights_fingerprint = weights_fingerprint;
  if (cfg.moe) {  // every MoE output records its routing (/routed_experts): verify replays it
    meta.routed_layers = moe_layer_ids(cfg);
    meta.routed_top_k = cfg.moe->experts_per_token;
  }
  return meta;
}

// Everything that changes what the output holds; a resume must match it exactly.
json run_identity(const io::OutputMeta& meta, const std::string& dataset_sha256, int64_t dataset_samples,
                  const WorldLayout& world, MoeSplit moe_split, const std::string& backend) {
  return {{"format_version", io::kFormatVersion},     {"model_config_sha256", meta.config_sha256},
          {"model_weights_fingerprint", meta.weights_fingerprint}, {"dataset_sha256", dataset_sha256},
          {"dataset_samples", dataset_samples},
          {"capture_point_ids", meta.point_ids},      {"storage_dtype", dtype_name(meta.dtype)},
          {"compression", io::compression_name(meta.compression)},
          {"world_size", world.world_size},           {"tp", world.tp},
          {"moe_split", moe_split_name(moe_split)},  {"backend", backend}};
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

void write_manifest(const RunRecord& run, const std::vector<std::string>& parts) {
  const ExtractOptions& o = run.opts;
  const ModelConfig& cfg = run.cfg;
  const CapturePlan& plan = run.plan;
  const io::OutputMeta& meta = run.meta;
  const WorldLayout& world = run.world;
  const std::size_t dataset_samples = run.dataset.samples;
  const bool stopped = run.stopped;
  io::Manifest m;
  for (const std::string& text : parts) {  // {"shards": [ShardInfo], "skipped": [{index, id, reason}]}
    const json part = json::parse(text);
    for (const json& s : part["shards"]) {
      m.shards.push_back(io::shard_info_from_json(s));
      m.total_bytes += m.shards.back().bytes;
      m.total_samples += m.shards.back().samples;
      m.total_tokens += m.shards.back().tokens;
    }
    for (const json& s : part["skipped"])
      m.skipped_samples.push_back({s.at("index").get<int64_t>(), s.at("id").get<std::string>(),
                                   s.at("reason").get<std::string>()});
  }
  m.complete = !stopped;
  if (m.complete)
    LT_CHECK(m.total_samples + int64_t(m.skipped_samples.size()) == int64_t(dataset_samples), "the shards hold ",
             m.total_samples, " samples and ", m.skipped_samples.size(), " were skipped, but the dataset has ",
             dataset_samples);
  m.capture_request = o.capture;
  m.capture_convention = kCaptureConvention;
  for (std::size_t p = 0; p < plan.points.size(); ++p)
    m.points.push_back({plan.points[p].spec, plan.points[p].id, plan.meaning(p)});
  m.model_dir = fs::absolute(o.model).string();
  m.architecture = cfg.architecture;
  m.num_layers = cfg.num_layers;
  m.hidden_size = cfg.hidden_size;
  m.vocab_size = cfg.vocab_size;
  m.checkpoint_dtype = dtype_name(cfg.torch_dtype);
  m.quantization = cfg.quant.describe();
  m.config_sha256 = meta.config_sha256;
  m.weights_fingerprint = meta.weights_fingerprint;
  m.dataset_path = fs::absolute(o.data).string();
  m.dataset_sha256 = run.dataset.sha256;
  m.dataset_samples = int64_t(dataset_samples);
  m.dataset_tokens = run.dataset.tokens;
  m.storage_dtype = dtype_name(meta.dtype);
  m.compression = io::compression_name(meta.compression);
  // Each point's float8 error against the bf16 states it stores, over every shard.
  if (meta.dtype == DType::F8_E4M3) m.float8_fidelity = io::fp8_fidelity_of(o.out, m.shards);
  m.run = {.command = o.command,
           .layertap_version = LAYERTAP_VERSION,
           .created = utc_timestamp(),
           .backend = run.backend,
           .moe_split = moe_split_name(o.moe_split),
           .stopped_by = !stopped ? "" : stop_signal_name()[0] ? stop_signal_name() : "signal on another rank",
           .world_size = world.world_size,
           .tp = world.tp,
           .dp = world.dp,
           .max_batch_tokens = o.max_batch_tokens,
           .seconds = run.seconds,
           .tokens_per_s = run.tokens_per_s,
           .peak_rss_mib_max = run.peak_rss_mib_max};
  failpoint("manifest");  // crash tests: die with every shard written but no manifest
  io::write_json_atomically(fs::path(o.out) / "manifest.json", io::manifest_json(m));
  log_info(m.complete ? "done: " : "stopped, resumable with --resume: ", m.total_samples, " samples, ",
           m.total_tokens, " tokens, ", m.shards.size(), " shards, ", human_bytes(m.total_bytes), " in ", run.seconds, " s (", int64_t(run.tokens_per_s),
           " tokens/s after loading) -> ", o.out);
}

}  // namespace layertap::job
