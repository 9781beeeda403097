// One `layertap verify` run: proves an output holds what its manifest says. The checks live here
// (job/verify_*); src/cli only parses the options.
#pragma once
#include <iosfwd>

#include "job/verify_options.hpp"

namespace layertap::job {

// Checks the manifest against the shards (counts, offsets, shapes, attributes, sizes, SHA-256,
// NaN/Inf) and recomputes a seeded random subset of samples at TP 1 on the CPU, comparing every
// capture point; optionally scores stored states through the LM head and counts the loss-masked
// tokens. Prints one line per problem and per recomputed sample, then the summary line; returns 0
// when all agree, else 1 (a layertap::Error, an unreadable manifest included, is one more problem).
int run_verify(const VerifyOptions& opts, std::ostream& out);

}  // namespace layertap::job
