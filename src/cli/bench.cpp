#include "cli/bench.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <sstream>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/device.hpp"
#include "core/error.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_info.hpp"
#include "kernels/random_fill.cuh"
#include "model/capture.hpp"

namespace layertap {

namespace {

using Clock = std::chrono::steady_clock;
using bf16 = __nv_bfloat16;

std::int64_t parse_int(const std::string& key, const std::string& v, std::int64_t lo) {
  std::int64_t x = 0;
  const auto [ptr, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  LT_CHECK(ec == std::errc() && ptr == v.data() + v.size() && x >= lo, "bench: --", key, " expects an integer >= ",
           lo, ", not '", v, "'");
  return x;
}

std::vector<std::int64_t> parse_int_list(const std::string& key, const std::string& v) {
  std::vector<std::int64_t> out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(parse_int(key, item, 1));
  LT_CHECK(!out.empty(), "bench: --", key, " expects a comma-separated list of token counts");
  return out;
}

// N capture points: the eagle3 preset for 4; otherwise floor(k L / N) for k = 1..N-1, then final.
std::string points_spec(std::int64_t n, std::int64_t L) {
  if (n == 4) return "eagle3";
  std::string spec;
  for (std::int64_t k = 1; k < n; ++k) spec += cat(k * L / n, ",");
  return spec + "final";
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 == 1 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// Packed batch of T random tokens in samples of `sample_tokens` (the last one shorter).
PackedBatch make_batch(std::int64_t T, std::int64_t sample_tokens, std::int64_t vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(vocab - 1));
  PackedBatch b;
  b.tokens.resize(std::size_t(T));
  for (auto& t : b.tokens) t = id(rng);
  for (std::int64_t s = 0; s < T; s += sample_tokens) b.offsets.push_back(s);
  b.offsets.push_back(T);
  return b;
}

double seconds_of(const std::function<void()>& f) {
  const auto t0 = Clock::now();
  f();
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

// cuBLASLt bf16 rate on the model's four products at T tokens, over the model's own weights
// (cycling through the layers, so no product reuses a weight the last one left in L2) and
// random activations. Returns TFLOP/s per product and overall (total FLOP / total time).
struct GemmRates {
  std::map<std::string, double> tflops;  // qkv, o, gate_up, down
  double overall = 0;
};

GemmRates measure_gemm(const cuda::CudaBackend& backend, std::int64_t T, int passes) {
  const cuda::LocalShape& s = backend.shape();
  const std::int64_t widest = std::max({s.qkv_dim(), 2 * s.inter, s.hidden, s.q_dim(), s.inter});
  cuda::DeviceMemory x(std::size_t(T * widest) * sizeof(bf16)), y(std::size_t(T * widest) * sizeof(bf16));
  cuda::DeviceMemory ws(cuda::Gemm::kWorkspaceBytes);
  cuda::Stream stream;
  auto* xp = reinterpret_cast<bf16*>(x.data());
  auto* yp = reinterpret_cast<bf16*>(y.data());
  kernels::fill_uniform_bf16(xp, T * widest, 12345, 0.0f, 1.0f, stream.get());  // random: zeros run faster
  cuda::Gemm gemm(ws.data(), ws.bytes());
  struct Product {
    const char* name;
    const cuda::DeviceLinear cuda::DeviceLayer::*linear;
  };
  const Product products[] = {{"qkv", &cuda::DeviceLayer::qkv},
                              {"o", &cuda::DeviceLayer::o},
                              {"gate_up", &cuda::DeviceLayer::gate_up},
                              {"down", &cuda::DeviceLayer::down}};
  const auto& layers = backend.weights().layers;
  GemmRates r;
  double flop_total = 0, seconds_total = 0;
  cuda::Event start(true), stop(true);
  for (const Product& p : products) {
    const auto run = [&](int n) {
      for (int i = 0; i < n; ++i) {
        const cuda::DeviceLinear& l = layers[std::size_t(i) % layers.size()].*(p.linear);
        gemm.linear(yp, xp, l.w, l.b, T, l.out, l.in, stream.get());
      }
    };
    run(2);  // heuristic query and first-launch costs stay out of the timing
    LT_CUDA_CHECK(cudaEventRecord(start.get(), stream.get()));
    run(passes);
    LT_CUDA_CHECK(cudaEventRecord(stop.get(), stream.get()));
    LT_CUDA_CHECK(cudaEventSynchronize(stop.get()));
    float ms = 0;
    LT_CUDA_CHECK(cudaEventElapsedTime(&ms, start.get(), stop.get()));
    const cuda::DeviceLinear& l0 = layers.front().*(p.linear);
    const double flop = 2.0 * double(T) * double(l0.out) * double(l0.in) * passes;
    r.tflops[p.name] = flop / (double(ms) * 1e-3) / 1e12;
    flop_total += flop;
    seconds_total += double(ms) * 1e-3;
  }
  r.overall = flop_total / seconds_total / 1e12;
  return r;
}

std::string fixed(double v, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, v);
  return buf;
}

}  // namespace

std::string bench_usage() {
  return "Usage: layertap bench [options]\n\n"
         "Runs the CUDA backend on a synthetic model (random bf16 weights made on the GPU) and prints\n"
         "tokens/s without and with capture, the capture overhead, the cuBLASLt bf16 GEMM rate on the\n"
         "model's product shapes and tokens/s as a fraction of the GEMM-bound limit.\n\n"
         "  --synthetic NAME      llama3-8b (default), qwen3-8b, tiny\n"
         "  --tokens LIST         tokens per packed batch, comma-separated (default 8192,16384)\n"
         "  --points N            N capture points: 4 = eagle3 (default); else N-1 layer inputs\n"
         "                        spread evenly, then final\n"
         "  --capture SPEC        capture points as `layertap extract --capture` takes them\n"
         "  --sample-tokens N     tokens per sample inside a batch (default 2048)\n"
         "  --iters N             timed forwards per mode, median reported (default 5)\n"
         "  --warmup N            untimed forwards per mode first (default 1)\n"
         "  --gemm-iters N        products per shape in the GEMM-rate measurement (default 10)\n"
         "  --attention KERNEL    auto (default), reference, flash\n"
         "  --device N            GPU index (default 0)\n"
         "  --seed N              weights and tokens seed (default 1)\n";
}

ModelConfig synthetic_model_config(const std::string& name) {
  ModelConfig c;
  c.torch_dtype = DType::BF16;
  if (name == "llama3-8b") {  // Llama-3.1-8B
    c.architecture = "LlamaForCausalLM";
    c.hidden_size = 4096, c.num_layers = 32, c.num_heads = 32, c.num_kv_heads = 8, c.head_dim = 128;
    c.intermediate_size = 14336, c.vocab_size = 128256, c.rms_norm_eps = 1e-5;
    c.rope.type = RopeConfig::Type::Llama3;
    c.rope.theta = 500000.0, c.rope.factor = 8.0, c.rope.low_freq_factor = 1.0, c.rope.high_freq_factor = 4.0;
    c.rope.original_max_position_embeddings = 8192;
  } else if (name == "qwen3-8b") {  // Qwen3-8B
    c.architecture = "Qwen3ForCausalLM";
    c.hidden_size = 4096, c.num_layers = 36, c.num_heads = 32, c.num_kv_heads = 8, c.head_dim = 128;
    c.intermediate_size = 12288, c.vocab_size = 151936, c.rms_norm_eps = 1e-6, c.qk_norm = true;
    c.rope.theta = 1000000.0;
  } else if (name == "tiny") {  // seconds to run: a smoke test of the benchmark itself
    c.architecture = "LlamaForCausalLM";
    c.hidden_size = 256, c.num_layers = 8, c.num_heads = 4, c.num_kv_heads = 2, c.head_dim = 64;
    c.intermediate_size = 512, c.vocab_size = 1000, c.rms_norm_eps = 1e-5;
  } else {
    LT_FAIL("unknown synthetic model '", name, "' (llama3-8b, qwen3-8b, tiny)");
  }
  c.sliding_window.assign(std::size_t(c.num_layers), 0);
  return c;
}

bool parse_bench_options(const std::vector<std::string>& args, BenchOptions& o, std::ostream& out) {
  std::int64_t points = 0;  // 0: --points not given
  for (std::size_t i = 0; i < args.size(); ++i) {
    std::string key = args[i], value;
    if (key == "--help" || key == "-h") {
      out << bench_usage();
      return false;
    }
    LT_CHECK(key.rfind("--", 0) == 0, "bench: unexpected argument '", key, "' (see --help)");
    key = key.substr(2);
    if (const auto eq = key.find('='); eq != std::string::npos) {
      value = key.substr(eq + 1);
      key = key.substr(0, eq);
    } else {
      LT_CHECK(i + 1 < args.size(), "bench: --", key, " needs a value");
      value = args[++i];
    }
    if (key == "synthetic") o.model = value;
    else if (key == "tokens") o.tokens = parse_int_list(key, value);
    else if (key == "points") points = parse_int(key, value, 1);
    else if (key == "capture") o.capture = value;
    else if (key == "sample-tokens") o.sample_tokens = parse_int(key, value, 1);
    else if (key == "iters") o.iters = int(parse_int(key, value, 1));
    else if (key == "warmup") o.warmup = int(parse_int(key, value, 0));
    else if (key == "gemm-iters") o.gemm_iters = int(parse_int(key, value, 1));
    else if (key == "attention") o.attention = value;
    else if (key == "device") o.device = int(parse_int(key, value, 0));
    else if (key == "seed") o.seed = std::uint64_t(parse_int(key, value, 0));
    else LT_FAIL("bench: unknown option --", key, " (see --help)");
  }
  const ModelConfig c = synthetic_model_config(o.model);  // validates the name
  if (points > 0) o.capture = points_spec(points, c.num_layers);
  (void)resolve_capture(o.capture, c.num_layers);  // validates the points
  (void)cuda::parse_attention_kernel(o.attention);
  return true;
}

int run_bench(const BenchOptions& o, std::ostream& out) {
  const int devices = cuda::visible_device_count();
  LT_CHECK(devices > o.device, "bench: GPU ", o.device, " is not visible (", devices, " CUDA device(s))");
  cuda::select_device(o.device);
  const ModelConfig cfg = synthetic_model_config(o.model);
  const CapturePlan plan = resolve_capture(o.capture, cfg.num_layers);
  CapturePlan none = plan;
  none.points.clear();

  cuda::CudaBackendOptions bo;
  bo.max_batch_tokens = *std::max_element(o.tokens.begin(), o.tokens.end());
  bo.max_capture_points = std::int64_t(plan.points.size());
  bo.attention = cuda::parse_attention_kernel(o.attention);
  SoloDeviceAllReduce solo;
  out << kernels::cuda_runtime_summary();
  const auto t_build = Clock::now();
  const auto backend = cuda::CudaBackend::synthetic(cfg, solo, bo, o.seed);
  out << "backend: " << backend->description() << "\n";
  out << "synthetic " << o.model << " built on the device in "
      << fixed(std::chrono::duration<double>(Clock::now() - t_build).count(), 2) << " s\n";
  const std::int64_t params = backend->shape().layer_matmul_params();  // tp 1: the whole model's
  std::string points;
  for (const CapturePoint& p : plan.points) points += cat(points.empty() ? "" : ",", p.spec);
  out << "model: " << cfg.architecture << ", " << cfg.num_layers << " layers, hidden " << cfg.hidden_size << ", heads "
      << cfg.num_heads << "/" << cfg.num_kv_heads << " x " << cfg.head_dim << ", intermediate " << cfg.intermediate_size
      << ", vocab " << cfg.vocab_size << "; matmul params (non-embedding) " << fixed(double(params) / 1e9, 3) << "e9\n";
  out << "capture: '" << o.capture << "' = points " << points << "; samples of " << o.sample_tokens
      << " tokens; median of " << o.iters << " forwards per mode, interleaved\n\n";

  struct Row {
    std::int64_t T;
    double plain, captured, gemm;
    GemmRates rates;
  };
  std::vector<Row> rows;
  for (const std::int64_t T : o.tokens) {
    const PackedBatch batch = make_batch(T, o.sample_tokens, cfg.vocab_size, o.seed + std::uint64_t(T));
    const auto plain = [&] { (void)backend->forward(batch, none, DType::BF16); };
    const auto captured = [&] { (void)backend->forward(batch, plan, DType::BF16); };
    for (int i = 0; i < o.warmup; ++i) {
      plain();
      captured();
    }
    std::vector<double> t_plain, t_captured;
    for (int i = 0; i < o.iters; ++i) {  // interleaved: drift in clocks affects both modes alike
      t_plain.push_back(seconds_of(plain));
      t_captured.push_back(seconds_of(captured));
    }
    Row r{T, double(T) / median(t_plain), double(T) / median(t_captured), 0, measure_gemm(*backend, T, o.gemm_iters)};
    r.gemm = r.rates.overall;
    rows.push_back(r);
    out << "T=" << T << ": forward " << fixed(median(t_plain) * 1e3, 2) << " ms, with capture "
        << fixed(median(t_captured) * 1e3, 2) << " ms; GEMM TFLOP/s qkv " << fixed(r.rates.tflops["qkv"], 1) << ", o "
        << fixed(r.rates.tflops["o"], 1) << ", gate_up " << fixed(r.rates.tflops["gate_up"], 1) << ", down "
        << fixed(r.rates.tflops["down"], 1) << "\n";
  }

  out << "\n tokens | no capture tok/s | capture tok/s | overhead | GEMM TFLOP/s | GEMM-bound tok/s | "
         "fraction (no capture) | fraction (capture)\n";
  for (const Row& r : rows) {
    const double limit = r.gemm * 1e12 / (2.0 * double(params));
    char line[256];
    std::snprintf(line, sizeof line, " %6lld | %16.0f | %13.0f | %7.2f%% | %12.1f | %16.0f | %21.3f | %18.3f\n",
                  static_cast<long long>(r.T), r.plain, r.captured, 100.0 * (r.plain / r.captured - 1.0), r.gemm,
                  limit, r.plain / limit, r.captured / limit);
    out << line;
  }
  out << "\noverhead = time with capture / time without - 1. GEMM-bound tok/s = measured GEMM rate / (2 x "
         "matmul params). Capture = device-to-host copies of the points into the returned vectors (no file "
         "writing).\n";
  return 0;
}

int bench_main(const std::vector<std::string>& args, std::ostream& out) {
  BenchOptions opts;
  if (!parse_bench_options(args, opts, out)) return 0;
  return run_bench(opts, out);
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
