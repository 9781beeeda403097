#include "cli/bench.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/device.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_info.hpp"
#include "kernels/random_fill.cuh"
#include "model/capture.hpp"
#if defined(LAYERTAP_CUDA_SIM)
#include "sim/sim.hpp"
#endif

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
  for (const std::int64_t t : out)  // as extract's --max-batch-tokens: every buffer it sizes fits 64 bits
    LT_CHECK(t <= (std::int64_t(1) << 24), "bench: --", key, " takes at most ", std::int64_t(1) << 24,
             " tokens per batch, not ", t);
  return out;
}

std::vector<std::string> split_list(const std::string& v) {
  std::vector<std::string> out;
  std::stringstream ss(v);
  std::string item;
  while (std::getline(ss, item, ',')) out.push_back(item);
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
         "Runs the CUDA backend on a synthetic model (random weights made on the GPU; quantized ones\n"
         "packed as the checkpoint stores them) and prints tokens/s without and with capture and the\n"
         "capture overhead; for dense models the cuBLASLt bf16 GEMM rate on the model's product shapes\n"
         "and tokens/s as a fraction of the GEMM-bound limit; for MoE models per-layer times, the\n"
         "expert load on this rank, and (with --tp-shard N) the N-GPU group's projected tokens/s.\n\n"
         "  --synthetic NAME      llama3-8b (default), llama3-70b, qwen3-8b, tiny (dense); kimi-k2.5 (MLA, MoE,\n"
         "                        INT4 experts), deepseek-v3 (MLA, MoE, FP8), qwen3-30b-a3b (MoE),\n"
         "                        tiny-moe (MLA, MoE, INT4; seconds), kimi-k2.5-mini (Kimi-K2.5's experts\n"
         "                        and top-k at width 256: the simulated GPU's counts per forward)\n"
         "  --tp-shard N          run one rank's share of an N-GPU tensor-parallel group (default 1);\n"
         "                        its all-reduces are modelled from --bus-gbs, not run\n"
         "  --tp-rank R           which rank's share (default 0: it holds the hottest Zipf experts)\n"
         "  --moe-split S         experts (default: whole experts per rank) or intermediate\n"
         "  --layers N            build N layers (default: all, or as many as fit; the count is printed)\n"
         "  --routing LIST        MoE expert loads: uniform (random router), zipf (default both)\n"
         "  --zipf-s S            zipf skew: expert e's router logit offset by -S ln(e + 1) (default 1)\n"
         "  --bus-gbs LIST        all-reduce bus bandwidths of the projection in GB/s (default 450,50:\n"
         "                        NVLink-class, PCIe Gen5 x16)\n"
         "  --baseline TOKS       published tokens/s to compare with (default 2280)\n"
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

namespace {

// Text configs of the MoE models, as their config.json files spell them (shapes of the released
// checkpoints; the values of random weights do not matter for timing).
const char* kKimiK25 = R"json({
  "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "intermediate_size": 18432,
  "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 64, "num_key_value_heads": 64,
  "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 1, "topk_group": 1,
  "first_k_dense_replace": 1, "moe_layer_freq": 1, "routed_scaling_factor": 2.827, "norm_topk_prob": true,
  "topk_method": "noaux_tc", "scoring_func": "sigmoid", "q_lora_rank": 1536, "kv_lora_rank": 512,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 163840,
  "max_position_embeddings": 262144, "rms_norm_eps": 1e-5, "rope_theta": 50000.0,
  "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                   "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
  "attention_bias": false, "hidden_act": "silu", "torch_dtype": "bfloat16", "tie_word_embeddings": false,
  "quantization_config": {
    "quant_method": "compressed-tensors", "format": "pack-quantized", "quantization_status": "compressed",
    "config_groups": {"group_0": {"targets": ["Linear"], "input_activations": null, "output_activations": null,
      "weights": {"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": 32,
                  "dynamic": false, "actorder": null, "block_structure": null, "observer": "minmax",
                  "observer_kwargs": {}}}},
    "ignore": ["re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*",
               "re:.*lm_head.*"],
    "kv_cache_scheme": null}
})json";

// Kimi-K2.5's layout (384 experts, top 8, one shared, the first layer dense, MLA, INT4 groups of
// 32) at a small width, for the simulated GPU: its counts of launches and waits per forward are
// those of the real model, its sizes are not.
const char* kKimiK25Mini = R"json({
  "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 256, "intermediate_size": 512,
  "moe_intermediate_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
  "n_routed_experts": 384, "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 1, "topk_group": 1,
  "first_k_dense_replace": 1, "moe_layer_freq": 1, "routed_scaling_factor": 2.827, "norm_topk_prob": true,
  "topk_method": "noaux_tc", "scoring_func": "sigmoid", "q_lora_rank": 128, "kv_lora_rank": 128,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 1000,
  "max_position_embeddings": 262144, "rms_norm_eps": 1e-5, "rope_theta": 50000.0,
  "rope_scaling": {"type": "yarn", "factor": 64.0, "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                   "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 1.0},
  "hidden_act": "silu", "torch_dtype": "bfloat16",
  "quantization_config": {
    "quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": 32}}},
    "ignore": ["re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"]}
})json";

const char* kDeepseekV3 = R"json({
  "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 7168, "intermediate_size": 18432,
  "moe_intermediate_size": 2048, "num_hidden_layers": 61, "num_attention_heads": 128, "num_key_value_heads": 128,
  "n_routed_experts": 256, "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 8, "topk_group": 4,
  "first_k_dense_replace": 3, "moe_layer_freq": 1, "routed_scaling_factor": 2.5, "norm_topk_prob": true,
  "topk_method": "noaux_tc", "scoring_func": "sigmoid", "q_lora_rank": 1536, "kv_lora_rank": 512,
  "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 129280,
  "max_position_embeddings": 163840, "rms_norm_eps": 1e-6, "rope_theta": 10000,
  "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096, "beta_fast": 32,
                   "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
  "attention_bias": false, "hidden_act": "silu", "torch_dtype": "bfloat16", "tie_word_embeddings": false,
  "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                          "weight_block_size": [128, 128]}
})json";

const char* kQwen3_30B_A3B = R"json({
  "architectures": ["Qwen3MoeForCausalLM"], "hidden_size": 2048, "intermediate_size": 6144,
  "moe_intermediate_size": 768, "num_hidden_layers": 48, "num_attention_heads": 32, "num_key_value_heads": 4,
  "head_dim": 128, "num_experts": 128, "num_experts_per_tok": 8, "norm_topk_prob": true, "decoder_sparse_step": 1,
  "mlp_only_layers": [], "vocab_size": 151936, "max_position_embeddings": 40960, "rms_norm_eps": 1e-6,
  "rope_theta": 1000000.0, "attention_bias": false, "hidden_act": "silu", "torch_dtype": "bfloat16",
  "tie_word_embeddings": false
})json";

// Kimi-K2.5's kinds of parts (MLA with qk 192 / v 128 heads, grouped sigmoid routing, INT4
// experts, a dense first layer) at a size that builds and runs in seconds.
const char* kTinyMoe = R"json({
  "architectures": ["DeepseekV3ForCausalLM"], "hidden_size": 512, "intermediate_size": 1024,
  "moe_intermediate_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 4,
  "n_routed_experts": 16, "n_shared_experts": 1, "num_experts_per_tok": 4, "n_group": 4, "topk_group": 2,
  "first_k_dense_replace": 1, "routed_scaling_factor": 2.5, "norm_topk_prob": true, "q_lora_rank": 128,
  "kv_lora_rank": 128, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128, "vocab_size": 1000,
  "max_position_embeddings": 65536, "rms_norm_eps": 1e-6, "rope_theta": 10000,
  "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 4096, "beta_fast": 32,
                   "beta_slow": 1, "mscale": 1.0, "mscale_all_dim": 1.0},
  "hidden_act": "silu", "torch_dtype": "bfloat16",
  "quantization_config": {
    "quant_method": "compressed-tensors", "format": "pack-quantized",
    "config_groups": {"group_0": {"targets": ["Linear"],
      "weights": {"num_bits": 4, "type": "int", "symmetric": true, "strategy": "group", "group_size": 32}}},
    "ignore": ["re:.*self_attn.*", "re:.*shared_experts.*", "re:.*mlp\\.(gate|up|gate_up|down)_proj.*"]}
})json";

// `json` with its num_hidden_layers replaced by `layers` (> 0).
std::string with_layers(std::string json, std::int64_t layers) {
  const std::string key = "\"num_hidden_layers\": ";
  const std::size_t at = json.find(key);
  LT_CHECK(at != std::string::npos, "bench: synthetic config without num_hidden_layers");
  const std::size_t end = json.find(',', at);
  return json.replace(at + key.size(), end - at - key.size(), std::to_string(layers));
}

}  // namespace

std::vector<std::string> synthetic_model_names() {
  return {"llama3-8b", "llama3-70b", "qwen3-8b", "tiny", "kimi-k2.5", "deepseek-v3", "qwen3-30b-a3b", "tiny-moe",
          "kimi-k2.5-mini"};
}

ModelConfig synthetic_model_config(const std::string& name, std::int64_t layers) {
  LT_CHECK(layers >= 0, "bench: --layers must be positive");
  const std::map<std::string, const char*> json = {
      {"kimi-k2.5", kKimiK25}, {"deepseek-v3", kDeepseekV3}, {"qwen3-30b-a3b", kQwen3_30B_A3B}, {"tiny-moe", kTinyMoe}, {"kimi-k2.5-mini", kKimiK25Mini}};
  if (const auto it = json.find(name); it != json.end()) {
    const std::string text = layers > 0 ? with_layers(it->second, layers) : std::string(it->second);
    return parse_model_config(text, "synthetic " + name);
  }
  ModelConfig c;
  c.torch_dtype = DType::BF16;
  if (name == "llama3-8b" || name == "llama3-70b") {  // Llama-3.1-8B, Llama-3.1-70B
    c.architecture = "LlamaForCausalLM";
    c.hidden_size = 4096, c.num_layers = 32, c.num_heads = 32, c.num_kv_heads = 8, c.head_dim = 128;
    c.intermediate_size = 14336, c.vocab_size = 128256, c.rms_norm_eps = 1e-5;
    if (name == "llama3-70b") c.hidden_size = 8192, c.num_layers = 80, c.num_heads = 64, c.intermediate_size = 28672;
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
    std::string names;
    for (const std::string& n : synthetic_model_names()) names += (names.empty() ? "" : ", ") + n;
    LT_FAIL("unknown synthetic model '", name, "' (", names, ")");
  }
  if (layers > 0) c.num_layers = layers;
  c.sliding_window.assign(std::size_t(c.num_layers), 0);
  return c;
}

TpProjection project_tp(std::int64_t tokens, std::int64_t hidden, std::int64_t layers, int ranks, double bus_gbs,
                        double rank_forward_ms) {
  TpProjection p;
  const double bytes = double(tokens) * double(hidden) * 2.0;  // bf16
  p.allreduce_ms = ranks > 1 ? 2.0 * double(ranks - 1) / double(ranks) * bytes / (bus_gbs * 1e9) * 1e3 : 0.0;
  p.step_ms = rank_forward_ms + 2.0 * double(layers) * p.allreduce_ms;
  p.tokens_per_s = double(tokens) / (p.step_ms * 1e-3);
  return p;
}

std::vector<float> zipf_logit_offsets(std::int64_t experts, double s) {
  std::vector<float> o(std::size_t(std::max<std::int64_t>(experts, 0)));
  for (std::size_t e = 0; e < o.size(); ++e) o[e] = float(-s * std::log(double(e) + 1.0));
  return o;
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
    else if (key == "tp-shard") o.tp_shard = int(parse_int(key, value, 1));
    else if (key == "tp-rank") o.tp_rank = int(parse_int(key, value, 0));
    else if (key == "moe-split") o.moe_split = value;
    else if (key == "layers") o.layers = parse_int(key, value, 1);
    else if (key == "routing") o.routing = split_list(value);
    else if (key == "zipf-s") o.zipf_s = parse_positive(key, value);
    else if (key == "baseline") o.baseline = parse_positive(key, value);
    else if (key == "bus-gbs") {
      o.bus_gbs.clear();
      for (const std::string& b : split_list(value)) o.bus_gbs.push_back(parse_positive(key, b));
      LT_CHECK(!o.bus_gbs.empty(), "bench: --bus-gbs expects a comma-separated list of GB/s");
    } else LT_FAIL("bench: unknown option --", key, " (see --help)");
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
  return true;
}

namespace {

// One tensor-parallel rank whose all-reduces are not run (the benchmark models their time): it
// counts them, so the report can say how many a forward needs.
class ModelledAllReduce final : public DeviceAllReduce {
 public:
  ModelledAllReduce(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum_bf16(void*, std::int64_t, cudaStream_t) override { ++calls; }
  std::int64_t calls = 0;

 private:
  int rank_, size_;
};

std::string gib(std::size_t bytes) { return fixed(double(bytes) / double(std::size_t(1) << 30), 2) + " GiB"; }

// Device bytes the rank's share of `cfg` needs (weights, scratch, workspace, headroom).
std::size_t bytes_needed(const ModelConfig& cfg, const TpShard& shard, const cuda::CudaBackendOptions& bo) {
  const cuda::LocalShape s = cuda::LocalShape::of(cfg, shard, cuda::PackedSource::Config);
  const cuda::MemoryPlan p = cuda::plan_memory(s, bo);
  return p.weight_bytes + p.scratch_bytes + p.workspace_bytes + cuda::kDeviceHeadroomBytes;
}

// The most layers (at most the model's) whose rank share fits in `free_bytes`; 0 if not even 2.
std::int64_t layers_that_fit(const std::string& model, const TpShard& shard, const cuda::CudaBackendOptions& bo,
                             std::size_t free_bytes) {
  const std::int64_t full = synthetic_model_config(model).num_layers;
  for (std::int64_t L = full; L >= 2; --L)
    if (bytes_needed(synthetic_model_config(model, L), shard, bo) <= free_bytes) return L;
  return 0;
}

const char* bus_label(double gbs) {
  if (gbs >= 200) return "NVLink-class";
  if (gbs >= 40) return "PCIe Gen5 x16";
  return "slower bus";
}

double mean_of(const std::vector<double>& v) {
  return v.empty() ? 0.0 : std::accumulate(v.begin(), v.end(), 0.0) / double(v.size());
}

}  // namespace

// The simulated GPU (LAYERTAP_CUDA_SIM builds) counts what one forward does: exact on any machine,
// the structure the performance work cuts (launches, cuBLASLt calls, host waits).
void print_simulated_counts(std::ostream& out, const std::string& what, const std::function<void()>& forward) {
#if defined(LAYERTAP_CUDA_SIM)
  int device = 0;
  LT_CUDA_CHECK(cudaGetDevice(&device));
  const sim::Counters a = sim::counters(device);
  forward();
  const sim::Counters b = sim::counters(device);
  out << "simulated GPU, one forward (" << what << "): " << b.kernel_launches - a.kernel_launches
      << " kernel launches, " << b.matmuls - a.matmuls << " cuBLASLt matmuls, " << b.all_reduces - a.all_reduces
      << " NCCL all-reduces, " << b.host_syncs - a.host_syncs << " host synchronisations, " << b.copies - a.copies
      << " copies and memsets; device memory " << fixed(double(b.device_bytes) / 1048576.0, 1) << " MiB allocated (peak "
      << fixed(double(b.peak_device_bytes) / 1048576.0, 1) << " MiB)\n";
#else
  (void)out;
  (void)what;
  (void)forward;
#endif
}

int run_bench(const BenchOptions& o, std::ostream& out) {
  const int devices = cuda::visible_device_count();
  LT_CHECK(devices > o.device, "bench: GPU ", o.device, " is not visible (", devices, " CUDA device(s))");
  cuda::select_device(o.device);
  const ModelConfig full_cfg = synthetic_model_config(o.model);
  const TpShard shard{o.tp_rank, o.tp_shard, parse_moe_split(o.moe_split)};
  const bool moe = full_cfg.moe.has_value();

  cuda::CudaBackendOptions bo;
  bo.max_batch_tokens = *std::max_element(o.tokens.begin(), o.tokens.end());
  bo.max_capture_points = std::int64_t(resolve_capture(o.capture, full_cfg.num_layers).points.size());
  bo.attention = cuda::parse_attention_kernel(o.attention);
  bo.moe_split = shard.moe_split;
  bo.profile_layers = moe;
  out << kernels::cuda_runtime_summary();

  // All layers if they fit, else as many as do (the per-layer times then stand for the rest).
  std::int64_t L = o.layers;
  if (L == 0) {
    std::size_t free_bytes = 0, total_bytes = 0;
    LT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    L = layers_that_fit(o.model, shard, bo, free_bytes);
    LT_CHECK(L > 0, "bench: not even 2 layers of ", o.model, " (rank ", o.tp_rank, " of ", o.tp_shard,
             ") fit in the GPU's ", gib(free_bytes), " free; raise --tp-shard or lower --tokens");
  }
  const ModelConfig cfg = synthetic_model_config(o.model, L);
  const CapturePlan plan = resolve_capture(o.capture, cfg.num_layers);
  for (const std::string& w : plan.warnings) log_warn(w);
  CapturePlan none = plan;
  none.points.clear();
  ModelledAllReduce comm(o.tp_rank, o.tp_shard);
  const auto t_build = Clock::now();
  const auto backend = cuda::CudaBackend::synthetic(cfg, comm, bo, o.seed);
  const cuda::LocalShape& shape = backend->shape();
  out << "backend: " << backend->description() << "\n";
  out << "synthetic " << o.model << " built on the device in "
      << fixed(std::chrono::duration<double>(Clock::now() - t_build).count(), 2) << " s: " << L << " of "
      << full_cfg.num_layers << " layers" << (L < full_cfg.num_layers ? " (as many as fit; per-layer times stand "
                                                                          "for the others)" : "")
      << "\n";
  const std::int64_t params = shape.layer_matmul_params();
  std::string points;
  for (const CapturePoint& p : plan.points) points += cat(points.empty() ? "" : ",", p.spec);
  out << "model: " << cfg.architecture << ", " << cfg.num_layers << " layers, hidden " << cfg.hidden_size << ", heads "
      << cfg.num_heads << "/" << cfg.num_kv_heads;
  if (cfg.mla)
    out << " MLA (q_lora " << cfg.mla->q_lora_rank << ", kv_lora " << cfg.mla->kv_lora_rank << ", qk "
        << cfg.mla->qk_head_dim() << ", v " << cfg.mla->v_head_dim << ")";
  else
    out << " x " << cfg.head_dim;
  out << ", intermediate " << cfg.intermediate_size;
  if (moe)
    out << ", " << cfg.moe->num_experts << " experts of " << cfg.moe->expert_intermediate_size << " (top "
        << cfg.moe->experts_per_token << ", " << cfg.moe->num_shared_experts << " shared)";
  out << ", vocab " << cfg.vocab_size << ", weights " << cfg.quant.describe() << "\n";
  out << "this rank: " << o.tp_rank << " of " << o.tp_shard << " (--moe-split " << o.moe_split << "): heads "
      << shape.heads;
  if (moe)
    out << ", experts " << shape.first_expert << ".." << shape.first_expert + shape.local_experts - 1
        << " (intermediate " << shape.expert_inter << "), shared slice " << shape.shared_inter;
  const cuda::MemoryPlan& mem = backend->memory();
  out << "; weights " << gib(mem.weight_bytes) << " (packed " << gib(mem.packed_bytes) << "), dequantization scratch "
      << gib(mem.scratch_bytes) << ", workspace " << gib(mem.workspace_bytes) << "; matmul params per token "
      << fixed(double(params) / 1e9, 3) << "e9\n";
  out << "capture: '" << o.capture << "' = points " << points << "; samples of " << o.sample_tokens
      << " tokens; median of " << o.iters << " forwards per mode, interleaved\n\n";

  if (!moe) {
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
      print_simulated_counts(out, cat("T=", T, ", with capture"), captured);
      std::vector<double> t_plain, t_captured;
      for (int i = 0; i < o.iters; ++i) {  // interleaved: drift in clocks affects both modes alike
        t_plain.push_back(seconds_of(plain));
        t_captured.push_back(seconds_of(captured));
      }
      Row r{T, double(T) / median(t_plain), double(T) / median(t_captured), 0, measure_gemm(*backend, T, o.gemm_iters)};
      r.gemm = r.rates.overall;
      rows.push_back(r);
      out << "T=" << T << ": forward " << fixed(median(t_plain) * 1e3, 2) << " ms, with capture "
          << fixed(median(t_captured) * 1e3, 2) << " ms; GEMM TFLOP/s qkv " << fixed(r.rates.tflops["qkv"], 1)
          << ", o " << fixed(r.rates.tflops["o"], 1) << ", gate_up " << fixed(r.rates.tflops["gate_up"], 1)
          << ", down " << fixed(r.rates.tflops["down"], 1) << "\n";
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

  // MoE: per routing and batch size, the rank's forward with and without capture, its per-layer
  // times, the load on its experts; then the whole model's forward (scaled to every layer when
  // fewer were built) and the group's projection.
  struct Row {
    std::string routing;
    std::int64_t T = 0;
    double plain_ms = 0, captured_ms = 0;    // built layers, measured
    double dense_ms = 0, moe_ms = 0, moe_min = 0, moe_max = 0;  // mean per layer
    double full_ms = 0, full_captured_ms = 0;  // every layer of the model
    double rows = 0, busiest = 0;            // mean per MoE layer
  };
  std::vector<Row> rows;
  std::int64_t full_dense = 0, full_moe = 0;
  for (std::int64_t i = 0; i < full_cfg.num_layers; ++i) (full_cfg.is_moe_layer(i) ? full_moe : full_dense) += 1;
  const std::int64_t per_forward_allreduces = 2 * cfg.num_layers;
  for (const std::string& routing : o.routing) {
    backend->set_routing_skew(routing == "zipf" ? zipf_logit_offsets(shape.experts, o.zipf_s) : std::vector<float>{});
    for (const std::int64_t T : o.tokens) {
      const PackedBatch batch = make_batch(T, o.sample_tokens, cfg.vocab_size, o.seed + std::uint64_t(T));
      std::vector<double> layer_sum(std::size_t(cfg.num_layers), 0.0);
      const auto plain = [&] {
        (void)backend->forward(batch, none, DType::BF16);
        for (std::size_t i = 0; i < layer_sum.size(); ++i) layer_sum[i] += backend->layer_ms()[i];
      };
      const auto captured = [&] { (void)backend->forward(batch, plan, DType::BF16); };
      for (int i = 0; i < o.warmup; ++i) {
        plain();
        captured();
      }
      print_simulated_counts(out, cat(routing, " routing, T=", T, ", with capture; the group's all-reduces are modelled"),
                             captured);
      std::fill(layer_sum.begin(), layer_sum.end(), 0.0);
      comm.calls = 0;
      std::vector<double> t_plain, t_captured;
      for (int i = 0; i < o.iters; ++i) {
        t_plain.push_back(seconds_of(plain));
        t_captured.push_back(seconds_of(captured));
      }
      Row r;
      r.routing = routing == "zipf" ? cat("zipf(", fixed(o.zipf_s, 2), ")") : routing;
      r.T = T;
      r.plain_ms = median(t_plain) * 1e3;
      r.captured_ms = median(t_captured) * 1e3;
      std::vector<double> dense, moe_layers, moe_rows, busiest;
      double layers_total = 0;
      for (std::int64_t i = 0; i < cfg.num_layers; ++i) {
        const double ms = layer_sum[std::size_t(i)] / o.iters;
        layers_total += ms;
        if (cfg.is_moe_layer(i)) {
          moe_layers.push_back(ms);
          moe_rows.push_back(double(backend->moe_rows()[std::size_t(i)]));
          busiest.push_back(double(backend->moe_busiest()[std::size_t(i)]));
        } else {
          dense.push_back(ms);
        }
      }
      r.dense_ms = mean_of(dense);
      r.moe_ms = mean_of(moe_layers);
      r.moe_min = moe_layers.empty() ? 0 : *std::min_element(moe_layers.begin(), moe_layers.end());
      r.moe_max = moe_layers.empty() ? 0 : *std::max_element(moe_layers.begin(), moe_layers.end());
      r.rows = mean_of(moe_rows);
      r.busiest = mean_of(busiest);
      // Outside the layers: embedding, final norm, metadata, the host's share.
      const double other = std::max(0.0, r.plain_ms - layers_total);
      r.full_ms = cfg.num_layers == full_cfg.num_layers
                      ? r.plain_ms
                      : other + double(full_dense) * r.dense_ms + double(full_moe) * r.moe_ms;
      r.full_captured_ms = r.full_ms + (r.captured_ms - r.plain_ms);
      rows.push_back(r);
      const double uniform_rows = double(T) * double(shape.top_k) * double(shape.local_experts) / double(shape.experts);
      out << "routing " << r.routing << ", " << T << " tokens: forward " << fixed(r.plain_ms, 2) << " ms, with capture "
          << fixed(r.captured_ms, 2) << " ms (" << cfg.num_layers << " layers, " << comm.calls / (2 * o.iters)
          << " all-reduces per forward, modelled); layers: dense " << fixed(r.dense_ms, 3) << " ms, MoE mean "
          << fixed(r.moe_ms, 3) << " (min " << fixed(r.moe_min, 3) << ", max " << fixed(r.moe_max, 3)
          << ") ms; (token, expert) rows on this rank's experts per MoE layer " << fixed(r.rows, 0)
          << " (uniform share " << fixed(uniform_rows, 0) << "), busiest expert " << fixed(r.busiest, 0)
          << " rows (mean " << fixed(r.rows / double(shape.local_experts), 0) << ")\n";
    }
  }

  out << "\n per-layer | routing    | tokens | dense layer ms | dense tok/s | MoE layer ms | MoE tok/s | forward ms ("
      << full_cfg.num_layers << " layers) | rank tok/s | capture overhead\n";
  for (const Row& r : rows) {
    char line[320];
    std::snprintf(line, sizeof line, " per-layer | %-10s | %6lld | %14.3f | %11.0f | %12.3f | %9.0f | %*.1f | %10.0f | %15.2f%%\n",
                  r.routing.c_str(), static_cast<long long>(r.T), r.dense_ms,
                  r.dense_ms > 0 ? double(r.T) / (r.dense_ms * 1e-3) : 0.0, r.moe_ms,
                  r.moe_ms > 0 ? double(r.T) / (r.moe_ms * 1e-3) : 0.0,
                  int(cat("forward ms (", full_cfg.num_layers, " layers)").size()), r.full_ms,
                  double(r.T) / (r.full_ms * 1e-3), 100.0 * (r.captured_ms / r.plain_ms - 1.0));
    out << line;
  }
  out << "\n projection | routing    | tokens | bus                 | GB/s  | all-reduce ms | x " << 2 * full_cfg.num_layers
      << " | step ms | " << o.tp_shard << "-GPU tok/s | vs baseline " << fixed(o.baseline, 0) << " tok/s\n";
  for (const Row& r : rows) {
    for (const double bus : o.bus_gbs) {
      const TpProjection p = project_tp(r.T, cfg.hidden_size, full_cfg.num_layers, o.tp_shard, bus, r.full_captured_ms);
      char line[320];
      std::snprintf(line, sizeof line, " projection | %-10s | %6lld | %-19s | %5.0f | %13.3f | %*.1f | %7.1f | %*.0f | %8.2fx\n",
                    r.routing.c_str(), static_cast<long long>(r.T), bus_label(bus), bus, p.allreduce_ms,
                    int(cat("x ", 2 * full_cfg.num_layers).size()), 2.0 * double(full_cfg.num_layers) * p.allreduce_ms,
                    p.step_ms, int(cat(o.tp_shard, "-GPU tok/s").size()), p.tokens_per_s, p.tokens_per_s / o.baseline);
      out << line;
    }
  }
  out << "\nThe rank runs its share of a " << o.tp_shard << "-GPU tensor-parallel group (" << shape.heads
      << " heads, experts " << shape.first_expert << ".." << shape.first_expert + shape.local_experts - 1
      << ", 1/" << o.tp_shard << " of the dense and shared MLPs) on the whole batch; its " << per_forward_allreduces
      << " all-reduces per forward are not run but modelled: each moves (tokens x " << cfg.hidden_size
      << ") bf16 and takes 2 (n - 1) / n x bytes / bus bandwidth, not overlapped with compute; the group's step is "
         "the rank's forward with capture plus all of them, and its tokens/s is tokens / step (every rank works on "
         "the same batch). Zipf routing puts the hottest experts on rank 0, the busiest rank, which sets the "
         "group's step. Per-layer times include the expansion of packed expert weights into the bf16 scratch. The "
         "baseline ("
      << fixed(o.baseline, 0)
      << " tok/s) is the published figure for Kimi-K2.5 capture on 8 RTX PRO 6000 Blackwell GPUs (PCIe, vLLM "
         "with a patched capture worker).\n";
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
