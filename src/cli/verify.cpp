#include "cli/verify.hpp"

#include <boost/program_options.hpp>
#include <iostream>

#include "core/error.hpp"

namespace layertap::cli {

namespace po = boost::program_options;

// `--lm-head` without a count: enough samples for a stable top-1 figure, seconds on the CPU.
constexpr int64_t kLmHeadSamples = 64;

bool parse_verify_options(const std::vector<std::string>& args, VerifyOptions& o, std::ostream& out) {
  po::options_description desc("Options");
  std::string dir;
  desc.add_options()
      ("out", po::value(&dir)->required(), "output directory to verify (also the first positional argument)")
      ("samples", po::value(&o.samples)->default_value(o.samples),
       "samples to recompute with the model and compare at every capture point (0 = none, -1 = all)")
      ("seed", po::value(&o.seed)->default_value(o.seed), "seed that chooses the samples")
      ("model", po::value(&o.model), "model directory (default: the one recorded in the manifest)")
      ("threads", po::value(&o.threads)->default_value(o.threads), "CPU threads for matrix products (0 = all cores)")
      ("lm-head", po::value(&o.lm_head)->default_value(o.lm_head)->implicit_value(kLmHeadSamples),
       "samples (-1 = all; given alone: 64) whose stored 'final' states (or 'last' through the final norm) go "
       "through the checkpoint's LM head: top-1 agreement with the next loss-masked token and the perplexity")
      ("min-top1", po::value(&o.min_top1)->default_value(o.min_top1),
       "with --lm-head: fail when the top-1 agreement (a fraction, e.g. 0.3) is lower")
      ("token-stats", po::bool_switch(&o.token_stats),
       "frequencies of the loss-masked tokens: distinct ids, the coverage of the most frequent 1k/8k/32k "
       "(the draft vocabulary EAGLE-3 trainers build), the top ids")
      ("help,h", "print this help");
  po::positional_options_description pos;
  pos.add("out", 1);
  // `--lm-head` may stand alone (implicit 64), so Boost would not take a following "-1" as its value:
  // a number after it is joined to it ("--lm-head=-1").
  std::vector<std::string> joined;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const bool number_follows = i + 1 < args.size() && !args[i + 1].empty() &&
                                args[i + 1].find_first_not_of("-0123456789") == std::string::npos &&
                                args[i + 1].find_first_of("0123456789") != std::string::npos;
    if (args[i] == "--lm-head" && number_follows) {
      joined.push_back("--lm-head=" + args[++i]);
    } else {
      joined.push_back(args[i]);
    }
  }
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(joined).options(desc).positional(pos).run(), vm);
    if (vm.count("help")) {
      out << "Usage: layertap verify OUTDIR [--samples N] [--seed S] [--model DIR] [--threads N]\n"
             "                       [--lm-head [N]] [--min-top1 F] [--token-stats]\n\n"
             "Checks manifest.json against every shard (counts, offsets, shapes, attributes, sizes, SHA-256,\n"
             "NaN/Inf) and recomputes a seeded random subset of samples on the CPU at TP 1, comparing every\n"
             "capture point, element by element: one bf16 step (1e-4 relative for float32 output, one e4m3\n"
             "step at the row's scale more for float8) plus 1e-4 of the row's median magnitude; an output\n"
             "the cuda backend wrote (bf16 arithmetic) per point, to a relative error of 5e-2. Exits 1 on\n"
             "any problem.\n\n"
          << desc << "\n";
      return false;
    }
    po::notify(vm);
  } catch (const po::error& e) {
    LT_FAIL(e.what(), " (see 'layertap verify --help')");
  }
  LT_CHECK(o.samples >= -1, "--samples must be -1 (all), 0 or positive");
  LT_CHECK(o.lm_head >= -1, "--lm-head must be -1 (all), 0 or positive");
  LT_CHECK(o.min_top1 >= 0 && o.min_top1 <= 1, "--min-top1 must be a fraction in [0, 1]");
  o.out_dir = dir;
  return true;
}

}  // namespace layertap::cli
