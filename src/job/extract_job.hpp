// One `layertap extract` run: model + dataset -> HDF5 shards + manifest.json. The orchestration
// (checks, plan, backend, batches, writers, manifest) lives here; src/cli only parses and reports.
#pragma once
#include "job/extract_options.hpp"
#include "comm/mpi_env.hpp"

namespace layertap::job {

// Runs the whole job and returns the exit code: 0, or kExitInterrupted after a graceful stop
// (the manifest then says "complete": false and --resume continues). Throws layertap::Error on any
// failure (the output then has no manifest).
int run_extract(const ExtractOptions& opts, const MpiEnv& mpi);

}  // namespace layertap::job
