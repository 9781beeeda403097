#include "io/manifest.hpp"

#include <map>

#include "core/backend_names.hpp"
#include "core/error.hpp"
#include "core/regular_file.hpp"
#include "core/text.hpp"
#include "io/compression.hpp"
#include "io/progress.hpp"
#include "model/json_fields.hpp"

namespace layertap::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int64_t kMax = int64_t(1) << 62;  // counts and sizes; keeps sums in int64

void check_plain_name(const std::string& name, const std::string& where) {
  LT_CHECK(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..", where,
           ": shard file '", excerpt(name), "' is not a plain file name inside the output directory");
  // A writer's unfinished file is "<name>.h5.tmp"; a run lists only finished shards.
  LT_CHECK(name.size() > 3 && name.compare(name.size() - 3, 3, ".h5") == 0, where, ": shard file '", excerpt(name),
           "' does not end in .h5 (a finished shard)");
}

// A shown-only value: the string or number under `key`; empty (numbers: -1) when absent or of
// another type.
std::string shown_text(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j.at(key).is_string() ? j.at(key).get<std::string>() : std::string();
}
int64_t shown_integer(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j.at(key).is_number_integer() ? j.at(key).get<int64_t>() : -1;
}
double shown_number(const json& j, const char* key) {
  return j.is_object() && j.contains(key) && j.at(key).is_number() ? j.at(key).get<double>() : -1;
}

}  // namespace

std::vector<std::string> Manifest::point_specs() const {
  std::vector<std::string> v;
  for (const ManifestPoint& p : points) v.push_back(p.spec);
  return v;
}

std::vector<int64_t> Manifest::point_ids() const {
  std::vector<int64_t> v;
  for (const ManifestPoint& p : points) v.push_back(p.id);
  return v;
}

json manifest_json(const Manifest& m) {
  json j;
  j["format_version"] = m.format_version;
  j["complete"] = m.complete;
  json points = json::array();
  for (const ManifestPoint& p : m.points) points.push_back({{"spec", p.spec}, {"id", p.id}, {"meaning", p.meaning}});
  j["capture"] = {{"request", m.capture_request}, {"convention", m.capture_convention}, {"points", points}};
  j["model"] = {{"dir", m.model_dir},
                {"architecture", m.architecture},
                {"num_hidden_layers", m.num_layers},
                {"hidden_size", m.hidden_size},
                {"vocab_size", m.vocab_size},
                {"checkpoint_dtype", m.checkpoint_dtype},
                {"quantization", m.quantization},
                {"config_sha256", m.config_sha256},
                {"weights_fingerprint", m.weights_fingerprint}};
  j["dataset"] = {{"path", m.dataset_path},
                  {"sha256", m.dataset_sha256},
                  {"samples", m.dataset_samples},
                  {"tokens", m.dataset_tokens}};
  j["storage_dtype"] = m.storage_dtype;
  j["compression"] = m.compression;
  if (!m.float8_fidelity.empty()) {
    json per_point = json::array();
    for (std::size_t p = 0; p < m.float8_fidelity.size(); ++p)
      per_point.push_back({{"spec", m.points.at(p).spec}, {"error_vs_bfloat16", to_json(m.float8_fidelity[p])}});
    j["float8_fidelity"] = per_point;
  }
  j["shards"] = json::array();
  for (const ShardInfo& s : m.shards) j["shards"].push_back(to_json(s));
  j["skipped_samples"] = json::array();
  for (const SkippedSample& s : m.skipped_samples)
    j["skipped_samples"].push_back({{"index", s.index}, {"id", s.id}, {"reason", s.reason}});
  j["totals"] = {{"samples", m.total_samples}, {"tokens", m.total_tokens}, {"bytes", m.total_bytes}};
  const RunSummary& r = m.run;
  j["run"] = {{"command", r.command},
              {"layertap_version", r.layertap_version},
              {"created", r.created},
              {"backend", r.backend},
              {"world_size", r.world_size},
              {"tp", r.tp},
              {"dp", r.dp},
              {"moe_split", r.moe_split},
              {"max_batch_tokens", r.max_batch_tokens},
              {"seconds", r.seconds},
              {"tokens_per_s", r.tokens_per_s},
              {"peak_rss_mib_max", r.peak_rss_mib_max}};
  if (!r.stopped_by.empty()) j["run"]["stopped_by"] = r.stopped_by;
  return j;
}

Manifest read_manifest(const fs::path& dir) {
  const fs::path path = dir / "manifest.json";
  Manifest m;
  const json raw = parse_json(read_regular_file(path.string(), "manifest"), path.string(), 16);
  const JsonFields top(raw, path.string());
  m.format_version = top.integer("format_version", 1, 1000);
  LT_CHECK(m.format_version == kFormatVersion, path.string(), ": format_version ", m.format_version,
           "; this reader knows ", kFormatVersion);
  m.complete = top.boolean("complete");
  m.storage_dtype = top.string("storage_dtype");
  LT_CHECK(m.storage_dtype == "bfloat16" || m.storage_dtype == "float32" || m.storage_dtype == "float8_e4m3fn",
           path.string(), ": storage_dtype '", excerpt(m.storage_dtype),
           "' is not bfloat16, float32 or float8_e4m3fn");
  const std::string compression = top.string_or("compression", "none");
  try {
    m.compression = compression_name(parse_compression(compression));
  } catch (const Error& e) {
    LT_FAIL(path.string(), ": compression '", excerpt(compression), "': ", e.what());
  }

  const JsonFields model = top.object("model");
  m.model_dir = model.string("dir");
  m.architecture = model.string("architecture");
  m.config_sha256 = model.string("config_sha256");
  m.weights_fingerprint = model.string("weights_fingerprint");
  m.num_layers = model.integer("num_hidden_layers", 1, 1 << 20);
  m.hidden_size = model.integer("hidden_size", 1, 1 << 24);
  m.vocab_size = model.integer("vocab_size", 1, kMax);
  m.checkpoint_dtype = shown_text(model.raw(), "checkpoint_dtype");
  m.quantization = shown_text(model.raw(), "quantization");

  const JsonFields capture = top.object("capture");
  m.capture_request = capture.string("request");
  m.capture_convention = shown_text(capture.raw(), "convention");
  const json& points = capture.array("points");
  LT_CHECK(!points.empty(), capture.where(), ": no capture points");
  for (std::size_t p = 0; p < points.size(); ++p) {
    const JsonFields point(points[p], cat(capture.where(), " points[", p, "]"));
    m.points.push_back({point.string("spec"), point.integer("id", 0, m.num_layers + 1), shown_text(points[p], "meaning")});
  }

  const json& shards = top.array("shards");
  std::map<std::string, std::size_t> listed;  // file name -> its entry: each shard is counted once
  int64_t previous_last = -1;                 // the last sample of the entries before
  for (std::size_t i = 0; i < shards.size(); ++i) {
    const JsonFields s(shards[i], cat(path.string(), " shards[", i, "]"));
    ShardInfo e;
    e.file = s.string("file");
    check_plain_name(e.file, s.where());
    const auto [first, fresh] = listed.emplace(e.file, i);
    LT_CHECK(fresh, s.where(), ": shard file '", excerpt(e.file), "' repeats shards[", first->second, "]");
    e.sha256 = s.string("sha256");
    e.samples = s.integer("samples", 0, kMax);
    e.tokens = s.integer("tokens", 0, kMax);
    e.bytes = s.integer("bytes", 0, kMax);
    // Manifest order is dataset order: each entry's samples come after the previous entry's.
    e.first_sample = s.integer("first_sample", -1, kMax);
    e.last_sample = s.integer("last_sample", -1, kMax);
    if (e.samples > 0) {
      LT_CHECK(e.first_sample >= 0 && e.first_sample <= e.last_sample, s.where(), ": first_sample ", e.first_sample,
               " and last_sample ", e.last_sample, " do not bound ", e.samples, " samples");
      LT_CHECK(e.first_sample > previous_last, s.where(), ": first_sample ", e.first_sample,
               " is not after the previous shards' last sample ", previous_last,
               " (manifest order is dataset order; each sample is held once)");
      previous_last = e.last_sample;
    }
    m.shards.push_back(e);
  }
  const JsonFields totals = top.object("totals");
  m.total_samples = totals.integer("samples", 0, kMax);
  m.total_tokens = totals.integer("tokens", 0, kMax);
  m.total_bytes = totals.integer("bytes", 0, kMax);
  if (top.has("dataset")) {
    const JsonFields dataset = top.object("dataset");
    if (dataset.has("samples")) m.dataset_samples = dataset.integer("samples", 0, kMax);
    m.dataset_path = shown_text(dataset.raw(), "path");
    m.dataset_sha256 = shown_text(dataset.raw(), "sha256");
    m.dataset_tokens = shown_integer(dataset.raw(), "tokens");
  }
  if (top.has("skipped_samples")) {
    const json& skipped = top.array("skipped_samples");
    for (std::size_t i = 0; i < skipped.size(); ++i)
      m.skipped_samples.push_back(
          {JsonFields(skipped[i], cat(path.string(), " skipped_samples[", i, "]")).integer("index", 0, kMax),
           shown_text(skipped[i], "id"), shown_text(skipped[i], "reason")});
  }
  if (raw.contains("run")) {
    const json& run = raw.at("run");
    RunSummary& r = m.run;
    // The backend decides verify's bound: checked. The rest is shown only.
    r.backend = JsonFields(run, path.string() + " (run)").string_or("backend", std::string(kCpuBackend));
    LT_CHECK(r.backend == kCpuBackend || r.backend == kCudaBackend, path.string(), ": run.backend '", excerpt(r.backend),
             "' is not cpu or cuda");
    r.command = shown_text(run, "command");
    r.layertap_version = shown_text(run, "layertap_version");
    r.created = shown_text(run, "created");
    r.moe_split = shown_text(run, "moe_split");
    r.stopped_by = shown_text(run, "stopped_by");
    r.world_size = shown_integer(run, "world_size");
    r.tp = shown_integer(run, "tp");
    r.dp = shown_integer(run, "dp");
    r.max_batch_tokens = shown_integer(run, "max_batch_tokens");
    r.seconds = shown_number(run, "seconds");
    r.tokens_per_s = shown_number(run, "tokens_per_s");
    r.peak_rss_mib_max = shown_number(run, "peak_rss_mib_max");
  }
  return m;
}

}  // namespace layertap::io
