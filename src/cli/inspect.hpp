// `layertap inspect <out_dir>`: what a user needs to trust a run's output, read from its
// manifest.json and from every shard it lists, with each shard checked against the manifest.
#pragma once
#include <filesystem>
#include <ostream>

namespace layertap::cli {

// Prints the summary to `out`. Returns 0 when the manifest exists, the run is complete and every
// shard agrees with it (file present, samples, tokens, size, /hidden_states shape and dtype,
// capture points, model identity); otherwise prints one "ERROR: ..." line per disagreement and
// returns 1.
int run_inspect(const std::filesystem::path& out_dir, std::ostream& out);

}  // namespace layertap::cli
