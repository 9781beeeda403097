// `layertap bench` / `layertap_bench`: the CUDA backend on a synthetic model (random weights made
// on the device, quantized ones packed as the checkpoint would store them) over packed batches.
// Prints tokens/s without and with capture (same run) and the capture overhead; for dense models
// the cuBLASLt bf16 GEMM rate on the model's own product shapes and tokens/s as a fraction of the
// GEMM-bound limit; for MoE models per-layer times, the expert load on this rank under uniform and
// skewed (Zipf) routing, and with --tp-shard N one rank's share of an N-GPU tensor-parallel group
// with the group's tokens/s projected from a stated all-reduce bus bandwidth. Measures speed,
// never asserts it; checks each timed configuration's result once (result_check.hpp). Needs no
// MPI or HDF5; the options are parsed in src/cli/bench.cpp.
#pragma once
#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_options.hpp"
#include "model/weights.hpp"

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
  std::string experts = "auto";               // MoE routed experts: auto, grouped, expand (cuda::ExpertKernel)
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
  // Tokens of each configuration's first and last samples the reference check runs on the CPU
  // (result_check.hpp); 0: no reference check.
  std::int64_t check_tokens = 512;
  // Cards to project one forward onto instead of timing it (cost_report.hpp; simulated-GPU builds).
  std::vector<std::string> project;
};

// The most layers (at most the model's) of synthetic `model` whose rank share, planned as the
// backend plans it (cuda::plan_memory, cuda::device_bytes_needed), fits in `free_bytes`; 0 if
// not even 2 do.
std::int64_t layers_that_fit(const std::string& model, const TpShard& shard, const cuda::CudaBackendOptions& bo,
                             std::size_t free_bytes);

// Runs the benchmark on the GPU opts.device; prints to `out`; returns 0, or throws
// layertap::Error (no GPU, model does not fit, a configuration's result check failed, ...).
int run_bench(const BenchOptions& opts, std::ostream& out);

}  // namespace layertap
