#include "cli/bench.hpp"

#include <boost/program_options.hpp>
#include <charconv>
#include <cmath>
#include <limits>
#include <utility>
#include <sstream>

#include "backend/cuda/cuda_options.hpp"
#include "bench/cost_report.hpp"
#include "bench/model_catalog.hpp"
#include "core/error.hpp"
#include "model/capture.hpp"
#include "model/weights.hpp"

namespace layertap {

namespace po = boost::program_options;

namespace {

std::int64_t parse_int(const std::string& key, const std::string& v, std::int64_t lo) {
  std::int64_t x = 0;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  LT_CHECK(ec == std::errc() && ptr == v.data() + v.size() && x >= lo, "bench: --", key, " expects an integer >= ",
           lo, ", not '", v, "'");
  return x;
}

std::vector<std::string> split_list(const std::string& v) {
  std::vector<std::string> out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
  return out;
}

std::vector<std::int64_t> parse_int_list(const std::string& key, const std::string& v) {
  std::vector<std::int64_t> out;
  for (const std::string& item : split_list(v)) out.push_back(parse_int(key, item, 1));
  LT_CHECK(!out.empty(), "bench: --", key, " expects a comma-separated list of token counts");
  for (const std::int64_t t : out)  // as extract's --max-batch-tokens: every buffer it sizes fits 64 bits
    LT_CHECK(t <= (std::int64_t(1) << 24), "bench: --", key, " takes at most ", std::int64_t(1) << 24,
             " tokens per batch, not ", t);
  return out;
}

double parse_positive(const std::string& key, const std::string& v) {
  double x = 0;
  std::size_t used = 0;
  try {
    x = std::stod(v, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  LT_CHECK(used == v.size() && !v.empty() && x > 0 && std::isfinite(x), "bench: --", key,
           " expects a positive number, not '", v, "'");
  return x;
}

// N capture points: the eagle3 preset for 4; otherwise floor(k L / N) for k = 1..N-1, then final.
std::string points_spec(std::int64_t n, std::int64_t L) {
  if (n == 4) return "eagle3";
  std::string spec;
  for (std::int64_t k = 1; k < n; ++k) spec += cat(k * L / n, ",");
  return spec + "final";
}

// The parser of an integer option of type T: at least `lo`, and representable in T.
template <class T>
auto int_at_least(const char* key, std::int64_t lo) {
  return [key, lo](const std::string& v) {
    const std::int64_t x = parse_int(key, v, lo);
    LT_CHECK(std::in_range<T>(x), "bench: --", key, " takes at most ", std::numeric_limits<T>::max(), ", not ", v);
    return static_cast<T>(x);
  };
}

// An option spelled as text (`value_name`, and `default_spelling` unless empty): `parse` turns it
// into `target` when the options are notified (defaults included), its error naming the option.
template <class T, class Parse>
po::typed_value<std::string>* spelled(T& target, const char* value_name, const std::string& default_spelling,
                                      Parse parse) {
  auto* v = po::value<std::string>()->value_name(value_name);
  if (!default_spelling.empty()) v->default_value(default_spelling);
  return v->notifier([&target, parse](const std::string& s) { target = parse(s); });
}

}  // namespace

bool parse_bench_options(const std::vector<std::string>& args, BenchOptions& o, std::ostream& out) {
  std::int64_t points = 0;  // 0: --points not given
  const auto positive = [](const char* key) { return [key](const std::string& v) { return parse_positive(key, v); }; };
  po::options_description table("Options", 100);
  table.add_options()
      ("synthetic", spelled(o.model, "NAME", "llama3-8b", [](const std::string& v) { return v; }),
       "llama3-8b, llama3-70b, qwen3-8b, tiny (dense); kimi-k2.5 (MLA, MoE, INT4 experts), deepseek-v3 (MLA, MoE, "
       "FP8), qwen3-30b-a3b (MoE), tiny-moe (MLA, MoE, INT4; seconds), kimi-k2.5-mini (Kimi-K2.5's experts and "
       "top-k at width 256: the simulated GPU's counts per forward)")
      ("tp-shard", spelled(o.tp_shard, "N", "1", int_at_least<int>("tp-shard", 1)),
       "run one rank's share of an N-GPU tensor-parallel group; its all-reduces are modelled from --bus-gbs, not "
       "run")
      ("tp-rank", spelled(o.tp_rank, "R", "0", int_at_least<int>("tp-rank", 0)),
       "which rank's share (rank 0 holds the hottest Zipf experts)")
      ("moe-split", spelled(o.moe_split, "S", "experts", [](const std::string& v) { return v; }),
       "experts (whole experts per rank) or intermediate")
      ("layers", spelled(o.layers, "N", "", int_at_least<std::int64_t>("layers", 1)),
       "build N layers (default: all, or as many as fit; the count is printed)")
      ("routing", spelled(o.routing, "LIST", "uniform,zipf", split_list),
       "MoE expert loads, comma-separated: uniform (random router), zipf")
      ("zipf-s", spelled(o.zipf_s, "S", "1", positive("zipf-s")),
       "zipf skew: expert e's router logit offset by -S ln(e + 1)")
      ("bus-gbs", spelled(o.bus_gbs, "LIST", "450,50",
                          [](const std::string& v) {
                            std::vector<double> gbs;
                            for (const std::string& b : split_list(v)) gbs.push_back(parse_positive("bus-gbs", b));
                            LT_CHECK(!gbs.empty(), "bench: --bus-gbs expects a comma-separated list of GB/s");
                            return gbs;
                          }),
       "all-reduce bus bandwidths of the projection in GB/s, comma-separated (450: NVLink-class, 50: PCIe Gen5 "
       "x16)")
      ("baseline", spelled(o.baseline, "TOKS", "2280", positive("baseline")),
       "published tokens/s to compare with")
      ("tokens",
       spelled(o.tokens, "LIST", "8192,16384", [](const std::string& v) { return parse_int_list("tokens", v); }),
       "tokens per packed batch, comma-separated")
      ("points", spelled(points, "N", "", int_at_least<std::int64_t>("points", 1)),
       "N capture points instead of --capture: 4 = eagle3 (the default); else N-1 layer inputs spread evenly, "
       "then final")
      ("capture", spelled(o.capture, "SPEC", "eagle3", [](const std::string& v) { return v; }),
       "capture points as `layertap extract --capture` takes them")
      ("sample-tokens", spelled(o.sample_tokens, "N", "2048", int_at_least<std::int64_t>("sample-tokens", 1)),
       "tokens per sample inside a batch")
      ("iters", spelled(o.iters, "N", "5", int_at_least<int>("iters", 1)), "timed forwards per mode, median reported")
      ("warmup", spelled(o.warmup, "N", "1", int_at_least<int>("warmup", 0)), "untimed forwards per mode first")
      ("gemm-iters", spelled(o.gemm_iters, "N", "10", int_at_least<int>("gemm-iters", 1)),
       "products per shape in the GEMM-rate measurement")
      ("attention", spelled(o.attention, "KERNEL", "auto", [](const std::string& v) { return v; }),
       "auto, reference, flash")
      ("expert-gemm", spelled(o.experts, "KERNEL", "auto", [](const std::string& v) { return v; }),
       "MoE routed experts: grouped (one launch per projection for all of the rank's experts, weights read as "
       "stored, no host wait), expand (the reference: packed experts expanded to bf16, one cuBLASLt product "
       "per expert, the row counts waited for on the host) or auto (grouped where it reads the experts)")
      ("device", spelled(o.device, "N", "0", int_at_least<int>("device", 0)), "GPU index")
      ("seed", spelled(o.seed, "N", "1", int_at_least<std::uint64_t>("seed", 0)), "weights and tokens seed")
      ("check-tokens", spelled(o.check_tokens, "N", "512", int_at_least<std::int64_t>("check-tokens", 0)),
       "tokens of each configuration's first and last samples the reference check runs on the CPU backend "
       "(each at most --sample-tokens); 0: no reference check")
      ("project", spelled(o.project, "CARDS", "", split_list),
       "instead of timing, record one forward per --tokens at full width on the simulated GPU without running it "
       "and project it onto these cards, comma-separated (h200, h100, b200, rtx-pro-6000): the call list per "
       "layer kind and the projected time and tokens/s, with the model's assumptions (simulated-GPU builds)")
      ("help,h", "print this help");
  po::options_description all;
  all.add(table).add_options()("unexpected", po::value<std::vector<std::string>>());  // positional: refused
  po::positional_options_description positional;
  positional.add("unexpected", -1);

  po::variables_map vm;
  try {
    po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
    if (vm.count("help")) {
      out << "Usage: layertap bench [options]\n\n"
             "Runs the CUDA backend on a synthetic model (random weights made on the GPU; quantized ones\n"
             "packed as the checkpoint stores them) and prints tokens/s without and with capture and the\n"
             "capture overhead; for dense models the cuBLASLt bf16 GEMM rate on the model's product shapes\n"
             "and tokens/s as a fraction of the GEMM-bound limit; for MoE models per-layer times, the\n"
             "expert load on this rank, and (with --tp-shard N) the N-GPU group's projected tokens/s.\n"
             "Each timed configuration is checked once before it is timed: a reference model of the same\n"
             "widths and kinds of layers (the dense layers before the first MoE layer and one MoE layer, at\n"
             "least 2; bf16 weights from seeded host values) runs the configuration's batch on the GPU and\n"
             "the first --check-tokens tokens of its first and last samples on the float32 CPU backend,\n"
             "every capture point held to the golden tests' bf16 bound; and the timed model's captured\n"
             "states must be finite and two captured forwards of the same batch give the same bits. A\n"
             "failed check is an error (exit 1).\n\n"
          << table;
      return false;
    }
    if (vm.count("unexpected"))
      LT_FAIL("bench: unexpected argument '", vm["unexpected"].as<std::vector<std::string>>().front(),
              "' (see --help)");
    po::notify(vm);
  } catch (const po::unknown_option& e) {
    LT_FAIL("bench: unknown option ", e.get_option_name(), " (see --help)");
  } catch (const po::error& e) {
    LT_FAIL("bench: ", e.what(), " (see --help)");
  }
  LT_CHECK(o.tp_rank < o.tp_shard, "bench: --tp-rank ", o.tp_rank, " is not below --tp-shard ", o.tp_shard);
  (void)parse_moe_split(o.moe_split);
  LT_CHECK(!o.routing.empty(), "bench: --routing expects uniform, zipf or both");
  for (const std::string& r : o.routing)
    LT_CHECK(r == "uniform" || r == "zipf", "bench: --routing takes uniform and zipf, not '", r, "'");
  const ModelConfig c = synthetic_model_config(o.model, o.layers);  // validates the name
  check_tp_divisibility(c, TpShard{o.tp_rank, o.tp_shard, parse_moe_split(o.moe_split)});
  if (points > 0) o.capture = points_spec(points, c.num_layers);
  (void)resolve_capture(o.capture, c.num_layers);  // validates the points
  (void)cuda::parse_attention_kernel(o.attention);
  (void)cuda::parse_expert_kernel(o.experts);
  return true;
}

int bench_main(const std::vector<std::string>& args, std::ostream& out) {
  BenchOptions opts;
  if (!parse_bench_options(args, opts, out)) return 0;
  return opts.project.empty() ? run_bench(opts, out) : run_cost_report(opts, out);
}

}  // namespace layertap

#ifdef LAYERTAP_BENCH_MAIN
#include <exception>
#include <iostream>

int main(int argc, char** argv) {
  try {
    return layertap::bench_main(std::vector<std::string>(argv + 1, argv + argc), std::cout);
  } catch (const std::exception& e) {
    std::cerr << "layertap_bench: error: " << e.what() << "\n";
    return 1;
  }
}
#endif
