// What one `layertap extract` run is asked to do: filled by the command line and job files
// (cli/options), read by the job (job/extract_job). Every choice is parsed once, into the typed
// value the job uses; the *_name functions give back the spellings the manifest records.
#pragma once
#include <cstdint>
#include <string>

#include "core/dtype.hpp"
#include "io/compression.hpp"
#include "model/packed_batch.hpp"  // kMaxBatchTokens: --max-batch-tokens' upper bound
#include "model/weights.hpp"       // MoeSplit

namespace layertap {

enum class BackendRequest { Auto, Cpu, Cuda };  // --backend
BackendRequest parse_backend_request(const std::string& s);  // "auto" | "cpu" | "cuda"
const char* backend_request_name(BackendRequest b);

enum class NonFinitePolicy { Fail, Skip };  // --on-nonfinite: a sample with NaN/Inf states
NonFinitePolicy parse_nonfinite_policy(const std::string& s);  // "fail" | "skip"
// "auto" (kAutoBatchTokens) or a positive integer; the range is checked with the other options.
int64_t parse_batch_tokens(const std::string& s);
const char* nonfinite_policy_name(NonFinitePolicy p);

inline constexpr int64_t kAutoBatchTokens = 0;  // --max-batch-tokens auto

struct ExtractOptions {
  std::string model;             // Hugging Face model directory
  std::string data;              // JSONL dataset
  std::string out;               // output directory
  std::string capture = "eagle3";  // resolved against the model's layer count (model/capture)
  BackendRequest backend = BackendRequest::Auto;
  int tp = 1;                    // tensor-parallel group size; world size / tp data-parallel groups
  MoeSplit moe_split = MoeSplit::Experts;  // routed experts over the TP group
  // Tokens per forward pass; kAutoBatchTokens: chosen by the backend (BackendChoice::auto_batch_tokens)
  // once the job knows the device and the data, before any batch is planned.
  int64_t max_batch_tokens = kAutoBatchTokens;
  int64_t max_sample_tokens = 0;  // the longest sample taken (sizes the kept keys and values); 0: the data's longest
  int threads = 0;               // OpenBLAS threads per rank; 0 = library default
  DType store_dtype = DType::BF16;  // BF16 | F32 | F8_E4M3
  io::Compression compress;         // of /hidden_states
  int64_t shard_size_mib = 2048;
  bool overwrite = false;
  bool resume = false;           // continue an interrupted run in --out
  NonFinitePolicy on_nonfinite = NonFinitePolicy::Fail;
  bool dry_run = false;          // plan, estimate and check; write nothing
  int64_t calibrate_batches = 2; // --dry-run: batches run per group to estimate the time (0: none)
  bool read_weights = false;     // --dry-run: pre-read and check every byte each rank would load
  double gpu_memory_gib = 0;     // cuda: device memory a rank may use (0: the device's free memory)
  bool ignore_free_space = false;  // start even when the projected output exceeds the free space
  bool no_lock = false;          // run without the --out lock (file systems that cannot hold one)
  double progress_seconds = 30;
  std::string log_level = "info";
  std::string command;           // the command line as typed, for the manifest

  // The options that must agree on every rank, as one string (threads, logging and the command
  // line's spelling may differ).
  std::string job_identity() const;
};

}  // namespace layertap
