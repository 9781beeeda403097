// Options of `layertap bench` and the standalone `layertap_bench`: one Boost.Program_options
// table, as `layertap extract`'s (options.hpp). The benchmark itself is src/bench/run_bench.hpp.
#pragma once
#include <ostream>
#include <string>
#include <vector>

#include "bench/run_bench.hpp"

namespace layertap {

// Parses arguments (program and subcommand names excluded): --synthetic NAME, --tokens 8192,16384,
// --points N (4 = eagle3; else N points spread over the layers, the last one `final`),
// --capture SPEC, --sample-tokens N, --iters N, --warmup N, --gemm-iters N, --attention K,
// --device N, --seed N, --tp-shard N, --tp-rank R, --moe-split S, --layers N, --routing LIST,
// --zipf-s S, --bus-gbs LIST, --baseline TOKS; `--key value` or `--key=value`. Returns false
// after --help (usage printed to `out`). Throws layertap::Error on unknown or invalid options.
bool parse_bench_options(const std::vector<std::string>& args, BenchOptions& opts, std::ostream& out);

// parse_bench_options + run_bench: what `layertap bench ARGS...` calls; 0 after --help.
int bench_main(const std::vector<std::string>& args, std::ostream& out);

}  // namespace layertap
