#include "job/extract_job.hpp"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <thread>

#include "backend/cpu/ops.hpp"
#include "comm/mpi_groups.hpp"
#include "comm/sharding.hpp"
#include "comm/world_layout.hpp"
#include "core/backend_names.hpp"
#include "core/buffer_pool.hpp"
#include "core/digest.hpp"
#include "core/failpoint.hpp"
#include "core/log.hpp"
#include "core/stop_request.hpp"
#include "core/text.hpp"
#include "io/dataset.hpp"
#include "io/durable_file.hpp"
#include "io/output_lock.hpp"
#include "io/output_writer.hpp"
#include "io/progress.hpp"
#include "io/shard_reader.hpp"
#include "job/backend_choice.hpp"
#include "job/chunk_joiner.hpp"
#include "job/dataset_plan.hpp"
#include "job/output_dir.hpp"
#include "job/run_manifest.hpp"
#include "model/capture.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace layertap::job {
namespace {

// ", K samples longer than a batch run in chunks (the longest: N tokens)", or "" when none is.
std::string chunked_note(const std::vector<int64_t>& lengths, int64_t max_batch_tokens) {
  const auto longer = std::count_if(lengths.begin(), lengths.end(), [&](int64_t n) { return n > max_batch_tokens; });
  if (longer == 0) return "";
  return cat(", ", longer, " sample", longer > 1 ? "s" : "", " longer than a batch run in chunks (the longest: ",
             *std::max_element(lengths.begin(), lengths.end()), " tokens)");
}

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The fault-injection tests' NaN: the first value at token `token` of a state [T, hidden] of
// `dtype` (BF16 or F32: float8 storage quantizes later).
void poison_state(std::vector<std::byte>& state, DType dtype, int64_t hidden, int64_t token) {
  std::byte* p = state.data() + std::size_t(token * hidden) * dtype_size(dtype);
  if (dtype == DType::F32) {
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::memcpy(p, &nan, 4);
  } else {
    const std::uint16_t nan = 0x7fc0;
    std::memcpy(p, &nan, 2);
  }
}
using nlohmann::json;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// Every line of `text` after `prefix`.
std::string indent(const std::string& text, const std::string& prefix) {
  std::string out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out += prefix + line + "\n";
  return out;
}

double peak_rss_mib() {
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_maxrss) / 1024.0;  // Linux reports KiB
}

// What every rank has settled before any weight is read: the checked model, capture plan, world
// layout, dataset index and split, the backend, and the verdicts of the memory and space checks.
struct RunPlan {
  explicit RunPlan(const ExtractOptions& options) : o(options) {}
  ExtractOptions o;  // as given, --max-batch-tokens auto resolved once the backend and the data are known
  bool auto_batch = false;  // it was auto
  Clock::time_point t_start = Clock::now();
  WorldLayout world;
  ModelConfig cfg;
  TpShard shard;
  CapturePlan plan;
  io::DatasetIndex index;
  std::vector<std::pair<std::size_t, std::size_t>> group_ranges;  // [first, last) sample of each group
  std::unique_ptr<BackendChoice> backend;                          // refers to cfg
  RankLoad load;
  OutputShape output;
  int64_t projected_bytes = 0;  // of the whole output: projected_output_bytes
  std::string host_problem;     // host_memory_problem's verdict ("" when it fits)
};

// --dry-run: every check of a real run, the plan per group, the output's size against the free
// space, and (with --calibrate-batches) the time from a few batches of each group. Writes nothing.
// Returns kExitDryRunRefused on every rank when a real run would refuse to start, after the whole
// plan is printed; 0 otherwise.
int dry_run(const RunPlan& run, MpiGroups& groups) {
  const ExtractOptions& o = run.o;
  const ModelConfig& cfg = run.cfg;
  const CapturePlan& plan = run.plan;
  const io::DatasetIndex& index = run.index;
  const WorldLayout& world = run.world;
  const BackendChoice& backend_choice = *run.backend;
  const std::string& host_problem = run.host_problem;
  const int64_t projected = run.projected_bytes;
  const bool lead = world.world_rank == 0;
  const std::vector<int64_t> lengths = index.lengths();
  std::ostringstream report;
  report << "dry run: nothing is written\n";
  report << "dataset     " << o.data << ": " << index.samples.size() << " samples, " << index.total_tokens()
         << " tokens, indexed and planned in " << fixed(seconds_since(run.t_start), 2) << " s\n";
  report << "layout      world " << world.world_size << " = " << world.dp << " data-parallel groups x tp " << world.tp
         << ", backend " << backend_choice.name() << ", batches of up to " << o.max_batch_tokens << " tokens"
         << (run.auto_batch ? " (--max-batch-tokens auto)" : "") << "\n";
  int64_t most_tokens = 0;
  for (std::size_t g = 0; g < run.group_ranges.size(); ++g) {
    const auto [first, last] = run.group_ranges[g];
    const std::vector<int64_t> mine(lengths.begin() + long(first), lengths.begin() + long(last));
    const int64_t tokens = std::accumulate(mine.begin(), mine.end(), int64_t(0));
    most_tokens = std::max(most_tokens, tokens);
    if (g < 8 || g + 1 == run.group_ranges.size())
      report << "group " << g << (g < 10 ? "     " : "    ") << (last - first) << " samples, " << tokens << " tokens, "
             << plan_batches(mine, 0, o.max_batch_tokens).size() << " batches" << chunked_note(mine, o.max_batch_tokens)
             << "\n";
    else if (g == 8)
      report << "...\n";
  }
  const DType store = o.store_dtype;
  const int64_t per_point = run.output.tokens * run.output.point_bytes_per_token();
  report << "output      " << plan.points.size() << " points x hidden " << cfg.hidden_size << " x "
         << dtype_name(store) << ": " << human_bytes(per_point) << " per point, " << human_bytes(projected)
         << " in all with token data"
         << (o.compress.enabled() ? " (before " + io::compression_name(o.compress) + " compression)" : "") << "\n";
  // Why a real run would refuse to start (world rank 0's list decides: it checks --out in a real run).
  std::vector<std::string> refusals;
  const int64_t available = available_bytes(o.out, o.resume || o.overwrite);
  const bool space = projected <= available;
  report << "free space  " << human_bytes(available) << " at " << o.out
         << (space                  ? " (enough)"
             : o.ignore_free_space ? " (NOT enough; --ignore-free-space: a real run would start anyway)"
                                   : " (NOT enough: a real run would refuse to start)")
         << "\n";
  if (!space && !o.ignore_free_space) refusals.push_back("not enough free space at --out");
  if (o.no_lock) {
    report << "lock        none (--no-lock: nothing keeps a second job out of --out)\n";
  } else if (const io::LockProbe lock = lead ? io::probe_output_lock(o.out) : io::LockProbe{}; !lock.why.empty()) {
    report << "lock        NOT free: " << lock.why << " (a real run would refuse to start)\n";
    refusals.push_back(lock.held ? "--out is in use by another job" : "--out cannot be locked");
  } else if (lead) {
    report << "lock        no other job holds " << (fs::path(o.out) / io::kLockFileName).string() << "\n";
  }

  // Each rank's memory plan (and, with --read-weights, its pre-read), in rank order.
  const Checkpoint ckpt(checkpoint_files(o.model));
  const RankPlan rank_plan = backend_choice.describe_plan(ckpt, groups, run.load);
  const std::vector<std::string> plans = gather_strings(
      cat("rank ", world.world_rank, " (group ", world.dp_rank, ", tp rank ", world.tp_rank, ")\n", rank_plan.text));
  const bool fits = !any_rank(!rank_plan.fits);
  report << "memory      per rank, backend " << backend_choice.name()
         << (fits ? "" : " (NOT enough device memory: a real run would refuse to start)") << "\n";
  for (const std::string& p : plans) report << indent(p, "  ");
  if (!fits) refusals.push_back("not enough device memory");
  if (!host_problem.empty()) {
    report << "host memory NOT enough: a real run would refuse to start: " << host_problem << "\n";
    refusals.push_back("not enough host memory");
  }
  if (o.read_weights && !host_problem.empty()) {
    report << "read        skipped (--read-weights): not enough host memory to load the weights\n";
  } else if (o.read_weights) {
    const std::vector<std::string> reads = gather_strings(
        cat("rank ", world.world_rank, ": ", backend_choice.pre_read(ckpt), "\n"));
    report << "read        every byte each rank loads (--read-weights)\n";
    for (const std::string& r : reads) report << indent(r, "  ");
  }
  // The cuda backend planned for --gpu-memory without a GPU here runs no calibration.
  const bool can_run = backend_choice.runs_here();
  if (o.calibrate_batches > 0 && !can_run)
    report << "calibration skipped: no GPU on this machine (the plan above is for --gpu-memory " << o.gpu_memory_gib
           << " GiB)\n";
  if (o.calibrate_batches > 0 && can_run && fits && host_problem.empty()) {
    // A few batches of each group's own samples, on the backend a real run would use.
    const auto t_load = Clock::now();
    const std::unique_ptr<Backend> backend = backend_choice.build(ckpt, groups, run.load);
    const double load_s = max_over_ranks(seconds_since(t_load));
    const auto [first, last] = run.group_ranges[std::size_t(world.dp_rank)];
    const std::vector<int64_t> mine(lengths.begin() + long(first), lengths.begin() + long(last));
    auto batches = plan_batches(mine, 0, o.max_batch_tokens);
    batches.resize(std::min(batches.size(), std::size_t(o.calibrate_batches)));  // may end inside a sample
    const std::size_t upto = batches.empty() ? first : first + batches.back().back().sample + 1;
    const std::vector<io::Sample> samples = io::read_samples(o.data, index, first, upto, cfg.vocab_size);
    const auto t_run = Clock::now();
    int64_t tokens = 0;
    for (const Batch& b : batches) {
      const PackedBatch pb = pack_batch(b, mine, [&](std::size_t i) -> const auto& { return samples[i].input_ids; });
      backend->forward(pb, plan, store == DType::F8_E4M3 ? DType::BF16 : store);
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
  const bool refuse = broadcast_from_world_root(refusals.empty() ? 0 : 1) != 0;
  if (refuse) {
    std::string why;
    for (const std::string& r : refusals) why += (why.empty() ? "" : "; ") + r;
    report << "verdict     a real run would refuse to start: " << why << " (exit code " << kExitDryRunRefused << ")\n";
  } else {
    report << "verdict     a real run would start\n";
  }
  if (lead) std::cout << report.str() << std::flush;
  world_barrier();
  return refuse ? kExitDryRunRefused : 0;
}

}  // namespace

int run_extract(const ExtractOptions& options, const MpiEnv& mpi) {
  RunPlan run(options);
  const ExtractOptions& o = run.o;
  const auto t_start = run.t_start;
  install_stop_handlers();
  // Until the batch loop, a stop signal ends the run at once (stop_point, polled collectives).
  StopPhase phase("checking the options");
  run.world = make_world_layout(mpi.rank(), mpi.size(), o.tp);
  const WorldLayout& world = run.world;
  const bool lead = world.world_rank == 0;  // logs progress, prepares --out, writes the manifest
  cpu::set_num_threads(o.threads);
  check_same_on_all_ranks("options", o.job_identity());

  // Everything a user can get wrong is checked before the weights are read.
  const fs::path out(o.out);
  check_output_path(out);
  // One job per --out (io/output_lock.hpp): world rank 0 takes the lock before anything in --out is
  // read or written and holds it until the process ends, error paths included; every rank stops
  // with rank 0's error. When --out holds a lock file (a job used it, or uses it now) it is taken
  // here, so a second job is refused within seconds, before it indexes the dataset; else
  // prepare_output_dir takes it (no job can be running where no lock file exists). The lock is
  // rank 0's alone: every rank reaches --out through the same shared directory, and the writers
  // (TP rank 0 of each group) write only while rank 0 lives (the launcher ends a job's ranks when
  // one dies). A dry run takes none; it reports a holder.
  bool locked = false;  // world rank 0
  if (!o.dry_run && !o.no_lock)
    run_on_world_root(lead, [&] {
      std::error_code ec;
      if (!fs::exists(fs::symlink_status(out / io::kLockFileName, ec))) return;
      io::OutputLock::exclusive(out).hold_until_exit();
      locked = true;
    });
  const std::string config_path = (fs::path(o.model) / "config.json").string();
  run.cfg = load_model_config(config_path);
  const ModelConfig& cfg = run.cfg;
  run.shard = TpShard{world.tp_rank, world.tp, o.moe_split};
  const TpShard& shard = run.shard;
  run.backend = choose_backend(o.backend, cfg, shard, o.dry_run && o.gpu_memory_gib > 0);
  const BackendChoice& backend_choice = *run.backend;
  check_tp_divisibility(cfg, shard);
  run.plan = resolve_capture(o.capture, cfg.num_layers);
  const CapturePlan& plan = run.plan;
  // One validating pass over the dataset (rank 0), the same errors everywhere; each rank then
  // parses only its group's samples.
  phase.enter("indexing the dataset");
  run.index = share_dataset_index(
      o.data, cfg, o.threads > 0 ? o.threads : int(std::max(1u, std::thread::hardware_concurrency())), lead);
  const io::DatasetIndex& index = run.index;
  if (lead)
    log_info("dataset ", o.data, " indexed in ", seconds_since(t_start), " s: ", index.samples.size(), " samples, ",
             index.total_tokens(), " tokens");
  const std::string& dataset_sha256 = index.sha256;
  const int64_t total_tokens = index.total_tokens();
  const std::vector<int64_t> lengths = index.lengths();
  run.group_ranges = split_by_tokens(lengths, world.dp);
  const auto [first_sample, last_sample] = run.group_ranges[std::size_t(world.dp_rank)];
  const int64_t group_tokens = std::accumulate(lengths.begin() + long(first_sample),
                                               lengths.begin() + long(last_sample), int64_t(0));
  // Parsed samples: int32 ids and a uint8 mask per token, and an id string and vectors per sample.
  const int64_t group_longest = last_sample > first_sample
                                    ? *std::max_element(lengths.begin() + long(first_sample),
                                                        lengths.begin() + long(last_sample))
                                    : 0;
  run.load = RankLoad{o.max_batch_tokens, o.max_sample_tokens > 0 ? o.max_sample_tokens : group_longest,
                      int64_t(plan.points.size()),
                      group_tokens * 5 + int64_t(last_sample - first_sample) * 128, o.gpu_memory_gib};
  MpiGroups groups(world);
  if (o.max_batch_tokens == kAutoBatchTokens) {
    run.auto_batch = true;
    run.o.max_batch_tokens = run.load.max_batch_tokens = auto_batch_tokens(backend_choice, groups, run.load);
    if (lead)
      log_info("--max-batch-tokens auto: ", o.max_batch_tokens, " tokens per batch (",
               backend_choice.name() == kCudaBackend
                   ? cat("the largest the device plan and the host's memory fit, at most ", kAutoBatchCap)
                   : std::string("the cpu backend's"),
               ")");
  }
  check_sample_lengths(index, o.data,
                       {o.max_batch_tokens, backend_choice.chunks_long_samples(), cfg.max_position_embeddings,
                        o.max_sample_tokens});
  run.host_problem = host_memory_problem(backend_choice, run.load);  // collective
  LT_CHECK(o.dry_run || run.host_problem.empty(), run.host_problem);
  if (lead)  // after the checks that can fail: a warning must not precede an unrelated error
    for (const std::string& w : plan.warnings) log_warn(w);
  run.output = OutputShape{total_tokens, int64_t(index.samples.size()), int64_t(plan.points.size()), cfg.hidden_size,
                           o.store_dtype};
  run.projected_bytes = projected_output_bytes(run.output, world.dp, o.shard_size_mib << 20);
  const int64_t projected = run.projected_bytes;
  phase.enter("planning (--dry-run)");
  if (o.dry_run) return dry_run(run, groups);
  run_on_world_root(lead, [&] {
    const int64_t available = available_bytes(o.out, o.resume || o.overwrite);
    LT_CHECK(o.ignore_free_space || projected <= available, "the output will take about ", human_bytes(projected),
             " (", total_tokens, " tokens x ", plan.points.size(), " points x hidden ", cfg.hidden_size, " as ",
             dtype_name(o.store_dtype), ", plus token data) but only ", human_bytes(available), " are free at '", o.out,
             "'; free space, choose another --out, capture fewer points, or pass --ignore-free-space");
  });
  phase.enter("reading this rank's samples");
  const std::vector<io::Sample> mine = io::read_samples(o.data, index, first_sample, last_sample, cfg.vocab_size);

  phase.enter("opening the checkpoint");
  const Checkpoint ckpt(checkpoint_files(o.model));
  check_same_on_all_ranks("model weights", ckpt.fingerprint());
  const io::OutputMeta meta = make_output_meta(o, cfg, plan, sha256_file(config_path), ckpt.fingerprint());
  const json identity = run_identity(meta, dataset_sha256, int64_t(index.samples.size()), world, shard.moe_split,
                                     backend_choice.name());
  phase.enter("preparing the output directory");
  int64_t prepared = 0;
  run_on_world_root(lead, [&] {  // every rank stops with rank 0's error (the lock's holder, a foreign file)
    prepared = int64_t(prepare_output_dir(out, identity, o.overwrite, o.resume, !o.no_lock && !locked));
  });
  const auto state = OutputState(broadcast_from_world_root(prepared));
  if (state == OutputState::AlreadyComplete) {
    if (lead) log_info("the run in ", o.out, " is already complete; nothing to do");
    return 0;
  }

  // A writer keeps the complete shards of an interrupted run; its TP group continues after them.
  const std::string stem = world.dp > 1 ? "shard-g" + zero_pad(world.dp_rank, 3) : "shard";
  std::vector<io::ShardInfo> kept;
  json skipped = json::array();
  int64_t done = 0;  // samples of `mine` already in kept shards (or skipped before them)
  if (world.is_writer() && state == OutputState::Resume) {
    // The group's own samples: a kept shard must start at the first of them and stay inside.
    kept = keep_verified_shards(out, stem, mine.empty() ? std::nullopt
                                                        : std::optional<SampleRange>(SampleRange{
                                                              mine.front().index, mine.back().index + 1}));
    if (!kept.empty()) {
      const int64_t last = kept.back().last_sample;
      while (done < int64_t(mine.size()) && mine[std::size_t(done)].index <= last) ++done;
      skipped = skipped_before_resume(out, kept, mine, std::size_t(done));
    }
  }
  done = groups.broadcast_in_tp_group(done);
  const std::vector<int64_t> my_lengths = lengths_of(mine);
  const auto batches = plan_batches(my_lengths, std::size_t(done), o.max_batch_tokens);
  const int64_t steps = max_over_ranks(int64_t(batches.size()));  // every rank takes part in every stop check

  if (lead) {
    log_info("model ", cfg.architecture, " (", cfg.num_layers, " layers, hidden ", cfg.hidden_size, ") from ", o.model);
    log_info("world ", world.world_size, " ranks = ", world.dp, " data-parallel groups x tensor parallel ", world.tp);
    log_info("dataset ", o.data, ": ", index.samples.size(), " samples, ", total_tokens, " tokens; group 0 has ", mine.size(),
             " samples", done ? cat(" (", done, " kept from the interrupted run)") : "", " in ", batches.size(),
             " batches of up to ", o.max_batch_tokens, " tokens", chunked_note(my_lengths, o.max_batch_tokens));
    std::string points;
    for (std::size_t p = 0; p < plan.points.size(); ++p)
      points += cat(p ? ", " : "", plan.points[p].spec, " (", plan.meaning(p), ")");
    log_info("capture '", o.capture, "' -> ", points);
  }
  phase.enter("loading the weights");
  // The states' buffers go round: forward -> writer -> back (core/buffer_pool.hpp), enough for
  // the batches the writer may hold (its queue, the one it writes) and the one in flight.
  BufferPool result_pool(plan.points.size() * 4);
  const std::unique_ptr<Backend> backend = backend_choice.build(ckpt, groups, run.load);
  backend->set_result_pool(&result_pool);
  phase.enter("waiting for the other ranks to load their weights");
  world_barrier();
  phase.end();  // the batch loop stops gracefully after the batch in flight
  const auto t_loaded = Clock::now();
  if (lead) log_info("weights loaded in ", seconds_since(t_start), " s");

  std::optional<io::OutputWriter> writer;
  if (world.is_writer()) {
    writer.emplace(out, stem, meta, o.shard_size_mib << 20, kept);
    writer->recycle_into(&result_pool);
  }
  int64_t done_samples = 0, done_tokens = 0, my_tokens = 0;
  for (const Batch& b : batches)
    for (const Segment& seg : b) my_tokens += seg.tokens();
  ChunkJoiner joiner(cfg.hidden_size * int64_t(dtype_size(meta.batch_dtype())));
  ChunkJoiner routing_joiner(meta.routed_width() * int64_t(sizeof(int16_t)));  // [T, M, k] rows, as the states
  auto last_progress = Clock::now();
  bool stopped = false;
  for (int64_t step = 0; step < steps; ++step) {
    if (any_rank(stop_requested())) {
      stopped = true;
      break;
    }
    if (step >= int64_t(batches.size())) continue;  // this group is done; it still joins the stop checks
    const Batch& batch = batches[std::size_t(step)];
    const PackedBatch pb = pack_batch(batch, my_lengths, [&](std::size_t i) -> const auto& { return mine[i].input_ids; });
    failpoint("forward");  // crash tests: die in the middle of the job
    // float8 storage quantizes bf16 states; a chunked sample's rows wait for its last chunk
    std::vector<std::vector<std::byte>> states =
        joiner.join(batch, my_lengths, backend->forward(pb, plan, meta.batch_dtype()));
    std::vector<std::vector<std::byte>> routing;  // [1] the routing record's bytes, on the writer
    if (meta.routed_width() > 0 && !states.empty()) {
      const std::vector<int16_t> r = backend->routed_experts();
      LT_CHECK(int64_t(r.size()) == pb.num_tokens() * meta.routed_width(), "the backend recorded ", r.size(),
               " routing ids for a batch of ", pb.num_tokens(), " tokens x ", meta.routed_width());
      routing.emplace_back(reinterpret_cast<const std::byte*>(r.data()),
                           reinterpret_cast<const std::byte*>(r.data() + r.size()));
      routing = routing_joiner.join(batch, my_lengths, std::move(routing));
    }
    // The samples that end in this batch, whole (a long sample's earlier chunks ran before).
    const std::vector<std::size_t> ending = samples_ending_in(batch, my_lengths);
    CapturedBatch cb;
    cb.offsets.push_back(0);
    for (const std::size_t i : ending) {
      const io::Sample& s = mine[i];
      cb.sample_index.push_back(s.index);
      cb.input_ids.insert(cb.input_ids.end(), s.input_ids.begin(), s.input_ids.end());
      cb.loss_mask.insert(cb.loss_mask.end(), s.loss_mask.begin(), s.loss_mask.end());
      cb.offsets.push_back(cb.num_tokens());
    }
    cb.states = std::move(states);
    if (!routing.empty()) {
      cb.routed_width = meta.routed_width();
      const auto* ids = reinterpret_cast<const int16_t*>(routing[0].data());
      cb.routed_experts.assign(ids, ids + routing[0].size() / sizeof(int16_t));
    }
    if (!cb.states.empty())
      for (std::size_t k = 0; k < ending.size(); ++k)  // fault injection: LAYERTAP_FAILPOINT=state:<index>:nan
        if (failpoint_poisons("state", long(mine[ending[k]].index)))
          poison_state(cb.states.back(), meta.batch_dtype(), cfg.hidden_size, cb.offsets[k]);
    done_samples += int64_t(ending.size());
    done_tokens += pb.num_tokens();
    if (writer && !ending.empty()) {
      cb.hidden = cfg.hidden_size;
      cb.dtype = meta.batch_dtype();
      std::vector<int64_t> drop;
      for (const auto& bad : cb.nonfinite_samples()) {
        const io::Sample& s = mine[ending[std::size_t(bad.sample)]];
        LT_CHECK(o.on_nonfinite == NonFinitePolicy::Skip, "sample '", s.id, "' (index ", s.index, ") has NaN/Inf states at capture point ",
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
    write_manifest(RunRecord{.opts = o,
                             .cfg = cfg,
                             .plan = plan,
                             .meta = meta,
                             .world = world,
                             .dataset = {index.samples.size(), total_tokens, dataset_sha256},
                             .backend = backend->name(),
                             .seconds = seconds_since(t_start),
                             .tokens_per_s = double(tokens_this_run) / seconds_since(t_loaded),
                             .peak_rss_mib_max = peak_mib_max,
                             .stopped = stopped},
                   parts);
  // No rank exits before the manifest is on disk: a launcher that ends the job when a rank exits
  // (srun --kill-on-bad-exit, after a graceful stop's exit code 75) must not cut it short.
  world_barrier();
  return stopped ? kExitInterrupted : 0;
}

}  // namespace layertap::job
