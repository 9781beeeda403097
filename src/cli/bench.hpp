// `layertap bench` / `layertap_bench`: the CUDA backend on a synthetic model (random bf16 weights
// made on the device) over packed batches. Prints tokens/s without and with capture (same run),
// the capture overhead, the cuBLASLt bf16 GEMM rate on the model's own product shapes, and
// tokens/s as a fraction of the GEMM-bound limit (2 x matmul params FLOP per token at that rate).
// Measures, never asserts. Needs no MPI, HDF5 or Boost (the options are parsed here).
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "model/hf_config.hpp"

namespace layertap {

struct BenchOptions {
  std::string model = "llama3-8b";            // synthetic shape: llama3-8b, qwen3-8b, tiny
  std::vector<std::int64_t> tokens = {8192, 16384};  // tokens per packed batch, one row each
  std::string capture = "eagle3";             // capture points (layertap's --capture syntax)
  std::int64_t sample_tokens = 2048;          // tokens per sample inside a batch
  int iters = 5;                              // timed forwards per mode; the median is reported
  int warmup = 1;                             // untimed forwards per mode first
  int gemm_iters = 10;                        // passes over the layers' four products per timing
  std::string attention = "auto";             // auto, reference, flash
  int device = 0;
  std::uint64_t seed = 1;
};

// Usage text of the options.
std::string bench_usage();

// Parses arguments (program and subcommand names excluded): --synthetic NAME, --tokens 8192,16384,
// --points N (4 = eagle3; else N points spread over the layers, the last one `final`),
// --capture SPEC, --sample-tokens N, --iters N, --warmup N, --gemm-iters N, --attention K,
// --device N, --seed N; `--key value` or `--key=value`. Returns false after --help (usage
// printed to `out`). Throws layertap::Error on unknown or invalid options.
bool parse_bench_options(const std::vector<std::string>& args, BenchOptions& opts, std::ostream& out);

// The ModelConfig of a synthetic model name; throws naming the known ones.
ModelConfig synthetic_model_config(const std::string& name);

// Runs the benchmark on the GPU opts.device; prints to `out`; returns 0, or throws
// layertap::Error (no GPU, model does not fit, ...).
int run_bench(const BenchOptions& opts, std::ostream& out);

// parse_bench_options + run_bench: what `layertap bench ARGS...` calls; 0 after --help.
int bench_main(const std::vector<std::string>& args, std::ostream& out);

}  // namespace layertap
