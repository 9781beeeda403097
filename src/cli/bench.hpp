// `layertap bench` / `layertap_bench`: the CUDA backend on a synthetic model (random weights made
// on the device, quantized ones packed as the checkpoint would store them) over packed batches.
// Prints tokens/s without and with capture (same run) and the capture overhead; for dense models
// the cuBLASLt bf16 GEMM rate on the model's own product shapes and tokens/s as a fraction of the
// GEMM-bound limit; for MoE models per-layer times, the expert load on this rank under uniform and
// skewed (Zipf) routing, and with --tp-shard N one rank's share of an N-GPU tensor-parallel group
// with the group's tokens/s projected from a stated all-reduce bus bandwidth. Measures, never
// asserts. Needs no MPI, HDF5 or Boost (the options are parsed here).
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "model/hf_config.hpp"

namespace layertap {

struct BenchOptions {
  std::string model = "llama3-8b";            // synthetic shape (synthetic_model_names())
  std::vector<std::int64_t> tokens = {8192, 16384};  // tokens per packed batch, one row each
  std::string capture = "eagle3";             // capture points (layertap's --capture syntax)
  std::int64_t sample_tokens = 2048;          // tokens per sample inside a batch
  int iters = 5;                              // timed forwards per mode; the median is reported
  int warmup = 1;                             // untimed forwards per mode first
  int gemm_iters = 10;                        // passes over the layers' four products per timing
  std::string attention = "auto";             // auto, reference, flash
  int device = 0;
  std::uint64_t seed = 1;
  // One rank's share of a tensor-parallel group of tp_shard GPUs (the all-reduces are modelled,
  // not run): its heads, its experts (or expert slices), its slice of the dense and shared MLPs.
  int tp_shard = 1;
  int tp_rank = 0;
  std::string moe_split = "experts";          // experts | intermediate
  std::int64_t layers = 0;                    // 0: the model's, or as many as fit (the count is printed)
  std::vector<std::string> routing = {"uniform", "zipf"};  // MoE models: expert load(s) to run
  double zipf_s = 1.0;                        // zipf: router logit of expert e offset by -s ln(e + 1)
  std::vector<double> bus_gbs = {450.0, 50.0};  // all-reduce bus bandwidths of the projection, GB/s
  double baseline = 2280.0;                   // published tokens/s to compare (Kimi-K2.5, 8 GPUs)
};

// The projection of a tensor-parallel group's step from one rank's forward time: each of the
// 2 * layers all-reduces of (tokens, hidden) bf16 takes 2 (n - 1) / n * bytes / bus (ring
// all-reduce bus bandwidth), not overlapped with compute; every rank of the group works on the
// same batch, so the group's tokens/s is tokens / step.
struct TpProjection {
  double allreduce_ms = 0;  // one all-reduce
  double step_ms = 0;       // rank forward + all the all-reduces
  double tokens_per_s = 0;  // of the whole group
};
TpProjection project_tp(std::int64_t tokens, std::int64_t hidden, std::int64_t layers, int ranks, double bus_gbs,
                        double rank_forward_ms);

// Router logit offsets of a Zipf(s) expert load: -s ln(e + 1) for expert e (expert 0 the hottest).
std::vector<float> zipf_logit_offsets(std::int64_t experts, double s);

// The names synthetic_model_config knows.
std::vector<std::string> synthetic_model_names();

// Usage text of the options.
std::string bench_usage();

// Parses arguments (program and subcommand names excluded): --synthetic NAME, --tokens 8192,16384,
// --points N (4 = eagle3; else N points spread over the layers, the last one `final`),
// --capture SPEC, --sample-tokens N, --iters N, --warmup N, --gemm-iters N, --attention K,
// --device N, --seed N; `--key value` or `--key=value`. Returns false after --help (usage
// printed to `out`). Throws layertap::Error on unknown or invalid options.
bool parse_bench_options(const std::vector<std::string>& args, BenchOptions& opts, std::ostream& out);

// The ModelConfig of a synthetic model name (`layers` > 0 overrides its layer count); throws
// naming the known ones. kimi-k2.5 and deepseek-v3 are parsed from config.json text as the
// checkpoints' own (INT4 groups of 32 on the routed experts; FP8 blocks of 128 x 128).
ModelConfig synthetic_model_config(const std::string& name, std::int64_t layers = 0);

// Runs the benchmark on the GPU opts.device; prints to `out`; returns 0, or throws
// layertap::Error (no GPU, model does not fit, ...).
int run_bench(const BenchOptions& opts, std::ostream& out);

// parse_bench_options + run_bench: what `layertap bench ARGS...` calls; 0 after --help.
int bench_main(const std::vector<std::string>& args, std::ostream& out);

}  // namespace layertap
