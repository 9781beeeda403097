// Options of `layertap extract`: one Boost.Program_options table serves the command line and job
// files (`--config FILE`, INI-style `key = value` with the same names; the command line wins).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

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
  std::string store_dtype = "bfloat16";
  int64_t shard_size_mib = 2048;
  bool overwrite = false;
  bool resume = false;           // continue an interrupted run in --out
  std::string on_nonfinite = "fail";  // fail | skip: a sample with NaN/Inf states
  bool dry_run = false;          // plan, estimate and check; write nothing
  int64_t calibrate_batches = 2; // --dry-run: batches run per group to estimate the time (0: none)
  bool ignore_free_space = false;  // start even when the projected output exceeds the free space
  double progress_seconds = 30;
  std::string log_level = "info";
  std::string command;           // the command line as typed, for the manifest

  // The options that must agree on every rank, as one string (threads, logging and the command
  // line's spelling may differ).
  std::string job_identity() const;
};

enum class ParseOutcome { Run, Exit };  // Exit: --help or --version was printed

// Parses `layertap extract` arguments (args exclude the program and subcommand names).
// Throws layertap::Error on unknown or invalid options.
ParseOutcome parse_extract_options(const std::vector<std::string>& args, ExtractOptions& opts);

}  // namespace layertap
