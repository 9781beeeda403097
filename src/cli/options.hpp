// Options of `layertap extract`: one Boost.Program_options table serves the command line and job
// files (`--config FILE`, INI-style `key = value` with the same names; the command line wins).
#pragma once
#include <string>
#include <vector>

#include "job/extract_options.hpp"

namespace layertap {


enum class ParseOutcome { Run, Exit };  // Exit: --help or --version was printed

// Parses `layertap extract` arguments (args exclude the program and subcommand names).
// Throws layertap::Error on unknown or invalid options.
ParseOutcome parse_extract_options(const std::vector<std::string>& args, ExtractOptions& opts);

}  // namespace layertap
