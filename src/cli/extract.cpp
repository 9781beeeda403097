#include "cli/extract.hpp"

#include <sys/resource.h>

#include <chrono>
#include <cstring>
#include <functional>
#include <iostream>
#include <sstream>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <thread>

#include "backend/cpu/ops.hpp"
#include "cli/backend_choice.hpp"
#include "cli/output_dir.hpp"
#include "comm/mpi_groups.hpp"
#include "comm/sharding.hpp"
#include "comm/world_layout.hpp"
#include "core/digest.hpp"
#include "core/failpoint.hpp"
#include "core/log.hpp"
#include "core/stop_request.hpp"
#include "core/text.hpp"
#include "io/dataset.hpp"
#include "io/durable_file.hpp"
#include "io/output_writer.hpp"
#include "io/progress.hpp"
#include "io/shard_reader.hpp"
#include "model/capture.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace layertap {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using nlohmann::json;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Kimi-K2.5 is multimodal; layertap runs its text model only, so a sample holding the media
// placeholder (whose states would need the vision tower) is an error, never silently wrong states.
void refuse_media_placeholder(const io::Sample& s, const ModelConfig& cfg) {
  if (cfg.media_placeholder_token_id < 0) return;
  for (std::size_t t = 0; t < s.input_ids.size(); ++t)
    LT_CHECK(s.input_ids[t] != cfg.media_placeholder_token_id, "sample ", s.index, " (id '", s.id,
             "') holds the media placeholder token ", cfg.media_placeholder_token_id, " at position ", t, ": ",
             cfg.architecture, " is extracted as a text-only model; remove image/video samples from the dataset");
}

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

// `f` on world rank 0 only; then every rank throws rank 0's error, if any, so all stop alike.
void on_lead(bool lead, const std::function<void()>& f) {
  std::string error;
  if (lead) {
    try {
      f();
    } catch (const Error& e) {
      error = e.what();
    }
  }
  broadcast_from_world_root(error);
  LT_CHECK(error.empty(), error);
}

// Bytes of the output: hidden states [T, P, H], input ids (int32) and loss masks (uint8) per
// token, offsets and sample indices (int64) per sample, and per shard its partly filled last
// chunks (/hidden_states chunks hold about 2 MiB, token chunks 64Ki entries) and HDF5 metadata.
int64_t projected_output_bytes(int64_t tokens, int64_t samples, int64_t points, int64_t hidden, DType dtype,
                               int64_t groups, int64_t shard_bytes) {
  const int64_t data = tokens * (points * hidden * int64_t(dtype_size(dtype)) + 5) + samples * 16;
  const int64_t shards = groups + data / shard_bytes;
  constexpr int64_t kPerShard = (int64_t(2) << 20) + (int64_t(1) << 16) * 5 + (int64_t(1) << 12) * 16 + (64 << 10);
  return data + shards * kPerShard;
}

// Free space at --out, counting the shards --resume keeps or --overwrite replaces as available.
int64_t available_bytes(const ExtractOptions& o) {
  return cli::free_bytes_at(o.out) + (o.resume || o.overwrite ? cli::shard_bytes_in(o.out) : 0);
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
  on_lead(lead, [&] {
    index = io::index_jsonl_dataset(path, cfg.vocab_size, threads,
                                    [&](const io::Sample& s) { refuse_media_placeholder(s, cfg); });
  });
  std::string spans(index.samples.size() * sizeof(io::SampleSpan), '\0');
  std::memcpy(spans.data(), index.samples.data(), spans.size());
  broadcast_from_world_root(spans);
  broadcast_from_world_root(index.sha256);
  index.samples.resize(spans.size() / sizeof(io::SampleSpan));
  std::memcpy(index.samples.data(), spans.data(), spans.size());
  index.lines = broadcast_from_world_root(index.lines);
  return index;
}

std::string utc_now() {
  const std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

double peak_rss_mib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // Linux reports KiB
}

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
  meta.dtype = parse_dtype(o.store_dtype);
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
          {"world_size", world.world_size},           {"tp", world.tp},
          {"moe_split", moe_split_name(moe_split)}};
}

// Samples of `mine` that a kept shard range should hold but does not: skipped before the resume.
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

// Rank 0: the manifest, from every rank's shard list (`parts`, in rank order = input order).
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
  m["shards"] = shards;
  m["skipped_samples"] = all_skipped;
  m["totals"] = {{"samples", written_samples}, {"tokens", written_tokens}, {"bytes", bytes}};
  m["run"] = {{"command", o.command},
              {"layertap_version", LAYERTAP_VERSION},
              {"created", utc_now()},
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


// --dry-run: every check of a real run, the plan per group, the output's size against the free
// space, and (with --calibrate-batches) the time from a few batches of each group. Writes nothing.
int dry_run(const ExtractOptions& o, const ModelConfig& cfg, const CapturePlan& plan, const io::DatasetIndex& index,
            const std::vector<std::pair<std::size_t, std::size_t>>& group_ranges, const WorldLayout& world,
            const TpShard& shard, const std::string& backend_name, int64_t projected, Clock::time_point t_start) {
  const bool lead = world.world_rank == 0;
  const std::vector<int64_t> lengths = index.lengths();
  std::ostringstream report;
  report << "dry run: nothing is written\n";
  report << "dataset     " << o.data << ": " << index.samples.size() << " samples, " << index.total_tokens()
         << " tokens, indexed and planned in " << fixed(seconds_since(t_start), 2) << " s\n";
  report << "layout      world " << world.world_size << " = " << world.dp << " data-parallel groups x tp " << world.tp
         << ", backend " << backend_name << ", batches of up to " << o.max_batch_tokens << " tokens\n";
  int64_t most_tokens = 0;
  for (std::size_t g = 0; g < group_ranges.size(); ++g) {
    const auto [first, last] = group_ranges[g];
    const std::vector<int64_t> mine(lengths.begin() + long(first), lengths.begin() + long(last));
    const int64_t tokens = std::accumulate(mine.begin(), mine.end(), int64_t(0));
    most_tokens = std::max(most_tokens, tokens);
    if (g < 8 || g + 1 == group_ranges.size())
      report << "group " << g << (g < 10 ? "     " : "    ") << (last - first) << " samples, " << tokens << " tokens, "
             << plan_batches(mine, 0, o.max_batch_tokens).size() << " batches\n";
    else if (g == 8)
      report << "...\n";
  }
  const DType store = parse_dtype(o.store_dtype);
  const int64_t per_point = index.total_tokens() * cfg.hidden_size * int64_t(dtype_size(store));
  report << "output      " << plan.points.size() << " points x hidden " << cfg.hidden_size << " x " << o.store_dtype
         << ": " << human_bytes(per_point) << " per point, " << human_bytes(projected) << " in all with token data\n";
  const int64_t available = available_bytes(o);
  report << "free space  " << human_bytes(available) << " at " << o.out
         << (projected <= available ? " (enough)" : " (NOT enough: a real run would refuse to start)") << "\n";

  if (o.calibrate_batches > 0) {
    // A few batches of each group's own samples, on the backend a real run would use.
    MpiGroups groups(world);
    const Checkpoint ckpt(checkpoint_files(o.model));
    const auto t_load = Clock::now();
    const std::unique_ptr<Backend> backend =
        make_backend(backend_name, cfg, ckpt, shard, groups, o.max_batch_tokens, int64_t(plan.points.size()));
    const double load_s = max_over_ranks(seconds_since(t_load));
    const auto [first, last] = group_ranges[std::size_t(world.dp_rank)];
    const std::vector<int64_t> mine(lengths.begin() + long(first), lengths.begin() + long(last));
    auto batches = plan_batches(mine, 0, o.max_batch_tokens);
    batches.resize(std::min(batches.size(), std::size_t(o.calibrate_batches)));
    const std::size_t upto = batches.empty() ? first : first + batches.back().second;
    const std::vector<io::Sample> samples = io::read_samples(o.data, index, first, upto, cfg.vocab_size);
    const auto t_run = Clock::now();
    int64_t tokens = 0;
    for (const auto& [b0, b1] : batches) {
      PackedBatch pb;
      pb.offsets.push_back(0);
      for (std::size_t i = b0; i < b1; ++i) {
        pb.tokens.insert(pb.tokens.end(), samples[i].input_ids.begin(), samples[i].input_ids.end());
        pb.offsets.push_back(pb.num_tokens());
      }
      backend->forward(pb, plan, store);
      tokens += pb.num_tokens();
    }
    const double run_s = seconds_since(t_run);
    // Groups run side by side: the slowest group's remaining tokens at its measured rate.
    const double rate = run_s > 0 ? double(tokens) / run_s : 0;
    const double eta = rate > 0 ? double(most_tokens) / rate : 0;
    const double eta_max = max_over_ranks(eta);
    const int64_t measured = sum_over_ranks(tokens) / world.tp;
    report << "calibration " << measured << " tokens in up to " << o.calibrate_batches
           << " batches per group; weights loaded in " << fixed(load_s, 1) << " s\n";
    report << "estimate    about " << int64_t(load_s + eta_max) << " s for the run (" << int64_t(eta_max)
           << " s of forward passes at " << int64_t(rate) << " tokens/s per group, capture and writing not "
           << "included)\n";
  }
  if (lead) std::cout << report.str() << std::flush;
  world_barrier();
  return 0;
}

}  // namespace

int run_extract(const ExtractOptions& o, const MpiEnv& mpi) {
  const auto t_start = Clock::now();
  install_stop_handlers();
  const WorldLayout world = make_world_layout(mpi.rank(), mpi.size(), o.tp);
  const bool lead = world.world_rank == 0;  // logs progress, prepares --out, writes the manifest
  cpu::set_num_threads(o.threads);
  check_same_on_all_ranks("options", o.job_identity());

  // Everything a user can get wrong is checked before the weights are read.
  const fs::path out(o.out);
  cli::check_output_path(out);
  const std::string config_path = (fs::path(o.model) / "config.json").string();
  const ModelConfig cfg = load_model_config(config_path);
  const std::string backend_name = resolve_backend(o.backend, cfg);
  const TpShard shard{world.tp_rank, world.tp, parse_moe_split(o.moe_split)};
  check_tp_divisibility(cfg, shard);
  const CapturePlan plan = resolve_capture(o.capture, cfg.num_layers);
  // One validating pass over the dataset (rank 0), the same errors everywhere; each rank then
  // parses only its group's samples.
  const io::DatasetIndex index = share_dataset_index(
      o.data, cfg, o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency())), lead);
  check_sample_lengths(index, o.data, o.max_batch_tokens);
  if (lead)
    log_info("dataset ", o.data, " indexed in ", seconds_since(t_start), " s: ", index.samples.size(), " samples, ",
             index.total_tokens(), " tokens");
  const std::string& dataset_sha256 = index.sha256;
  const int64_t total_tokens = index.total_tokens();
  const auto group_ranges = split_by_tokens(index.lengths(), world.dp);
  const auto [first_sample, last_sample] = group_ranges[std::size_t(world.dp_rank)];
  check_host_memory(cfg, shard, o.max_batch_tokens, int64_t(plan.points.size()));
  const int64_t projected = projected_output_bytes(total_tokens, int64_t(index.samples.size()),
                                                   int64_t(plan.points.size()), cfg.hidden_size,
                                                   parse_dtype(o.store_dtype), world.dp, o.shard_size_mib << 20);
  if (o.dry_run) return dry_run(o, cfg, plan, index, group_ranges, world, shard, backend_name, projected, t_start);
  on_lead(lead, [&] {
    const int64_t available = available_bytes(o);
    LT_CHECK(o.ignore_free_space || projected <= available, "the output will take about ", human_bytes(projected),
             " (", total_tokens, " tokens x ", plan.points.size(), " points x hidden ", cfg.hidden_size, " as ",
             o.store_dtype, ", plus token data) but only ", human_bytes(available), " are free at '", o.out,
             "'; free space, choose another --out, capture fewer points, or pass --ignore-free-space");
  });
  const std::vector<io::Sample> mine = io::read_samples(o.data, index, first_sample, last_sample, cfg.vocab_size);

  const Checkpoint ckpt(checkpoint_files(o.model));
  check_same_on_all_ranks("model weights", ckpt.fingerprint());
  const io::OutputMeta meta = make_output_meta(o, cfg, plan, sha256_file(config_path), ckpt.fingerprint());
  const json identity = run_identity(meta, dataset_sha256, world, shard.moe_split);
  const auto state = cli::OutputState(broadcast_from_world_root(
      lead ? int64_t(cli::prepare_output_dir(out, identity, o.overwrite, o.resume)) : 0));
  if (state == cli::OutputState::AlreadyComplete) {
    if (lead) log_info("the run in ", o.out, " is already complete; nothing to do");
    return 0;
  }

  // A writer keeps the complete shards of an interrupted run; its TP group continues after them.
  const std::string stem = world.dp > 1 ? "shard-g" + zero_pad(world.dp_rank, 3) : "shard";
  std::vector<io::ShardInfo> kept;
  json skipped = json::array();
  MpiGroups groups(world);
  int64_t done = 0;  // samples of `mine` already in kept shards (or skipped before them)
  if (world.is_writer() && state == cli::OutputState::Resume) {
    kept = cli::keep_verified_shards(out, stem);
    if (!kept.empty()) {
      const int64_t last = kept.back().last_sample;
      while (done < int64_t(mine.size()) && mine[std::size_t(done)].index <= last) ++done;
      skipped = skipped_before_resume(out, kept, mine, std::size_t(done));
    }
  }
  done = groups.broadcast_in_tp_group(done);
  const auto batches = plan_batches(lengths_of(mine), std::size_t(done), o.max_batch_tokens);
  const int64_t steps = max_over_ranks(int64_t(batches.size()));  // every rank takes part in every stop check

  if (lead) {
    log_info("model ", cfg.architecture, " (", cfg.num_layers, " layers, hidden ", cfg.hidden_size, ") from ", o.model);
    log_info("world ", world.world_size, " ranks = ", world.dp, " data-parallel groups x tensor parallel ", world.tp);
    log_info("dataset ", o.data, ": ", index.samples.size(), " samples, ", total_tokens, " tokens; group 0 has ", mine.size(),
             " samples", done ? cat(" (", done, " kept from the interrupted run)") : "", " in ", batches.size(),
             " batches of up to ", o.max_batch_tokens, " tokens");
    std::string points;
    for (std::size_t p = 0; p < plan.points.size(); ++p)
      points += cat(p ? ", " : "", plan.points[p].spec, " (", plan.meaning(p), ")");
    log_info("capture '", o.capture, "' -> ", points);
  }
  const std::unique_ptr<Backend> backend =
      make_backend(backend_name, cfg, ckpt, shard, groups, o.max_batch_tokens, int64_t(plan.points.size()));
  const auto t_loaded = Clock::now();
  if (lead) log_info("weights loaded in ", seconds_since(t_start), " s");

  std::optional<io::OutputWriter> writer;
  if (world.is_writer()) writer.emplace(out, stem, meta, o.shard_size_mib << 20, kept);
  int64_t done_samples = 0, done_tokens = 0, my_tokens = 0;
  for (const auto& [first, last] : batches)
    for (std::size_t i = first; i < last; ++i) my_tokens += int64_t(mine[i].input_ids.size());
  auto last_progress = Clock::now();
  bool stopped = false;
  for (int64_t step = 0; step < steps; ++step) {
    if (any_rank(stop_requested())) {
      stopped = true;
      break;
    }
    if (step >= int64_t(batches.size())) continue;  // this group is done; it still joins the stop checks
    const auto [first, last] = batches[std::size_t(step)];
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
    failpoint("forward");  // crash tests: die in the middle of the job
    cb.states = backend->forward(pb, plan, meta.dtype);
    done_samples += pb.num_samples();
    done_tokens += pb.num_tokens();
    if (writer) {
      cb.offsets = pb.offsets;
      cb.input_ids = std::move(pb.tokens);
      cb.hidden = cfg.hidden_size;
      cb.dtype = meta.dtype;
      std::vector<int64_t> drop;
      for (const auto& bad : cb.nonfinite_samples()) {
        const io::Sample& s = mine[first + std::size_t(bad.sample)];
        LT_CHECK(o.on_nonfinite == "skip", "sample '", s.id, "' (index ", s.index, ") has NaN/Inf states at capture point ",
                 plan.points[std::size_t(bad.point)].spec, "; pass --on-nonfinite skip to leave such samples out");
        log_warn("skipping sample '", s.id, "' (index ", s.index, "): NaN/Inf states at capture point ",
                 plan.points[std::size_t(bad.point)].spec);
        skipped.push_back({{"index", s.index}, {"id", s.id}, {"reason", "non-finite states"}});
        drop.push_back(bad.sample);
      }
      cb.drop_samples(drop);
      if (cb.num_samples() > 0) writer->submit(std::move(cb));
    }
    if (lead && seconds_since(last_progress) >= o.progress_seconds) {
      last_progress = Clock::now();
      const double rate = double(done_tokens) / seconds_since(t_loaded);
      log_info("progress (group 0 of ", world.dp, "): ", done + done_samples, "/", mine.size(), " samples, ",
               done_tokens, "/", my_tokens, " tokens, ", int64_t(rate), " tokens/s per group, ETA ",
               int64_t(double(my_tokens - done_tokens) / rate), " s, written ", human_bytes(writer->bytes_written()));
    }
  }
  if (stopped && lead) log_warn("stop requested (", stop_signal_name()[0] ? stop_signal_name() : "on another rank",
                                "): closing complete shards and writing an incomplete manifest");
  json my_part = {{"shards", json::array()}, {"skipped", skipped}};
  if (writer)
    for (const io::ShardInfo& s : writer->finish()) my_part["shards"].push_back(io::to_json(s));
  const double peak_mib = peak_rss_mib();
  log_info("rank ", world.world_rank, " (group ", world.dp_rank, ", tp rank ", world.tp_rank, ") peak memory ",
           int64_t(peak_mib), " MiB");
  const double peak_mib_max = max_over_ranks(peak_mib);
  const int64_t tokens_this_run = sum_over_ranks(done_tokens) / world.tp;  // every TP rank counted its group's
  // Rank order = group order = input order: the manifest lists shards in dataset order.
  const std::vector<std::string> parts = gather_strings(my_part.dump());
  if (lead)
    write_manifest(o, cfg, plan, meta, world, index.samples.size(), total_tokens, dataset_sha256, parts, stopped,
                   backend->name(), seconds_since(t_start), double(tokens_this_run) / seconds_since(t_loaded),
                   peak_mib_max);
  // No rank exits before the manifest is on disk: a launcher that ends the job when a rank exits
  // (srun --kill-on-bad-exit, after a graceful stop's exit code 75) must not cut it short.
  world_barrier();
  return stopped ? kExitInterrupted : 0;
}

}  // namespace layertap
