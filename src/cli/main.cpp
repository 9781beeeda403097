// layertap: capture hidden states of Hugging Face causal LMs into HDF5 (see README.md).
#include <cstdio>
#include <exception>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include "cli/inspect.hpp"
#include "cli/options.hpp"
#include "cli/verify.hpp"
#ifdef LAYERTAP_HAVE_CUDA
#include "cli/bench.hpp"
#endif
#include "comm/mpi_env.hpp"
#include "core/log.hpp"
#include "core/stop_request.hpp"
#include "job/extract_job.hpp"
#include "job/verify_job.hpp"

namespace {

constexpr const char* kUsage =
    "Usage: layertap <command> [options]\n\n"
    "Commands:\n"
    "  extract   run a model over a tokenized dataset and write hidden states to HDF5 shards\n"
    "  inspect   summarise an output directory: samples, tokens, capture points, model, shards\n"
    "  verify    check an output against its manifest and recompute samples with the model\n"
    "  bench     GPU throughput of a synthetic model (CUDA builds): tokens/s with and without capture\n\n"
    "Run 'layertap <command> --help' for a command's options. 'layertap --version' prints the version.\n"
    "One process per rank: 'layertap extract ...' alone, or 'mpirun -np N layertap extract --tp T ...'.\n";

std::string quote_command(int argc, char** argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a.find_first_of(" \t'\"$") != std::string::npos) a = "'" + a + "'";
    out += (i ? " " : "") + a;
  }
  return out;
}

layertap::LogLevel parse_level(const std::string& s) {
  if (s == "debug") return layertap::LogLevel::Debug;
  if (s == "info") return layertap::LogLevel::Info;
  if (s == "warning") return layertap::LogLevel::Warn;
  if (s == "error") return layertap::LogLevel::Error;
  LT_FAIL("unknown --log-level '", s, "' (debug, info, warning, error)");
}

// Only extract runs under MPI: `mpi` is started there (inspect, verify, bench, --help and --version
// are single-process tools and do without MPI's start-up, which forks a daemon when there is no
// mpirun).
int run(int& argc, char**& argv, std::optional<layertap::MpiEnv>& mpi) {
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h" || args[0] == "help") {
    std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "--version") {
    std::cout << "layertap " << LAYERTAP_VERSION << "\n";
    return 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  if (args[0] == "extract") {
    mpi.emplace(argc, argv);
    if (mpi->size() > 1) layertap::set_log_rank(mpi->rank());
    layertap::ExtractOptions opts;
    if (layertap::parse_extract_options(rest, opts) == layertap::ParseOutcome::Exit) return 0;
    layertap::set_log_level(parse_level(opts.log_level));
    opts.command = quote_command(argc, argv);
    return layertap::job::run_extract(opts, *mpi);
  }
  if (args[0] == "inspect") {
    if (rest.size() == 1 && (rest[0] == "--help" || rest[0] == "-h")) {
      std::cout << "Usage: layertap inspect OUTDIR\n\nPrints the manifest and checks every shard against it; "
                   "exits non-zero on any disagreement.\n";
      return 0;
    }
    LT_CHECK(rest.size() == 1, "usage: layertap inspect OUTDIR");
    return layertap::cli::run_inspect(rest[0], std::cout);
  }
  if (args[0] == "verify") {
    layertap::VerifyOptions opts;
    if (!layertap::cli::parse_verify_options(rest, opts, std::cout)) return 0;
    return layertap::job::run_verify(opts, std::cout);
  }
  if (args[0] == "bench") {
#ifdef LAYERTAP_HAVE_CUDA
    return layertap::bench_main(rest, std::cout);
#else
    LT_FAIL("layertap bench needs a CUDA build (configure with nvcc on PATH)");
#endif
  }
  LT_FAIL("unknown command '", args[0], "'\n", kUsage);
}

}  // namespace

int main(int argc, char** argv) {
  std::optional<layertap::MpiEnv> mpi;
  try {
    return run(argc, argv, mpi);
  } catch (const layertap::Stopped& e) {
    // A stop signal before the batch loop: nothing was written; every rank ends with the stop code.
    layertap::log_warn(e.what());
    if (mpi && mpi->size() > 1) mpi->abort(layertap::kExitInterrupted);
    return layertap::kExitInterrupted;
  } catch (const std::exception& e) {
    layertap::log_error(e.what());
    // Every rank must stop: abort the job rather than leave peers waiting in a collective.
    if (mpi && mpi->size() > 1) mpi->abort(1);
    return 1;
  }
}
