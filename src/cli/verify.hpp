// `layertap verify OUTDIR`: proves an output holds what its manifest says.
#pragma once
#include <cstdint>
#include <filesystem>
#include <iosfwd>
#include <string>
#include <vector>

namespace layertap::cli {

struct VerifyOptions {
  std::filesystem::path out_dir;
  int64_t samples = 8;      // samples recomputed with the model; 0 = none, -1 = all
  uint64_t seed = 0;        // chooses which samples
  std::string model;        // model directory; default: the manifest's
  int threads = 0;          // OpenBLAS threads; 0 = all cores
  int64_t lm_head = 0;      // samples whose `final` (or normed `last`) states are scored through the LM head
  double min_top1 = 0;      // with lm_head: fail when top-1 next-token agreement is lower
  bool token_stats = false; // frequencies of the loss-masked tokens (the draft vocabulary)
};

// Parses `layertap verify` arguments; returns false when --help was printed.
bool parse_verify_options(const std::vector<std::string>& args, VerifyOptions& opts, std::ostream& out);

// Checks the manifest against the shards (counts, offsets, shapes, attributes, sizes, SHA-256,
// NaN/Inf) and recomputes a seeded random subset of samples at TP 1 on the CPU, comparing every
// capture point; optionally scores stored states through the LM head and counts the loss-masked
// tokens. Prints one line per problem and per recomputed sample; returns 0 when all agree.
int run_verify(const VerifyOptions& opts, std::ostream& out);

}  // namespace layertap::cli
