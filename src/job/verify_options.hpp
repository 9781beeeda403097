// What one `layertap verify` run is asked to do: filled by the command line (cli/verify), read by
// the job (job/verify_job).
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>

namespace layertap {

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

}  // namespace layertap
