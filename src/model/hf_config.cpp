#include "model/hf_config.hpp"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"

namespace layertap {
namespace {

using nlohmann::json;

struct Family {
  const char* architecture;
  bool qkv_bias_default;
  bool qk_norm;
  bool mistral_window;  // sliding_window applies to every layer when set
};

constexpr Family kFamilies[] = {
    {"LlamaForCausalLM", false, false, false},
    {"MistralForCausalLM", false, false, true},
    {"Qwen2ForCausalLM", true, false, false},
    {"Qwen3ForCausalLM", false, true, false},
};

int64_t get_int(const json& j, const char* key, const std::string& src) {
  LT_CHECK(j.contains(key) && !j[key].is_null(), src, ": missing key '", key, "'");
  LT_CHECK(j[key].is_number_integer(), src, ": key '", key, "' must be an integer");
  return j[key].get<int64_t>();
}

template <typename T>
T get_or(const json& j, const char* key, T fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  return j[key].get<T>();
}

// RoPE settings come in two spellings: top-level rope_theta + rope_scaling (classic Hub configs)
// and a rope_parameters dict (newer transformers). Both are accepted.
RopeConfig parse_rope(const json& j, const std::string& src) {
  RopeConfig rope;
  json params = json::object();
  if (j.contains("rope_parameters") && j["rope_parameters"].is_object())
    params = j["rope_parameters"];
  else if (j.contains("rope_scaling") && j["rope_scaling"].is_object())
    params = j["rope_scaling"];
  rope.theta = get_or<double>(params, "rope_theta", get_or<double>(j, "rope_theta", 10000.0));
  std::string type = get_or<std::string>(params, "rope_type", get_or<std::string>(params, "type", "default"));
  if (type == "default") {
    rope.type = RopeConfig::Type::Default;
  } else if (type == "llama3") {
    rope.type = RopeConfig::Type::Llama3;
    for (const char* key : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      LT_CHECK(params.contains(key), src, ": llama3 rope scaling lacks '", key, "'");
    rope.factor = params["factor"].get<double>();
    rope.low_freq_factor = params["low_freq_factor"].get<double>();
    rope.high_freq_factor = params["high_freq_factor"].get<double>();
    rope.original_max_position_embeddings = params["original_max_position_embeddings"].get<int64_t>();
    LT_CHECK(rope.high_freq_factor > rope.low_freq_factor, src,
             ": llama3 rope scaling needs high_freq_factor > low_freq_factor");
  } else {
    LT_FAIL(src, ": unsupported rope type '", type, "' (supported: default, llama3)");
  }
  LT_CHECK(rope.theta > 0, src, ": rope_theta must be positive");
  const double partial = get_or<double>(params, "partial_rotary_factor", get_or<double>(j, "partial_rotary_factor", 1.0));
  LT_CHECK(partial == 1.0, src, ": partial_rotary_factor ", partial, " is not supported");
  return rope;
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& src) {
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    LT_FAIL(src, ": not valid JSON: ", e.what());
  }
  LT_CHECK(j.is_object(), src, ": expected a JSON object");
  LT_CHECK(j.contains("architectures") && j["architectures"].is_array() && j["architectures"].size() == 1,
           src, ": 'architectures' must list exactly one architecture");
  ModelConfig c;
  c.architecture = j["architectures"][0].get<std::string>();
  const Family* family = nullptr;
  for (const Family& f : kFamilies)
    if (c.architecture == f.architecture) family = &f;
  if (!family) {
    std::string supported;
    for (const Family& f : kFamilies) supported += cat(supported.empty() ? "" : ", ", f.architecture);
    LT_FAIL(src, ": unsupported architecture '", c.architecture, "' (supported: ", supported, ")");
  }

  try {
    c.hidden_size = get_int(j, "hidden_size", src);
    c.intermediate_size = get_int(j, "intermediate_size", src);
    c.num_layers = get_int(j, "num_hidden_layers", src);
    c.num_heads = get_int(j, "num_attention_heads", src);
    c.num_kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                         ? get_int(j, "num_key_value_heads", src)
                         : c.num_heads;
    c.vocab_size = get_int(j, "vocab_size", src);
    LT_CHECK(c.hidden_size > 0 && c.intermediate_size > 0 && c.num_layers > 0 && c.num_heads > 0 &&
                 c.num_kv_heads > 0 && c.vocab_size > 0,
             src, ": sizes must be positive");
    LT_CHECK(c.num_heads % c.num_kv_heads == 0, src, ": num_attention_heads ", c.num_heads,
             " is not a multiple of num_key_value_heads ", c.num_kv_heads);
    if (j.contains("head_dim") && !j["head_dim"].is_null()) {
      c.head_dim = get_int(j, "head_dim", src);
    } else {
      LT_CHECK(c.hidden_size % c.num_heads == 0, src, ": hidden_size ", c.hidden_size,
               " is not divisible by num_attention_heads ", c.num_heads, " and head_dim is not given");
      c.head_dim = c.hidden_size / c.num_heads;
    }
    LT_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0, src, ": head_dim ", c.head_dim, " must be even");
    c.rms_norm_eps = get_or<double>(j, "rms_norm_eps", 1e-6);
    c.rope = parse_rope(j, src);
    c.tie_word_embeddings = get_or<bool>(j, "tie_word_embeddings", false);
    const std::string act = get_or<std::string>(j, "hidden_act", "silu");
    LT_CHECK(act == "silu", src, ": hidden_act '", act, "' is not supported (only silu)");

    const bool attention_bias = get_or<bool>(j, "attention_bias", family->qkv_bias_default);
    c.qkv_bias = attention_bias || family->qkv_bias_default;
    // Llama and Mistral put the bias on o_proj too; Qwen2 has q/k/v biases only.
    c.o_bias = attention_bias && !family->qkv_bias_default;
    c.mlp_bias = get_or<bool>(j, "mlp_bias", false);
    c.qk_norm = family->qk_norm;

    c.sliding_window.assign(std::size_t(c.num_layers), 0);
    if (family->mistral_window) {
      const int64_t w = get_or<int64_t>(j, "sliding_window", 0);
      LT_CHECK(w >= 0, src, ": sliding_window must be non-negative");
      c.sliding_window.assign(std::size_t(c.num_layers), w);
    } else {
      LT_CHECK(!get_or<bool>(j, "use_sliding_window", false), src,
               ": use_sliding_window=true is not supported for ", c.architecture);
    }
    if (j.contains("torch_dtype") && j["torch_dtype"].is_string())
      c.torch_dtype = parse_dtype(j["torch_dtype"].get<std::string>());
    else if (j.contains("dtype") && j["dtype"].is_string())
      c.torch_dtype = parse_dtype(j["dtype"].get<std::string>());
  } catch (const json::exception& e) {
    LT_FAIL(src, ": malformed value: ", e.what());
  }
  return c;
}

ModelConfig load_model_config(const std::string& path) {
  std::ifstream in(path);
  LT_CHECK(in, "cannot open model config '", path, "'");
  std::stringstream ss;
  ss << in.rdbuf();
  return parse_model_config(ss.str(), path);
}

}  // namespace layertap
