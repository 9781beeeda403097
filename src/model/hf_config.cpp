#include "model/hf_config.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "core/error.hpp"

namespace layertap {
namespace {

using nlohmann::json;

enum class Attention { Gqa, Mla };
enum class Ffn { Dense, Qwen3Moe, DeepseekMoe };

struct Family {
  const char* architecture;
  bool qkv_bias_default;
  bool qk_norm;
  bool mistral_window;  // sliding_window applies to every layer when set
  Attention attention;
  Ffn ffn;
  bool text_config;  // a multimodal wrapper: the text model's config is under text_config
};

// The math is chosen by architecture, never by model_type: Moonshot ships Kimi-K2 as
// DeepseekV3ForCausalLM with model_type "kimi_k2", which transformers does not register.
constexpr Family kFamilies[] = {
    {"LlamaForCausalLM", false, false, false, Attention::Gqa, Ffn::Dense, false},
    {"MistralForCausalLM", false, false, true, Attention::Gqa, Ffn::Dense, false},
    {"Qwen2ForCausalLM", true, false, false, Attention::Gqa, Ffn::Dense, false},
    {"Qwen3ForCausalLM", false, true, false, Attention::Gqa, Ffn::Dense, false},
    {"Qwen3MoeForCausalLM", false, true, false, Attention::Gqa, Ffn::Qwen3Moe, false},
    {"DeepseekV3ForCausalLM", false, false, false, Attention::Mla, Ffn::DeepseekMoe, false},
    {"KimiK25ForConditionalGeneration", false, false, false, Attention::Mla, Ffn::DeepseekMoe, true},
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

// transformers' yarn_get_mscale / get_mscale.
double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// RoPE settings come in two spellings: top-level rope_theta + rope_scaling (classic Hub configs)
// and a rope_parameters dict (newer transformers). Both are accepted.
RopeConfig parse_rope(const json& j, int64_t max_position_embeddings, const std::string& src) {
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
  } else if (type == "yarn") {
    // As transformers 5.x's standardize_rope_params and _compute_yarn_parameters: a top-level
    // original_max_position_embeddings wins, else the rope dict's, else max_position_embeddings;
    // a null factor is max_position_embeddings / original.
    rope.type = RopeConfig::Type::Yarn;
    rope.original_max_position_embeddings =
        j.contains("original_max_position_embeddings") && !j["original_max_position_embeddings"].is_null()
            ? get_int(j, "original_max_position_embeddings", src)
            : get_or<int64_t>(params, "original_max_position_embeddings", max_position_embeddings);
    LT_CHECK(rope.original_max_position_embeddings > 0, src,
             ": yarn rope scaling needs a positive original_max_position_embeddings");
    rope.factor = get_or<double>(params, "factor",
                                 double(max_position_embeddings) / double(rope.original_max_position_embeddings));
    LT_CHECK(rope.factor > 0, src, ": yarn rope factor must be positive");
    const double mscale = get_or<double>(params, "mscale", 0.0);
    rope.mscale_all_dim = get_or<double>(params, "mscale_all_dim", 0.0);
    if (params.contains("attention_factor") && !params["attention_factor"].is_null())
      rope.attention_factor = params["attention_factor"].get<double>();
    else if (mscale != 0 && rope.mscale_all_dim != 0)
      rope.attention_factor = yarn_mscale(rope.factor, mscale) / yarn_mscale(rope.factor, rope.mscale_all_dim);
    else
      rope.attention_factor = yarn_mscale(rope.factor, 1.0);
    // `get(...) or 32`: an absent, null or zero beta takes the default.
    rope.beta_fast = get_or<double>(params, "beta_fast", 0.0);
    rope.beta_slow = get_or<double>(params, "beta_slow", 0.0);
    if (rope.beta_fast == 0) rope.beta_fast = 32.0;
    if (rope.beta_slow == 0) rope.beta_slow = 1.0;
    rope.truncate = get_or<bool>(params, "truncate", true);
  } else {
    LT_FAIL(src, ": unsupported rope type '", type, "' (supported: default, llama3, yarn)");
  }
  LT_CHECK(rope.theta > 0, src, ": rope_theta must be positive");
  const double partial = get_or<double>(params, "partial_rotary_factor", get_or<double>(j, "partial_rotary_factor", 1.0));
  LT_CHECK(partial == 1.0, src, ": partial_rotary_factor ", partial, " is not supported");
  return rope;
}

// MLA shapes (DeepseekV3Attention). Missing keys take transformers' DeepseekV3Config defaults.
MlaConfig parse_mla(const json& j, const ModelConfig& c, const std::string& src) {
  MlaConfig m;
  m.q_lora_rank = j.contains("q_lora_rank") ? (j["q_lora_rank"].is_null() ? 0 : get_int(j, "q_lora_rank", src)) : 1536;
  m.kv_lora_rank = get_or<int64_t>(j, "kv_lora_rank", 512);
  m.qk_nope_head_dim = get_or<int64_t>(j, "qk_nope_head_dim", 128);
  m.qk_rope_head_dim = get_or<int64_t>(j, "qk_rope_head_dim", 64);
  m.v_head_dim = get_or<int64_t>(j, "v_head_dim", 128);
  m.rope_interleave = get_or<bool>(j, "rope_interleave", true);
  m.bias = get_or<bool>(j, "attention_bias", false);
  LT_CHECK(m.q_lora_rank >= 0 && m.kv_lora_rank > 0 && m.qk_nope_head_dim > 0 && m.qk_rope_head_dim > 0 &&
               m.v_head_dim > 0,
           src, ": MLA sizes (q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim) must be "
           "positive");
  LT_CHECK(m.qk_rope_head_dim % 2 == 0, src, ": qk_rope_head_dim ", m.qk_rope_head_dim, " must be even");
  LT_CHECK(c.num_kv_heads == c.num_heads, src, ": MLA needs num_key_value_heads (", c.num_kv_heads,
           ") equal to num_attention_heads (", c.num_heads, ")");
  // yarn_apply_mscale: any non-default rope with mscale_all_dim also scales the softmax.
  m.softmax_scale = std::pow(double(m.qk_head_dim()), -0.5);
  if (c.rope.type != RopeConfig::Type::Default && c.rope.mscale_all_dim != 0) {
    const double mscale = yarn_mscale(c.rope.factor, c.rope.mscale_all_dim);
    m.softmax_scale *= mscale * mscale;
  }
  return m;
}

// DeepSeek-V3 MoE (DeepseekV3MoE + DeepseekV3TopkRouter), defaults as DeepseekV3Config.
void parse_deepseek_moe(const json& j, ModelConfig& c, const std::string& src) {
  const std::string method = get_or<std::string>(j, "topk_method", "noaux_tc");
  const std::string scoring = get_or<std::string>(j, "scoring_func", "sigmoid");
  LT_CHECK(method == "noaux_tc" && scoring == "sigmoid", src, ": routing topk_method '", method, "' with scoring_func '",
           scoring, "' is not supported (supported: noaux_tc with sigmoid, as DeepSeek-V3 and Kimi-K2)");
  MoeConfig m;
  m.routing = MoeConfig::Routing::SigmoidGroupedTopk;
  m.num_experts = get_or<int64_t>(j, "n_routed_experts", 256);
  m.experts_per_token = get_or<int64_t>(j, "num_experts_per_tok", 8);
  m.expert_intermediate_size = get_or<int64_t>(j, "moe_intermediate_size", 2048);
  m.num_shared_experts = get_or<int64_t>(j, "n_shared_experts", 1);
  m.n_group = get_or<int64_t>(j, "n_group", 8);
  m.topk_group = get_or<int64_t>(j, "topk_group", 4);
  m.norm_topk_prob = get_or<bool>(j, "norm_topk_prob", true);
  m.routed_scaling_factor = get_or<double>(j, "routed_scaling_factor", 2.5);
  m.score_bias = true;
  LT_CHECK(m.num_experts > 0 && m.experts_per_token > 0 && m.expert_intermediate_size > 0 && m.num_shared_experts >= 0,
           src, ": MoE sizes must be positive");
  LT_CHECK(m.n_group > 0 && m.num_experts % m.n_group == 0, src, ": n_group ", m.n_group,
           " does not divide n_routed_experts ", m.num_experts);
  LT_CHECK(m.num_experts / m.n_group >= 2, src, ": routing sums the top 2 experts of each group, but a group holds ",
           m.num_experts / m.n_group);
  LT_CHECK(m.topk_group > 0 && m.topk_group <= m.n_group, src, ": topk_group ", m.topk_group,
           " must be in 1..n_group (", m.n_group, ")");
  LT_CHECK(m.experts_per_token <= m.topk_group * (m.num_experts / m.n_group), src, ": num_experts_per_tok ",
           m.experts_per_token, " exceeds the experts of the topk_group selected groups");
  // The original DeepSeek code makes a layer MoE when i >= first_k_dense_replace and
  // i % moe_layer_freq == 0; transformers reads only the first condition, so the two agree for
  // moe_layer_freq 1, the value every released checkpoint uses.
  const int64_t first_dense = get_or<int64_t>(j, "first_k_dense_replace", 3);
  const int64_t freq = get_or<int64_t>(j, "moe_layer_freq", 1);
  LT_CHECK(first_dense >= 0 && freq >= 1, src, ": first_k_dense_replace must be >= 0 and moe_layer_freq >= 1");
  c.moe_layers.assign(std::size_t(c.num_layers), false);
  for (int64_t i = 0; i < c.num_layers; ++i) c.moe_layers[std::size_t(i)] = i >= first_dense && i % freq == 0;
  c.moe = m;
}

// Qwen3-MoE (Qwen3MoeSparseMoeBlock): no shared experts; dense layers by decoder_sparse_step and
// mlp_only_layers.
void parse_qwen3_moe(const json& j, ModelConfig& c, const std::string& src) {
  MoeConfig m;
  m.routing = MoeConfig::Routing::SoftmaxTopk;
  // Hub checkpoints say num_experts; transformers 5 writes num_local_experts.
  m.num_experts = j.contains("num_experts") ? get_int(j, "num_experts", src) : get_int(j, "num_local_experts", src);
  m.experts_per_token = get_int(j, "num_experts_per_tok", src);
  m.expert_intermediate_size = get_int(j, "moe_intermediate_size", src);
  m.norm_topk_prob = get_or<bool>(j, "norm_topk_prob", false);
  LT_CHECK(m.num_experts >= 0 && m.experts_per_token > 0 && m.expert_intermediate_size > 0, src,
           ": MoE sizes must be positive");
  LT_CHECK(m.experts_per_token <= m.num_experts || m.num_experts == 0, src, ": num_experts_per_tok ",
           m.experts_per_token, " exceeds num_experts ", m.num_experts);
  const int64_t step = get_or<int64_t>(j, "decoder_sparse_step", 1);
  LT_CHECK(step >= 1, src, ": decoder_sparse_step must be at least 1");
  const auto dense_only = get_or<std::vector<int64_t>>(j, "mlp_only_layers", {});
  c.moe_layers.assign(std::size_t(c.num_layers), false);
  for (int64_t i = 0; i < c.num_layers; ++i)
    c.moe_layers[std::size_t(i)] = std::find(dense_only.begin(), dense_only.end(), i) == dense_only.end() &&
                                   m.num_experts > 0 && (i + 1) % step == 0;
  if (m.num_experts > 0) c.moe = m;
}

const Family& find_family(const json& j, const std::string& src) {
  LT_CHECK(j.contains("architectures") && j["architectures"].is_array() && j["architectures"].size() == 1 &&
               j["architectures"][0].is_string(),
           src, ": 'architectures' must list exactly one architecture name");
  const std::string arch = j["architectures"][0].get<std::string>();
  for (const Family& f : kFamilies)
    if (arch == f.architecture) return f;
  std::string supported;
  for (const Family& f : kFamilies) supported += cat(supported.empty() ? "" : ", ", f.architecture);
  LT_FAIL(src, ": unsupported architecture '", arch, "' (supported: ", supported, ")");
}

}  // namespace

ModelConfig parse_model_config(const std::string& json_text, const std::string& src) {
  json top;
  try {
    top = json::parse(json_text);
  } catch (const json::exception& e) {
    LT_FAIL(src, ": not valid JSON: ", e.what());
  }
  LT_CHECK(top.is_object(), src, ": expected a JSON object");
  const Family& family = find_family(top, src);
  ModelConfig c;
  c.architecture = family.architecture;
  // Kimi-K2.5: the text model's config under text_config, its tensors under language_model.
  if (family.text_config) {
    LT_CHECK(top.contains("text_config") && top["text_config"].is_object(), src, ": ", c.architecture,
             " needs a 'text_config' object");
    c.tensor_prefix = "language_model.model.";
  }
  const json& j = family.text_config ? top["text_config"] : top;
  const std::string where = family.text_config ? src + " (text_config)" : src;

  try {
    c.hidden_size = get_int(j, "hidden_size", where);
    c.intermediate_size = get_int(j, "intermediate_size", where);
    c.num_layers = get_int(j, "num_hidden_layers", where);
    c.num_heads = get_int(j, "num_attention_heads", where);
    c.num_kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                         ? get_int(j, "num_key_value_heads", where)
                         : c.num_heads;
    c.vocab_size = get_int(j, "vocab_size", where);
    c.max_position_embeddings = get_or<int64_t>(j, "max_position_embeddings", 0);
    LT_CHECK(c.hidden_size > 0 && c.intermediate_size > 0 && c.num_layers > 0 && c.num_heads > 0 &&
                 c.num_kv_heads > 0 && c.vocab_size > 0,
             where, ": sizes must be positive");
    LT_CHECK(c.num_heads % c.num_kv_heads == 0, where, ": num_attention_heads ", c.num_heads,
             " is not a multiple of num_key_value_heads ", c.num_kv_heads);
    c.rms_norm_eps = get_or<double>(j, "rms_norm_eps", 1e-6);
    c.rope = parse_rope(j, c.max_position_embeddings, where);
    c.tie_word_embeddings = get_or<bool>(j, "tie_word_embeddings", false);
    const std::string act = get_or<std::string>(j, "hidden_act", "silu");
    LT_CHECK(act == "silu", where, ": hidden_act '", act, "' is not supported (only silu)");

    if (family.attention == Attention::Mla) {
      c.mla = parse_mla(j, c, where);
      c.head_dim = c.mla->qk_rope_head_dim;  // what transformers' DeepseekV3Config sets, the rope dim
    } else if (j.contains("head_dim") && !j["head_dim"].is_null()) {
      c.head_dim = get_int(j, "head_dim", where);
    } else {
      LT_CHECK(c.hidden_size % c.num_heads == 0, where, ": hidden_size ", c.hidden_size,
               " is not divisible by num_attention_heads ", c.num_heads, " and head_dim is not given");
      c.head_dim = c.hidden_size / c.num_heads;
    }
    LT_CHECK(c.head_dim > 0 && c.head_dim % 2 == 0, where, ": head_dim ", c.head_dim, " must be even");

    if (family.attention == Attention::Gqa) {
      const bool attention_bias = get_or<bool>(j, "attention_bias", family.qkv_bias_default);
      c.qkv_bias = attention_bias || family.qkv_bias_default;
      // Llama and Mistral put the bias on o_proj too; Qwen2 has q/k/v biases only.
      c.o_bias = attention_bias && !family.qkv_bias_default;
      c.mlp_bias = get_or<bool>(j, "mlp_bias", false);
      c.qk_norm = family.qk_norm;
    }
    if (family.ffn == Ffn::DeepseekMoe) parse_deepseek_moe(j, c, where);
    if (family.ffn == Ffn::Qwen3Moe) parse_qwen3_moe(j, c, where);

    c.sliding_window.assign(std::size_t(c.num_layers), 0);
    if (family.mistral_window) {
      const int64_t w = get_or<int64_t>(j, "sliding_window", 0);
      LT_CHECK(w >= 0, where, ": sliding_window must be non-negative");
      c.sliding_window.assign(std::size_t(c.num_layers), w);
    } else {
      LT_CHECK(!get_or<bool>(j, "use_sliding_window", false), where,
               ": use_sliding_window=true is not supported for ", c.architecture);
    }
    for (const json* cfg : {&j, static_cast<const json*>(&top)}) {
      if (cfg->contains("torch_dtype") && (*cfg)["torch_dtype"].is_string()) {
        c.torch_dtype = parse_dtype((*cfg)["torch_dtype"].get<std::string>());
        break;
      }
      if (cfg->contains("dtype") && (*cfg)["dtype"].is_string()) {
        c.torch_dtype = parse_dtype((*cfg)["dtype"].get<std::string>());
        break;
      }
    }
    // quantization_config at the top level, or inside text_config.
    for (const json* cfg : {static_cast<const json*>(&top), &j}) {
      if (cfg->contains("quantization_config") && !(*cfg)["quantization_config"].is_null()) {
        c.quant = parse_quant_config((*cfg)["quantization_config"], src);
        break;
      }
    }
    if (family.text_config) {
      c.media_placeholder_token_id =
          get_or<int64_t>(top, "media_placeholder_token_id", get_or<int64_t>(j, "media_placeholder_token_id", -1));
    }
  } catch (const json::exception& e) {
    LT_FAIL(where, ": malformed value: ", e.what());
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
