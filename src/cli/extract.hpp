// `layertap extract`: model + dataset -> HDF5 shards + manifest.json.
#pragma once
#include "cli/options.hpp"
#include "comm/mpi_env.hpp"

namespace layertap {

// Runs the whole job; throws layertap::Error on any failure (the output then has no manifest).
void run_extract(const ExtractOptions& opts, const MpiEnv& mpi);

}  // namespace layertap
