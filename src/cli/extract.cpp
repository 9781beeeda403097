#include "cli/extract.hpp"

#include <chrono>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <numeric>
#include <optional>

#include "backend/cpu/cpu_backend.hpp"
#include "comm/mpi_groups.hpp"
#include "comm/sharding.hpp"
#include "comm/world_layout.hpp"
#include "core/digest.hpp"
#include "core/log.hpp"
#include "io/dataset.hpp"
#include "io/durable_file.hpp"
#include "io/output_writer.hpp"
#include "model/capture.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace layertap {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

bool is_output_file(const fs::path& p) {
  const std::string name = p.filename().string();
  return name.rfind("manifest.json", 0) == 0 || (name.rfind("shard-", 0) == 0 && name.find(".h5") != std::string::npos);
}

// Creates --out, refuses to mix with an earlier run unless --overwrite, and proves it writable
// before any weight is read.
void prepare_output_dir(const ExtractOptions& o) {
  const fs::path dir(o.out);
  std::error_code ec;
  fs::create_directories(dir, ec);
  LT_CHECK(!ec && fs::is_directory(dir), "cannot create output directory '", o.out, "': ", ec.message());
  std::vector<fs::path> earlier;
  for (const auto& entry : fs::directory_iterator(dir))
    if (is_output_file(entry.path())) earlier.push_back(entry.path());
  if (!earlier.empty()) {
    LT_CHECK(o.overwrite, "output directory '", o.out, "' already holds a run (", earlier.front().filename().string(),
             ", ...); pass --overwrite to replace it or choose another --out");
    // The manifest goes first, so an interrupted clean-up never leaves a complete-looking run.
    fs::remove(dir / "manifest.json");
    for (const fs::path& p : earlier) fs::remove(p);
  }
  const fs::path probe = dir / ".layertap-write-test";
  { std::ofstream(probe) << "ok"; }
  LT_CHECK(fs::exists(probe) && fs::file_size(probe) == 2, "output directory '", o.out, "' is not writable");
  fs::remove(probe);
}

// Consecutive samples, in input order, up to max_tokens per batch.
std::vector<std::pair<std::size_t, std::size_t>> plan_batches(const std::vector<io::Sample>& samples,
                                                              int64_t max_tokens) {
  std::vector<std::pair<std::size_t, std::size_t>> batches;  // [first, last) sample positions
  std::size_t first = 0;
  int64_t tokens = 0;
  for (std::size_t i = 0; i < samples.size(); ++i) {
    const int64_t n = int64_t(samples[i].input_ids.size());
    LT_CHECK(n <= max_tokens, "sample '", samples[i].id, "' (index ", samples[i].index, ") has ", n,
             " tokens, more than --max-batch-tokens ", max_tokens, "; raise --max-batch-tokens");
    if (tokens + n > max_tokens) {
      batches.emplace_back(first, i);
      first = i;
      tokens = 0;
    }
    tokens += n;
  }
  batches.emplace_back(first, samples.size());
  return batches;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024 && u < 4) {
    b /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f %s", b, units[u]);
  return buf;
}

double peak_rss_mib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // Linux reports KiB
}

io::OutputMeta make_output_meta(const ExtractOptions& o, const ModelConfig& cfg, const CapturePlan& plan,
                                const std::string& config_path, const Checkpoint& ckpt) {
  io::OutputMeta meta;
  for (const CapturePoint& p : plan.points) {
    meta.point_specs.push_back(p.spec);
    meta.point_ids.push_back(p.id);
  }
  meta.capture_request = o.capture;
  meta.convention = kCaptureConvention;
  meta.num_layers = cfg.num_layers;
  meta.hidden = cfg.hidden_size;
  meta.dtype = parse_dtype(o.store_dtype);
  meta.architecture = cfg.architecture;
  meta.config_sha256 = sha256_file(config_path);
  meta.weights_fingerprint = ckpt.fingerprint();
  return meta;
}

json shard_json(const io::ShardInfo& s) {
  return {{"file", s.file}, {"samples", s.samples}, {"tokens", s.tokens}, {"bytes", s.bytes}, {"sha256", s.sha256}};
}

}  // namespace

void run_extract(const ExtractOptions& o, const MpiEnv& mpi) {
  const auto t_start = Clock::now();
  const WorldLayout world = make_world_layout(mpi.rank(), mpi.size(), o.tp);
  const bool lead = world.world_rank == 0;  // logs progress, prepares --out, writes the manifest
  cpu::set_num_threads(o.threads);
  check_same_on_all_ranks("options", o.job_identity());

  // Everything a user can get wrong is checked before the weights are read.
  const fs::path model_dir(o.model);
  const std::string config_path = (model_dir / "config.json").string();
  const ModelConfig cfg = load_model_config(config_path);
  const TpShard shard{world.tp_rank, world.tp};
  check_tp_divisibility(cfg, shard);
  const CapturePlan plan = resolve_capture(o.capture, cfg.num_layers);
  if (lead) prepare_output_dir(o);
  // Every rank reads and validates the dataset (same errors everywhere) and keeps its group's part.
  const std::vector<io::Sample> samples = io::read_jsonl_dataset(o.data, cfg.vocab_size);
  const std::string dataset_sha256 = sha256_file(o.data);
  check_same_on_all_ranks("dataset", dataset_sha256);
  std::vector<int64_t> lengths;
  for (const io::Sample& s : samples) lengths.push_back(int64_t(s.input_ids.size()));
  const int64_t total_tokens = std::accumulate(lengths.begin(), lengths.end(), int64_t(0));
  const auto [first_sample, last_sample] = split_by_tokens(lengths, world.dp)[std::size_t(world.dp_rank)];
  const std::vector<io::Sample> mine(samples.begin() + long(first_sample), samples.begin() + long(last_sample));
  const auto batches = plan_batches(mine, o.max_batch_tokens);
  int64_t my_tokens = 0;
  for (const io::Sample& s : mine) my_tokens += int64_t(s.input_ids.size());
  if (lead) {
    log_info("model ", cfg.architecture, " (", cfg.num_layers, " layers, hidden ", cfg.hidden_size, ") from ", o.model);
    log_info("world ", world.world_size, " ranks = ", world.dp, " data-parallel groups x tensor parallel ", world.tp);
    log_info("dataset ", o.data, ": ", samples.size(), " samples, ", total_tokens, " tokens; group 0 has ",
             mine.size(), " samples in ", batches.size(), " batches of up to ", o.max_batch_tokens, " tokens");
    std::string points;
    for (std::size_t p = 0; p < plan.points.size(); ++p)
      points += cat(p ? ", " : "", plan.points[p].spec, " (", plan.meaning(p), ")");
    log_info("capture '", o.capture, "' -> ", points);
  }

  const Checkpoint ckpt(checkpoint_files(o.model));
  check_same_on_all_ranks("model weights", ckpt.fingerprint());
  MpiGroups groups(world);
  CpuBackend backend(cfg, load_weights(ckpt, cfg, shard), groups.tp());
  const auto t_loaded = Clock::now();
  if (lead) log_info("weights loaded in ", std::chrono::duration<double>(t_loaded - t_start).count(), " s");
  const io::OutputMeta meta = make_output_meta(o, cfg, plan, config_path, ckpt);
  world_barrier();  // --out exists and is empty before any writer creates a shard

  std::optional<io::OutputWriter> writer;
  if (world.is_writer()) {
    char stem[32];
    std::snprintf(stem, sizeof stem, "shard-g%03d", world.dp_rank);
    writer.emplace(o.out, world.dp > 1 ? std::string(stem) : std::string("shard"), meta, o.shard_size_mib << 20);
  }
  int64_t done_samples = 0, done_tokens = 0;
  auto last_progress = Clock::now();
  for (const auto& [first, last] : batches) {
    CapturedBatch cb;
    PackedBatch pb;
    pb.offsets.push_back(0);
    for (std::size_t i = first; i < last; ++i) {
      const io::Sample& s = mine[i];
      pb.tokens.insert(pb.tokens.end(), s.input_ids.begin(), s.input_ids.end());
      pb.offsets.push_back(pb.num_tokens());
      cb.sample_index.push_back(s.index);
      cb.loss_mask.insert(cb.loss_mask.end(), s.loss_mask.begin(), s.loss_mask.end());
    }
    cb.states = backend.forward(pb, plan, meta.dtype);
    done_samples += pb.num_samples();
    done_tokens += pb.num_tokens();
    if (writer) {
      cb.offsets = pb.offsets;
      cb.input_ids = std::move(pb.tokens);
      cb.hidden = cfg.hidden_size;
      cb.dtype = meta.dtype;
      writer->submit(std::move(cb));
    }
    const auto now = Clock::now();
    if (lead && std::chrono::duration<double>(now - last_progress).count() >= o.progress_seconds) {
      last_progress = now;
      const double rate = double(done_tokens) / std::chrono::duration<double>(now - t_loaded).count();
      log_info("progress (group 0 of ", world.dp, "): ", done_samples, "/", mine.size(), " samples, ", done_tokens,
               "/", my_tokens, " tokens, ", int64_t(rate), " tokens/s per group, ETA ",
               int64_t(double(my_tokens - done_tokens) / rate), " s, written ", human_bytes(double(writer->bytes_written())));
    }
  }
  json my_shards = json::array();
  if (writer)
    for (const io::ShardInfo& s : writer->finish()) my_shards.push_back(shard_json(s));
  const double peak_mib = peak_rss_mib();
  log_info("rank ", world.world_rank, " (group ", world.dp_rank, ", tp rank ", world.tp_rank, ") peak memory ",
           int64_t(peak_mib), " MiB");
  const double peak_mib_max = max_over_ranks(peak_mib);
  // Rank order = group order = input order: the manifest lists shards in dataset order.
  const std::vector<std::string> all_shards = gather_strings(my_shards.dump());
  if (!lead) return;

  const double seconds = std::chrono::duration<double>(Clock::now() - t_start).count();
  const double compute_seconds = std::chrono::duration<double>(Clock::now() - t_loaded).count();
  json m;
  m["format_version"] = io::kFormatVersion;
  m["complete"] = true;
  json pts = json::array();
  for (std::size_t p = 0; p < plan.points.size(); ++p)
    pts.push_back({{"spec", plan.points[p].spec}, {"id", plan.points[p].id}, {"meaning", plan.meaning(p)}});
  m["capture"] = {{"request", o.capture}, {"convention", kCaptureConvention}, {"points", pts}};
  m["model"] = {{"dir", fs::absolute(model_dir).string()},
                {"architecture", cfg.architecture},
                {"num_hidden_layers", cfg.num_layers},
                {"hidden_size", cfg.hidden_size},
                {"vocab_size", cfg.vocab_size},
                {"checkpoint_dtype", dtype_name(cfg.torch_dtype)},
                {"config_sha256", meta.config_sha256},
                {"weights_fingerprint", meta.weights_fingerprint}};
  m["dataset"] = {{"path", fs::absolute(o.data).string()},
                  {"sha256", dataset_sha256},
                  {"samples", samples.size()},
                  {"tokens", total_tokens}};
  m["storage_dtype"] = dtype_name(meta.dtype);
  json shards = json::array();
  int64_t bytes = 0, written_samples = 0, written_tokens = 0;
  for (const std::string& part : all_shards)
    for (const json& s : json::parse(part)) {
      bytes += s["bytes"].get<int64_t>();
      written_samples += s["samples"].get<int64_t>();
      written_tokens += s["tokens"].get<int64_t>();
      shards.push_back(s);
    }
  LT_CHECK(written_samples == int64_t(samples.size()) && written_tokens == total_tokens, "the shards hold ",
           written_samples, " samples and ", written_tokens, " tokens, the dataset ", samples.size(), " and ",
           total_tokens);
  m["shards"] = shards;
  m["totals"] = {{"samples", written_samples}, {"tokens", written_tokens}, {"bytes", bytes}};
  m["run"] = {{"command", o.command},
              {"layertap_version", LAYERTAP_VERSION},
              {"created", utc_now()},
              {"backend", backend.name()},
              {"world_size", world.world_size},
              {"tp", world.tp},
              {"dp", world.dp},
              {"max_batch_tokens", o.max_batch_tokens},
              {"seconds", seconds},
              {"tokens_per_s", double(written_tokens) / compute_seconds},
              {"peak_rss_mib_max", peak_mib_max}};
  io::write_json_atomically(fs::path(o.out) / "manifest.json", m);
  log_info("done: ", written_samples, " samples, ", written_tokens, " tokens, ", shards.size(), " shards, ",
           human_bytes(double(bytes)), " in ", seconds, " s (", int64_t(double(written_tokens) / compute_seconds),
           " tokens/s after loading) -> ", o.out);
}

}  // namespace layertap
