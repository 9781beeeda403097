// What one `layertap extract` run is asked to do: filled by the command line and job files
// (cli/options), read by the job (job/extract_job).
#pragma once
#include <cstdint>
#include <string>

#include "model/packed_batch.hpp"  // kMaxBatchTokens: --max-batch-tokens' upper bound

namespace layertap {

struct ExtractOptions {
  std::string model;             // Hugging Face model directory
  std::string data;              // JSONL dataset
  std::string out;               // output directory
  std::string capture = "eagle3";
  std::string backend = "auto";
  int tp = 1;                    // tensor-parallel group size; world size / tp data-parallel groups
  std::string moe_split = "experts";  // experts | intermediate: routed experts over the TP group
  int64_t max_batch_tokens = 8192;
  int threads = 0;               // OpenBLAS threads per rank; 0 = library default
  std::string store_dtype = "bfloat16";  // bfloat16 | float32 | float8_e4m3
  std::string compress = "none";         // none | lz4 | zstd[:level] | gzip[:level]
  int64_t shard_size_mib = 2048;
  bool overwrite = false;
  bool resume = false;           // continue an interrupted run in --out
  std::string on_nonfinite = "fail";  // fail | skip: a sample with NaN/Inf states
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
