// `layertap verify OUTDIR`: the option table; the checks are job::run_verify (job/verify_job.hpp).
#pragma once
#include <iosfwd>
#include <string>
#include <vector>

#include "job/verify_options.hpp"

namespace layertap::cli {

// Parses `layertap verify` arguments; returns false when --help was printed. Throws
// layertap::Error on unknown or invalid options.
bool parse_verify_options(const std::vector<std::string>& args, VerifyOptions& opts, std::ostream& out);

}  // namespace layertap::cli
