#include "cli/options.hpp"

#include <boost/program_options.hpp>
#include <sstream>
#include <iostream>

#include "core/error.hpp"
#include "core/regular_file.hpp"
#include "io/compression.hpp"
#include "io/shard_writer.hpp"
#include "model/weights.hpp"

namespace layertap {

namespace po = boost::program_options;

namespace {

// A typed option spelled as text: `parse` turns it into `target` when the options are notified
// (defaults included); its error names the option and the accepted values.
template <class T, class Parse>
po::typed_value<std::string>* spelled(T& target, const std::string& default_spelling, Parse parse) {
  return po::value<std::string>()->default_value(default_spelling)->notifier(
      [&target, parse](const std::string& s) { target = parse(s); });
}

}  // namespace

ParseOutcome parse_extract_options(const std::vector<std::string>& args, ExtractOptions& o) {
  po::options_description job("Job options (also accepted as 'key = value' lines in a --config file)");
  job.add_options()
      ("model", po::value(&o.model)->required(), "Hugging Face model directory (config.json + safetensors)")
      ("data", po::value(&o.data)->required(), "tokenized dataset, JSON Lines: {\"input_ids\": [...], \"loss_mask\": [...], \"id\": ...}")
      ("out", po::value(&o.out)->required(), "output directory (shards + manifest.json)")
      ("capture", po::value(&o.capture)->default_value(o.capture),
       "capture points: comma-separated layer inputs 0..L-1, 'last' (= L, last layer output before the "
       "final norm), 'final' (after the final norm), or the preset 'eagle3' (= 2, L/2, L-3, final)")
      ("backend", spelled(o.backend, "auto", parse_backend_request),
       "compute backend: cpu (float32 weights on the host, every supported model), cuda (bf16, one GPU per "
       "rank by local rank, every supported family; weights go from the checkpoint to the GPU in their stored "
       "form), or auto (cuda when every rank sees a GPU and the build has CUDA, else cpu)")
      ("gpu-memory", po::value(&o.gpu_memory_gib)->default_value(o.gpu_memory_gib),
       "GiB of device memory per rank the cuda backend may use, 1 to 1e6; 0 = the device's free memory. Required "
       "for --dry-run --backend cuda on a machine without a GPU (plans for a card of this size)")
      ("tp", po::value(&o.tp)->default_value(o.tp),
       "tensor-parallel size: ranks per model replica (consecutive ranks); the world size must be a multiple")
      ("moe-split", spelled(o.moe_split, "experts", parse_moe_split),
       "MoE models under --tp: 'experts' gives each rank whole routed experts (expert parallelism inside "
       "the group), 'intermediate' slices every expert along its intermediate size; shared experts and "
       "dense MLPs are always sliced")
      ("max-batch-tokens", spelled(o.max_batch_tokens, "auto", parse_batch_tokens),
       "tokens packed into one forward pass (1 to 16777216), or auto: the cuda backend the largest batch "
       "its device plan and the host's memory fit, at most 65536; the cpu backend 8192. A longer sample "
       "runs in chunks, the keys and values of its earlier chunks kept")
      ("max-sample-tokens", po::value(&o.max_sample_tokens)->default_value(o.max_sample_tokens),
       "the longest sample the run takes, which sizes the keys and values kept of a sample run in chunks "
       "(0 = the longest in the data); a longer sample is refused naming its line, and so is a value beyond "
       "the model's max_position_embeddings")
      ("threads", po::value(&o.threads)->default_value(o.threads), "CPU threads for matrix products per rank (0 = all cores)")
      ("store-dtype", spelled(o.store_dtype, "bfloat16", io::parse_storage_dtype),
       "element type of /hidden_states: bfloat16 (the CUDA backend's bf16 states as they are; the CPU "
       "backend's float32 states rounded to nearest), float32, or float8_e4m3 (1 byte per value and one "
       "float32 scale per token and point: lossy, half of bf16; its error against bf16 is measured and "
       "recorded in the manifest)")
      ("compress", spelled(o.compress, "none", io::parse_compression),
       "lossless compression of /hidden_states, chunk by chunk on worker threads: none, lz4 (byte shuffle "
       "+ LZ4), zstd[:level] (byte shuffle + Zstandard) or gzip[:level] (slow); docs/FORMAT.md says how "
       "h5py reads each")
      ("shard-size-mib", po::value(&o.shard_size_mib)->default_value(o.shard_size_mib),
       "close a shard once it holds this many MiB of hidden states")
      ("overwrite", po::bool_switch(&o.overwrite), "replace the shards and manifest of an earlier run in --out")
      ("resume", po::bool_switch(&o.resume),
       "continue an interrupted run in --out (same options, model, dataset and world layout): complete "
       "shards whose checksums match are kept, the rest is recomputed; starts fresh when --out holds no run")
      ("on-nonfinite", spelled(o.on_nonfinite, "fail", parse_nonfinite_policy),
       "a sample whose states hold NaN/Inf: 'fail' stops the job naming it, 'skip' leaves it out and "
       "lists it in the manifest")
      ("dry-run", po::bool_switch(&o.dry_run),
       "check everything, index the dataset and print the plan: samples, tokens and batches per group, "
       "bytes per capture point and in all, the free space at --out, and the estimated time from a short "
       "calibration run (--calibrate-batches); writes nothing. Exits 3 (after the whole plan) when a real "
       "run would refuse to start: not enough device or host memory or free space, --out in use")
      ("calibrate-batches", po::value(&o.calibrate_batches)->default_value(o.calibrate_batches),
       "--dry-run: batches each group runs to measure its speed (loads the weights; 0 skips the estimate; "
       "skipped where the backend's device is absent)")
      ("read-weights", po::bool_switch(&o.read_weights),
       "--dry-run: read every byte of the checkpoint each rank would load, through the load path of its "
       "backend, checking shapes, INT4 weight_shape values, finite weights and finite positive FP8/INT4 "
       "scales; reports bytes, seconds, GB/s and peak anonymous memory per rank (no GPU needed)")
      ("ignore-free-space", po::bool_switch(&o.ignore_free_space),
       "start even when the projected output is larger than the free space at --out")
      ("no-lock", po::bool_switch(&o.no_lock),
       "run without the lock on --out/.layertap.lock that keeps a second job out of the same --out: only "
       "where its file system cannot hold flock(2) locks (NFSv3 without lockd, Lustre without -o flock); "
       "nothing then stops two jobs writing one output")
      ("progress-seconds", po::value(&o.progress_seconds)->default_value(o.progress_seconds),
       "seconds between progress lines on rank 0")
      ("log-level", po::value(&o.log_level)->default_value(o.log_level), "debug, info, warning or error");
  std::string config_file;
  po::options_description generic("General");
  generic.add_options()
      ("config", po::value(&config_file), "job file with the options above as 'key = value' lines")
      ("help,h", "print this help")
      ("version", "print the version");
  po::options_description all;
  all.add(job).add(generic);

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).run(), vm);
    if (vm.count("help")) {
      std::cout << "Usage: layertap extract --model DIR --data FILE.jsonl --out DIR [options]\n"
                   "       mpirun -np N layertap extract ... --tp T\n\n"
                   "Runs the model over the dataset and writes the hidden states at the capture points\n"
                   "to HDF5 shards in --out, then manifest.json (written last: a run without it is incomplete).\n\n"
                << all
                << "\nExit codes: 0 done; 1 error (every rank stops, no manifest; also when another job holds --out);\n"
                   "3 --dry-run found that a real run would refuse to start (device or host memory, free space,\n"
                   "--out in use), after printing the whole plan; 75 stopped by SIGTERM, SIGUSR1 or SIGINT\n"
                   "(Ctrl-C; a second one ends at once) after closing complete shards (manifest says\n"
                   "\"complete\": false): rerun with --resume.\n";
      return ParseOutcome::Exit;
    }
    if (vm.count("version")) {
      std::cout << "layertap " << LAYERTAP_VERSION << "\n";
      return ParseOutcome::Exit;
    }
    if (vm.count("config")) {
      const std::string file = vm["config"].as<std::string>();
      std::istringstream in(read_regular_file(file, "job file", std::size_t(1) << 20));
      po::store(po::parse_config_file(in, job), vm);  // values already set on the command line win
    }
    po::notify(vm);
  } catch (const po::error& e) {
    LT_FAIL(e.what(), " (see 'layertap extract --help')");
  }
  LT_CHECK(o.tp >= 1, "--tp must be at least 1, got ", o.tp);
  // Bounded so that every buffer sized from it (tokens x hidden x points x bytes) fits 64 bits.
  LT_CHECK(o.max_batch_tokens == kAutoBatchTokens || (o.max_batch_tokens > 0 && o.max_batch_tokens <= kMaxBatchTokens),
           "--max-batch-tokens must be auto or in [1, ", kMaxBatchTokens, "], got ", o.max_batch_tokens);
  LT_CHECK(o.max_sample_tokens >= 0 && o.max_sample_tokens <= kMaxBatchTokens, "--max-sample-tokens must be in [0, ",
           kMaxBatchTokens, "], got ", o.max_sample_tokens);
  LT_CHECK(o.threads >= 0, "--threads must be 0 or positive, got ", o.threads);
  // Bounded so that the size in bytes (MiB << 20) cannot overflow: 1 TiB shards are already unwieldy.
  LT_CHECK(o.shard_size_mib > 0 && o.shard_size_mib <= (int64_t(1) << 20), "--shard-size-mib must be in [1, ",
           int64_t(1) << 20, "] (1 TiB), got ", o.shard_size_mib);
  LT_CHECK(o.progress_seconds > 0, "--progress-seconds must be positive");
  // 0 means "not given" (the device's free memory); a positive value under 1 GiB would round to
  // nothing in bytes and be read as not given, so it is refused.
  LT_CHECK(o.gpu_memory_gib == 0 || (o.gpu_memory_gib >= 1 && o.gpu_memory_gib <= 1e6),
           "--gpu-memory must be 0 (the device's free memory) or in [1, 1e6] GiB, got ", o.gpu_memory_gib);
  LT_CHECK(!o.read_weights || o.dry_run, "--read-weights is a --dry-run option (a real run reads the weights anyway)");
  LT_CHECK(o.calibrate_batches >= 0, "--calibrate-batches must be 0 or positive, got ", o.calibrate_batches);
  LT_CHECK(!(o.overwrite && o.resume), "--overwrite and --resume exclude each other");
  return ParseOutcome::Run;
}


}  // namespace layertap
