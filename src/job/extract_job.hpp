// One `layertap extract` run: model + dataset -> HDF5 shards + manifest.json. The orchestration
// (checks, plan, backend, batches, writers, manifest) lives here; src/cli only parses and reports.
#pragma once
#include "job/extract_options.hpp"
#include "comm/mpi_env.hpp"

namespace layertap::job {

// --dry-run's exit code when a real run with the same options would refuse to start (not enough
// device or host memory, not enough free space at --out, --out in use by another job); every rank
// returns it, after the whole plan is printed.
inline constexpr int kExitDryRunRefused = 3;

// Runs the whole job and returns the exit code: 0, kExitDryRunRefused, or kExitInterrupted after a
// graceful stop (the manifest then says "complete": false and --resume continues). Throws
// layertap::Error on any failure (the output then has no manifest). Unless --no-lock, world rank 0
// holds the --out lock (io/output_lock.hpp) from before it reads or writes --out until the process
// ends: one run per process.
int run_extract(const ExtractOptions& opts, const MpiEnv& mpi);

}  // namespace layertap::job
