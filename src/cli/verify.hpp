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
};

// Parses `layertap verify` arguments; returns false when --help was printed.
bool parse_verify_options(const std::vector<std::string>& args, VerifyOptions& opts, std::ostream& out);

// Checks the manifest against the shards (counts, offsets, shapes, attributes, sizes, SHA-256,
// NaN/Inf) and recomputes a seeded random subset of samples at TP 1 on the CPU, comparing every
// capture point. Prints one line per problem and per recomputed sample; returns 0 when all agree.
int run_verify(const VerifyOptions& opts, std::ostream& out);

}  // namespace layertap::cli
