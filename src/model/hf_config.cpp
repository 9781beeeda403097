#include "model/hf_config.hpp"

#include <algorithm>
#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/regular_file.hpp"
#include "core/text.hpp"
#include "model/json_fields.hpp"

namespace layertap {
namespace {

using nlohmann::json;

enum class Attention { Gqa, Mla };
enum class Ffn { Dense, Qwen3Moe, MixtralMoe, DeepseekMoe, Glm4Moe, GptOssMoe, Llama4Moe };
// Which GQA projections carry biases.
enum class Bias {
  QkvO,       // all four when attention_bias (Llama, Mistral, Qwen3, Mixtral)
  QkvAlways,  // q/k/v always, o never (Qwen2)
  Qkv,        // q/k/v when attention_bias, o never (GLM-4.5)
};
enum class QkNorm { None, Always, WhenUseQkNorm };  // Qwen3: always; GLM-4.5: `use_qk_norm`

// Defaults of keys that a family's configs may omit, as the family's transformers config class
// sets them.
struct TextDefaults {
  int64_t hidden_size, intermediate_size, num_hidden_layers, num_attention_heads, num_key_value_heads, head_dim,
      vocab_size, max_position_embeddings;
  bool tie_word_embeddings;
};
// transformers' Gemma3TextConfig (google/gemma-3-4b-it's text_config names only hidden_size,
// intermediate_size, num_hidden_layers, rope_scaling and sliding_window).
constexpr TextDefaults kGemma3TextDefaults{.hidden_size = 2304,
                                           .intermediate_size = 9216,
                                           .num_hidden_layers = 26,
                                           .num_attention_heads = 8,
                                           .num_key_value_heads = 4,
                                           .head_dim = 256,
                                           .vocab_size = 262208,
                                           .max_position_embeddings = 131072,
                                           .tie_word_embeddings = true};

// A family is a row of parameters of the shared parts; a family with keys of its own adds a parse
// function for them (parse_mixtral_moe, parse_gemma3), never math of its own.
struct Family {
  const char* architecture;
  Attention attention;
  Ffn ffn;
  Bias bias = Bias::QkvO;
  QkNorm qk_norm = QkNorm::None;
  bool mistral_window = false;           // sliding_window applies to every layer when set
  double partial_rotary_default = 1.0;   // partial_rotary_factor when config.json has none
  bool text_config = false;  // a multimodal wrapper: the text model's config is under text_config
  const char* media_token_key = nullptr;  // the wrapper's media token id (refused in samples)
  // Gemma-3's parameters (parse_gemma3): (1+w) and sandwich norms, GeGLU, scaled embeddings,
  // query_pre_attn_scalar, sliding and full layers by layer_types with a rope each.
  bool gemma3 = false;
  // The text config class's defaults for the size keys, where the family's published configs
  // leave them out (Gemma-3's multimodal checkpoints list only what differs); null: required.
  const TextDefaults* defaults = nullptr;
};

// The math is chosen by architecture, never by model_type: Moonshot ships Kimi-K2 as
// DeepseekV3ForCausalLM with model_type "kimi_k2", which transformers does not register.
constexpr Family kFamilies[] = {
    {.architecture = "LlamaForCausalLM", .attention = Attention::Gqa, .ffn = Ffn::Dense},
    {.architecture = "MistralForCausalLM", .attention = Attention::Gqa, .ffn = Ffn::Dense, .mistral_window = true},
    {.architecture = "Qwen2ForCausalLM", .attention = Attention::Gqa, .ffn = Ffn::Dense, .bias = Bias::QkvAlways},
    {.architecture = "Qwen3ForCausalLM", .attention = Attention::Gqa, .ffn = Ffn::Dense, .qk_norm = QkNorm::Always},
    {.architecture = "Qwen3MoeForCausalLM", .attention = Attention::Gqa, .ffn = Ffn::Qwen3Moe,
     .qk_norm = QkNorm::Always},
    {.architecture = "MixtralForCausalLM", .attention = Attention::Gqa, .ffn = Ffn::MixtralMoe, .mistral_window = true},
    // transformers' Glm4MoeConfig defaults partial_rotary_factor to 0.5.
    {.architecture = "Glm4MoeForCausalLM", .attention = Attention::Gqa, .ffn = Ffn::Glm4Moe, .bias = Bias::Qkv,
     .qk_norm = QkNorm::WhenUseQkNorm, .partial_rotary_default = 0.5},
    {.architecture = "DeepseekV3ForCausalLM", .attention = Attention::Mla, .ffn = Ffn::DeepseekMoe},
    {.architecture = "KimiK25ForConditionalGeneration", .attention = Attention::Mla, .ffn = Ffn::DeepseekMoe,
     .text_config = true, .media_token_key = "media_placeholder_token_id"},
    {.architecture = "Gemma3ForCausalLM", .attention = Attention::Gqa, .ffn = Ffn::Dense, .qk_norm = QkNorm::Always,
     .gemma3 = true, .defaults = &kGemma3TextDefaults},
    {.architecture = "Gemma3ForConditionalGeneration", .attention = Attention::Gqa, .ffn = Ffn::Dense,
     .qk_norm = QkNorm::Always, .text_config = true, .media_token_key = "image_token_index", .gemma3 = true,
     .defaults = &kGemma3TextDefaults},
    {.architecture = "GptOssForCausalLM", .attention = Attention::Gqa, .ffn = Ffn::GptOssMoe},
    {.architecture = "Llama4ForCausalLM", .attention = Attention::Gqa, .ffn = Ffn::Llama4Moe},
    {.architecture = "Llama4ForConditionalGeneration", .attention = Attention::Gqa, .ffn = Ffn::Llama4Moe,
     .text_config = true, .media_token_key = "image_token_index"},
};

// Bounds far beyond any released model, tight enough that every product of sizes the loader and
// the backends form (experts x intermediate x hidden x 4 bytes, vocab x hidden, ...) fits int64.
constexpr int64_t kMaxWidth = int64_t(1) << 20;      // hidden, intermediate, head and latent dims
constexpr int64_t kMaxLayers = 4096;
constexpr int64_t kMaxHeads = 4096;
constexpr int64_t kMaxVocab = int64_t(1) << 31;      // token ids are int32
constexpr int64_t kMaxExperts = int64_t(1) << 16;
// Routed experts summed over the MoE layers (Kimi-K2.5: 60 x 384 = 23,040): bounded before any
// per-expert loop (layouts, tensor names) runs over a hostile config's 4096 x 65536.
constexpr int64_t kMaxExpertModules = int64_t(1) << 20;
constexpr int64_t kMaxPositions = int64_t(1) << 40;
constexpr Interval kPositive{0.0, 1e30, true};

// transformers' yarn_get_mscale / get_mscale.
double yarn_mscale(double scale, double mscale) { return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// RoPE settings come in two spellings: top-level rope_theta + rope_scaling (classic Hub configs)
// and a rope_parameters dict (newer transformers). Both are accepted: a key is read from the
// dict this returns (rope_parameters, else rope_scaling, else an empty one), else from the top level.
JsonFields rope_dict(const JsonFields& j) {
  static const json kNone = json::object();
  const char* dict = j.has("rope_parameters") ? "rope_parameters" : j.has("rope_scaling") ? "rope_scaling" : nullptr;
  return JsonFields(dict ? j.raw().at(dict) : kNone, dict ? cat(j.where(), " (", dict, ")") : j.where());
}

// `default_theta` when neither spelling gives rope_theta (10000; Gemma-3's full layers 1e6).
RopeConfig parse_rope(const JsonFields& j, int64_t max_position_embeddings, double default_theta = 10000.0) {
  RopeConfig rope;
  const JsonFields p = rope_dict(j);
  rope.theta = p.number_or("rope_theta", j.number_or("rope_theta", default_theta, {0, 1e12, true}), {0, 1e12, true});
  const std::string type = p.string_or("rope_type", p.string_or("type", "default"));
  if (type == "default") {
    rope.type = RopeConfig::Type::Default;
  } else if (type == "linear") {
    rope.type = RopeConfig::Type::Linear;
    LT_CHECK(p.has("factor"), p.where(), ": linear rope scaling lacks 'factor'");
    rope.factor = p.number_or("factor", 0, {0, 1e4, true});
  } else if (type == "llama3") {
    rope.type = RopeConfig::Type::Llama3;
    for (const char* key : {"factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings"})
      LT_CHECK(p.has(key), p.where(), ": llama3 rope scaling lacks '", key, "'");
    rope.factor = p.number_or("factor", 0, {1, 1e4});
    rope.low_freq_factor = p.number_or("low_freq_factor", 0, {0, 1e4, true});
    rope.high_freq_factor = p.number_or("high_freq_factor", 0, {0, 1e4, true});
    rope.original_max_position_embeddings = p.integer("original_max_position_embeddings", 1, kMaxPositions);
    // Equal factors (Llama-4 Scout) leave no band between the kept and the slowed frequencies.
    LT_CHECK(rope.high_freq_factor >= rope.low_freq_factor, p.where(),
             ": llama3 rope scaling needs high_freq_factor >= low_freq_factor");
  } else if (type == "yarn") {
    // As transformers 5.x's standardize_rope_params and _compute_yarn_parameters: a top-level
    // original_max_position_embeddings wins, else the rope dict's, else max_position_embeddings;
    // a null factor is max_position_embeddings / original.
    rope.type = RopeConfig::Type::Yarn;
    rope.original_max_position_embeddings = j.integer_or(
        "original_max_position_embeddings",
        p.integer_or("original_max_position_embeddings", max_position_embeddings, 1, kMaxPositions), 1, kMaxPositions);
    LT_CHECK(rope.original_max_position_embeddings > 0, p.where(),
             ": yarn rope scaling needs a positive original_max_position_embeddings");
    rope.factor = p.number_or("factor", double(max_position_embeddings) / double(rope.original_max_position_embeddings),
                              {0, 1e4, true});
    LT_CHECK(rope.factor > 0, p.where(), ": yarn rope factor must be positive (max_position_embeddings is missing)");
    const double mscale = p.number_or("mscale", 0.0, {0, 1e3});
    rope.mscale_all_dim = p.number_or("mscale_all_dim", 0.0, {0, 1e3});
    if (p.has("attention_factor"))
      rope.attention_factor = p.number_or("attention_factor", 1.0, {0, 1e3, true});
    else if (mscale != 0 && rope.mscale_all_dim != 0)
      rope.attention_factor = yarn_mscale(rope.factor, mscale) / yarn_mscale(rope.factor, rope.mscale_all_dim);
    else
      rope.attention_factor = yarn_mscale(rope.factor, 1.0);
    // `get(...) or 32`: an absent, null or zero beta takes the default.
    rope.beta_fast = p.number_or("beta_fast", 0.0, {0, 1e4});
    rope.beta_slow = p.number_or("beta_slow", 0.0, {0, 1e4});
    if (rope.beta_fast == 0) rope.beta_fast = 32.0;
    if (rope.beta_slow == 0) rope.beta_slow = 1.0;
    rope.truncate = p.boolean_or("truncate", true);
  } else {
    LT_FAIL(p.where(), ": unsupported rope type '", excerpt(type), "' (supported: default, linear, llama3, yarn)");
  }
  return rope;
}

// transformers' int(head_dim * partial_rotary_factor), the factor in the rope dict or at the top
// level; even and positive. `rotatable`: each head's dims RoPE may rotate (GQA's head_dim, MLA's
// qk_rope_head_dim). A family whose attention rotates whole heads (fallback 1; MLA's among them)
// refuses any other factor: its transformers code would not run it.
int64_t rotary_dim(const JsonFields& j, int64_t rotatable, double fallback, const std::string& architecture) {
  const JsonFields p = rope_dict(j);
  const double partial = p.number_or("partial_rotary_factor", j.number_or("partial_rotary_factor", fallback, kPositive),
                                     {0, 1, true});
  LT_CHECK(fallback != 1.0 || partial == 1.0, j.where(), ": partial_rotary_factor ", partial,
           " is not supported for ", architecture);
  const auto dim = int64_t(double(rotatable) * partial);
  LT_CHECK(dim >= 2 && dim % 2 == 0, j.where(), ": partial_rotary_factor ", partial, " of head_dim ", rotatable,
           " rotates ", dim, " dims; RoPE needs an even number, at least 2");
  return dim;
}

// The routed experts of every MoE layer, in all, within kMaxExpertModules.
void check_expert_modules(const JsonFields& j, const ModelConfig& c) {
  if (!c.moe) return;
  const int64_t moe_layers =
      std::count_if(c.layers.begin(), c.layers.end(), [](const LayerConfig& l) { return l.moe; });
  LT_CHECK(moe_layers * c.moe->num_experts <= kMaxExpertModules, j.where(), ": ", moe_layers, " MoE layers x ",
           c.moe->num_experts, " routed experts = ", moe_layers * c.moe->num_experts,
           " expert modules, more than the ", kMaxExpertModules, " layertap takes (Kimi-K2.5 has 23,040)");
}

// MLA shapes (DeepseekV3Attention). Missing keys take transformers' DeepseekV3Config defaults.
MlaConfig parse_mla(const JsonFields& j, const ModelConfig& c) {
  MlaConfig m;
  // A null q_lora_rank means q_proj reads the hidden state directly.
  m.q_lora_rank = j.raw().contains("q_lora_rank") ? j.integer_or("q_lora_rank", 0, 1, kMaxWidth) : 1536;
  m.kv_lora_rank = j.integer_or("kv_lora_rank", 512, 1, kMaxWidth);
  m.qk_nope_head_dim = j.integer_or("qk_nope_head_dim", 128, 1, kMaxWidth);
  m.qk_rope_head_dim = j.integer_or("qk_rope_head_dim", 64, 2, kMaxWidth);
  m.v_head_dim = j.integer_or("v_head_dim", 128, 1, kMaxWidth);
  m.rope_interleave = j.boolean_or("rope_interleave", true);
  m.bias = j.boolean_or("attention_bias", false);
  LT_CHECK(m.qk_rope_head_dim % 2 == 0, j.where(), ": qk_rope_head_dim ", m.qk_rope_head_dim, " must be even");
  LT_CHECK(c.num_kv_heads == c.num_heads, j.where(), ": MLA needs num_key_value_heads (", c.num_kv_heads,
           ") equal to num_attention_heads (", c.num_heads, ")");
  // yarn_apply_mscale: any non-default rope with mscale_all_dim also scales the softmax.
  m.softmax_scale = std::pow(double(m.qk_head_dim()), -0.5);
  if (c.rope.type != RopeConfig::Type::Default && c.rope.mscale_all_dim != 0) {
    const double mscale = yarn_mscale(c.rope.factor, c.rope.mscale_all_dim);
    m.softmax_scale *= mscale * mscale;
  }
  return m;
}

// transformers' config defaults of a DeepSeek-style MoE, used for keys config.json lacks.
struct DeepseekMoeDefaults {
  int64_t experts, per_token, intermediate, shared, n_group, topk_group, first_dense;
  double scaling;
};
constexpr DeepseekMoeDefaults kDeepseekV3Defaults{256, 8, 2048, 1, 8, 4, 3, 2.5};   // DeepseekV3Config
constexpr DeepseekMoeDefaults kGlm4MoeDefaults{128, 8, 1408, 1, 1, 1, 1, 1.0};      // Glm4MoeConfig

// DeepSeek-V3 MoE (DeepseekV3MoE + DeepseekV3TopkRouter); GLM-4.5's Glm4MoeTopkRouter is the same
// router and block.
void parse_deepseek_moe(const JsonFields& j, ModelConfig& c, const DeepseekMoeDefaults& d) {
  const std::string method = j.string_or("topk_method", "noaux_tc");
  const std::string scoring = j.string_or("scoring_func", "sigmoid");
  LT_CHECK(method == "noaux_tc" && scoring == "sigmoid", j.where(), ": routing topk_method '", excerpt(method),
           "' with scoring_func '", excerpt(scoring),
           "' is not supported (supported: noaux_tc with sigmoid, as DeepSeek-V3, Kimi-K2 and GLM-4.5)");
  MoeConfig m;
  m.routing = MoeConfig::Routing::SigmoidGroupedTopk;
  m.num_experts = j.integer_or("n_routed_experts", d.experts, 1, kMaxExperts);
  m.experts_per_token = j.integer_or("num_experts_per_tok", d.per_token, 1, kMaxExperts);
  m.expert_intermediate_size = j.integer_or("moe_intermediate_size", d.intermediate, 1, kMaxWidth);
  m.num_shared_experts = j.integer_or("n_shared_experts", d.shared, 0, 64);
  m.n_group = j.integer_or("n_group", d.n_group, 1, kMaxExperts);
  m.topk_group = j.integer_or("topk_group", d.topk_group, 1, kMaxExperts);
  m.norm_topk_prob = j.boolean_or("norm_topk_prob", true);
  m.routed_scaling_factor = j.number_or("routed_scaling_factor", d.scaling, {0, 1e6, true});
  m.score_bias = true;
  LT_CHECK(m.num_experts % m.n_group == 0, j.where(), ": n_group ", m.n_group, " does not divide n_routed_experts ",
           m.num_experts);
  LT_CHECK(m.num_experts / m.n_group >= 2, j.where(),
           ": routing sums the top 2 experts of each group, but a group holds ", m.num_experts / m.n_group);
  LT_CHECK(m.topk_group <= m.n_group, j.where(), ": topk_group ", m.topk_group, " must be in 1..n_group (", m.n_group,
           ")");
  LT_CHECK(m.experts_per_token <= m.topk_group * (m.num_experts / m.n_group), j.where(), ": num_experts_per_tok ",
           m.experts_per_token, " exceeds the experts of the topk_group selected groups");
  // The original DeepSeek code makes a layer MoE when i >= first_k_dense_replace and
  // i % moe_layer_freq == 0; transformers reads only the first condition, so the two agree for
  // moe_layer_freq 1, the value every released checkpoint uses.
  const int64_t first_dense = j.integer_or("first_k_dense_replace", d.first_dense, 0, kMaxLayers);
  const int64_t freq = j.integer_or("moe_layer_freq", 1, 1, kMaxLayers);
  for (int64_t i = 0; i < c.num_layers; ++i) c.layers[std::size_t(i)].moe = i >= first_dense && i % freq == 0;
  c.moe = m;
  check_expert_modules(j, c);
}

// Qwen3-MoE (Qwen3MoeSparseMoeBlock): no shared experts; dense layers by decoder_sparse_step and
// mlp_only_layers.
void parse_qwen3_moe(const JsonFields& j, ModelConfig& c) {
  MoeConfig m;
  m.routing = MoeConfig::Routing::SoftmaxTopk;
  // Hub checkpoints say num_experts; transformers 5 writes num_local_experts.
  m.num_experts = j.has("num_experts") ? j.integer("num_experts", 0, kMaxExperts)
                                       : j.integer("num_local_experts", 0, kMaxExperts);
  m.experts_per_token = j.integer("num_experts_per_tok", 1, kMaxExperts);
  m.expert_intermediate_size = j.integer("moe_intermediate_size", 1, kMaxWidth);
  m.norm_topk_prob = j.boolean_or("norm_topk_prob", false);
  LT_CHECK(m.experts_per_token <= m.num_experts || m.num_experts == 0, j.where(), ": num_experts_per_tok ",
           m.experts_per_token, " exceeds num_experts ", m.num_experts);
  const int64_t step = j.integer_or("decoder_sparse_step", 1, 1, kMaxLayers);
  const auto dense_only = j.integers_or_empty("mlp_only_layers", 0, kMaxLayers);
  for (int64_t i = 0; i < c.num_layers; ++i)
    c.layers[std::size_t(i)].moe = std::find(dense_only.begin(), dense_only.end(), i) == dense_only.end() &&
                                   m.num_experts > 0 && (i + 1) % step == 0;
  if (m.num_experts > 0) c.moe = m;
  check_expert_modules(j, c);
}

// Mixtral (MixtralSparseMoeBlock): every layer MoE, experts of intermediate_size, softmax top-k
// renormalised, no shared experts; tensors block_sparse_moe.gate and experts.E.w1/w3/w2.
void parse_mixtral_moe(const JsonFields& j, ModelConfig& c) {
  MoeConfig m;
  m.routing = MoeConfig::Routing::SoftmaxTopk;
  m.num_experts = j.integer_or("num_local_experts", 8, 1, kMaxExperts);
  m.experts_per_token = j.integer_or("num_experts_per_tok", 2, 1, kMaxExperts);
  m.expert_intermediate_size = c.intermediate_size;
  m.norm_topk_prob = true;
  m.names = {.block = "block_sparse_moe.", .gate = "w1", .up = "w3", .down = "w2"};
  LT_CHECK(m.experts_per_token <= m.num_experts, j.where(), ": num_experts_per_tok ", m.experts_per_token,
           " exceeds num_local_experts ", m.num_experts);
  for (LayerConfig& l : c.layers) l.moe = true;
  c.moe = m;
  check_expert_modules(j, c);
}

// layer_types, one entry per layer, each `marked` or "full_attention": whether each layer is
// marked; nullopt when config.json has none.
std::optional<std::vector<bool>> marked_layers(const JsonFields& j, int64_t layers, const char* marked) {
  if (!j.has("layer_types")) return std::nullopt;
  const json& types = j.array("layer_types");
  LT_CHECK(int64_t(types.size()) == layers, j.where(), ": layer_types lists ", types.size(), " layers, ",
           "num_hidden_layers is ", layers);
  std::vector<bool> flags(types.size());
  for (std::size_t i = 0; i < types.size(); ++i) {
    const std::string t = types[i].is_string() ? types[i].get<std::string>() : "";
    LT_CHECK(t == marked || t == "full_attention", j.where(), ": layer_types[", i, "] must be '", marked,
             "' or 'full_attention'");
    flags[i] = t == marked;
  }
  return flags;
}

// Which layers are sliding: layer_types ("sliding_attention" / "full_attention"), else every
// `every`-th layer full (the others sliding).
std::vector<bool> sliding_layers(const JsonFields& j, int64_t layers, int64_t every) {
  if (auto sliding = marked_layers(j, layers, "sliding_attention")) return *sliding;
  std::vector<bool> sliding(static_cast<std::size_t>(layers));
  for (int64_t i = 0; i < layers; ++i) sliding[std::size_t(i)] = (i + 1) % every != 0;
  return sliding;
}

// GPT-OSS (GptOssConfig): every layer MoE, num_local_experts experts of intermediate_size stacked
// in MXFP4, the top-k of the router's logits (it has a bias) softmaxed, expert biases and the
// clamped SwiGLU; attention with sinks and q/k/v/o biases (attention_bias); sliding layers by
// layer_types (default: every other, from the first) with a window of sliding_window.
void parse_gpt_oss(const JsonFields& j, ModelConfig& c) {
  LT_CHECK(j.has("rope_scaling") || j.has("rope_parameters"), j.where(),
           ": GPT-OSS needs its rope settings (rope_scaling or rope_parameters; the published configs give YaRN)");
  MoeConfig m;
  m.routing = MoeConfig::Routing::TopkSoftmax;
  m.num_experts = j.integer_or("num_local_experts", 128, 1, kMaxExperts);
  m.experts_per_token = j.integer_or("num_experts_per_tok", 4, 1, kMaxExperts);
  m.expert_intermediate_size = c.intermediate_size;
  m.router_bias = m.expert_bias = true;
  m.names = {.block = "mlp.", .router = "router", .gate = "gate_up_proj", .up = "", .down = "down_proj",
             .experts = MoeTensorNames::Experts::StackedInterleaved};
  LT_CHECK(m.experts_per_token <= m.num_experts, j.where(), ": num_experts_per_tok ", m.experts_per_token,
           " exceeds num_local_experts ", m.num_experts);
  for (LayerConfig& l : c.layers) l.moe = true;
  c.moe = m;
  check_expert_modules(j, c);
  c.attention_sinks = true;
  c.activation = {GatedActivation::Kind::ClampedSwiglu, float(j.number_or("swiglu_alpha", 1.702, kPositive)),
                  float(j.number_or("swiglu_limit", 7.0, kPositive))};
  const int64_t window = j.integer_or("sliding_window", 128, 1, kMaxPositions);
  const std::vector<bool> sliding = sliding_layers(j, c.num_layers, 2);
  for (int64_t i = 0; i < c.num_layers; ++i) c.layers[std::size_t(i)].window = sliding[std::size_t(i)] ? window : 0;
}

// Llama-4 text (Llama4TextConfig): MoE layers by moe_layers, else every interleave_moe_layer_step-th
// (from step - 1), each routing to num_experts_per_tok of num_local_experts experts of
// intermediate_size (stacked, x @ W) by the sigmoid of their top logits, which scale the experts'
// input, plus one shared expert; dense layers of intermediate_size_mlp. NoPE layers by
// no_rope_layers (1 = RoPE; default every no_rope_layer_interval-th layer NoPE); RoPE on
// interleaved pairs; RoPE layers chunked (attention_chunk_size, by layer_types when given) with
// use_qk_norm's weightless norm; NoPE layers with the attention temperature.
void parse_llama4(const JsonFields& j, ModelConfig& c) {
  const int64_t L = c.num_layers;
  MoeConfig m;
  m.routing = MoeConfig::Routing::TopkSigmoid;
  m.weight_input = true;
  m.num_experts = j.integer_or("num_local_experts", 16, 1, kMaxExperts);
  m.experts_per_token = j.integer_or("num_experts_per_tok", 1, 1, kMaxExperts);
  m.expert_intermediate_size = c.intermediate_size;
  m.num_shared_experts = 1;
  m.names = {.block = "feed_forward.", .router = "router", .gate = "gate_up_proj", .up = "", .down = "down_proj",
             .shared = "shared_expert.", .experts = MoeTensorNames::Experts::StackedTransposed};
  LT_CHECK(m.experts_per_token <= m.num_experts, j.where(), ": num_experts_per_tok ", m.experts_per_token,
           " exceeds num_local_experts ", m.num_experts);
  c.intermediate_size = j.integer_or("intermediate_size_mlp", 16384, 1, kMaxWidth);
  c.ffn_block = "feed_forward.";
  if (j.has("moe_layers")) {
    for (const int64_t i : j.integers_or_empty("moe_layers", 0, kMaxLayers)) {
      LT_CHECK(i < L, j.where(), ": moe_layers names layer ", i, " of ", L);
      c.layers[std::size_t(i)].moe = true;
    }
  } else {
    const int64_t step = j.integer_or("interleave_moe_layer_step", 1, 1, kMaxLayers);
    for (int64_t i = step - 1; i < L; i += step) c.layers[std::size_t(i)].moe = true;
  }
  c.moe = m;
  check_expert_modules(j, c);

  c.rope_interleave = true;
  c.qk_l2_norm = j.boolean_or("use_qk_norm", true);
  const auto nope = j.integers_or_empty("no_rope_layers", 0, 1);
  if (!nope.empty()) {
    LT_CHECK(int64_t(nope.size()) == L, j.where(), ": no_rope_layers lists ", nope.size(), " layers, ",
             "num_hidden_layers is ", L);
    for (int64_t i = 0; i < L; ++i)
      if (nope[std::size_t(i)] != 1) c.layers[std::size_t(i)].rope.reset();
  } else {
    const int64_t interval = j.integer_or("no_rope_layer_interval", 4, 1, kMaxLayers);
    for (int64_t i = 0; i < L; ++i)
      if ((i + 1) % interval == 0) c.layers[std::size_t(i)].rope.reset();
  }
  // Scout's config.json writes attn_temperature_tuning as a number (4): transformers reads it as truthy.
  const json* tuning = j.raw().contains("attn_temperature_tuning") ? &j.raw()["attn_temperature_tuning"] : nullptr;
  const bool temperature = tuning == nullptr || tuning->is_null()
                               ? true
                               : tuning->is_number() ? tuning->get<double>() != 0 : j.boolean_or("attn_temperature_tuning", true);
  c.nope_temperature = {temperature,
                        j.number_or("floor_scale", 8192, kPositive), j.number_or("attn_scale", 0.1, {0, 1e6})};
  // A null attention_chunk_size turns chunking off; layer_types, when given, says which layers chunk.
  const int64_t chunk = j.raw().contains("attention_chunk_size") && j.raw()["attention_chunk_size"].is_null()
                            ? 0
                            : j.integer_or("attention_chunk_size", 8192, 1, kMaxPositions);
  if (const auto chunked = marked_layers(j, L, "chunked_attention")) {
    for (std::size_t i = 0; i < chunked->size(); ++i) {
      LT_CHECK(!(*chunked)[i] || chunk > 0, j.where(), ": layer_types[", i, "] is chunked but "
               "attention_chunk_size is null");
      c.layers[i].chunk = (*chunked)[i] ? chunk : 0;
    }
  } else {
    for (LayerConfig& l : c.layers) l.chunk = l.rope ? chunk : 0;
  }
}

// Gemma-3 text (Gemma3TextConfig): layer_types (else every sliding_window_pattern-th layer full)
// with a window of sliding_window; full layers take rope_theta with rope_scaling, sliding ones the
// default rope at rope_local_base_freq (or each layer type's dict under rope_parameters).
void parse_gemma3(const JsonFields& j, ModelConfig& c) {
  const std::string act = j.string_or("hidden_activation", "gelu_pytorch_tanh");
  LT_CHECK(act == "gelu_pytorch_tanh", j.where(), ": hidden_activation '", excerpt(act),
           "' is not supported (only gelu_pytorch_tanh)");
  LT_CHECK(!j.has("attn_logit_softcapping"), j.where(), ": attn_logit_softcapping is not supported");
  LT_CHECK(!j.boolean_or("use_bidirectional_attention", false), j.where(),
           ": use_bidirectional_attention is not supported (layertap runs causal decoders)");
  c.activation.kind = GatedActivation::Kind::GeluTanh;
  c.norm_weight_offset = 1;
  c.sandwich_norms = true;
  c.embed_scale = float(std::sqrt(double(c.hidden_size)));  // a float32 buffer in transformers
  c.query_pre_attn_scalar = j.number_or("query_pre_attn_scalar", 256, kPositive);
  const int64_t window = j.integer_or("sliding_window", 4096, 1, kMaxPositions);
  const std::vector<bool> sliding =
      sliding_layers(j, c.num_layers, j.integer_or("sliding_window_pattern", 6, 1, kMaxLayers));
  RopeConfig global, local;
  const json* per_type = j.raw().contains("rope_parameters") && j.raw()["rope_parameters"].is_object() &&
                                 j.raw()["rope_parameters"].contains("full_attention")
                             ? &j.raw()["rope_parameters"]
                             : nullptr;
  if (per_type != nullptr) {  // transformers 5's spelling: a rope dict per layer type
    for (const char* type : {"full_attention", "sliding_attention"}) {
      const JsonFields sub = JsonFields(*per_type, j.where() + " (rope_parameters)").object(type);
      LT_CHECK(sub.has("rope_theta"), sub.where(), ": lacks 'rope_theta'");
      (std::string(type) == "full_attention" ? global : local) = parse_rope(sub, c.max_position_embeddings);
    }
  } else {  // the Hub's: rope_theta (1e6) + rope_scaling for full layers, rope_local_base_freq (1e4)
    global = parse_rope(j, c.max_position_embeddings, 1e6);
    local.theta = j.number_or("rope_local_base_freq", 10000.0, {0, 1e12, true});
  }
  c.rope = global;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    c.layers[std::size_t(i)].window = sliding[std::size_t(i)] ? window : 0;
    c.layers[std::size_t(i)].rope = sliding[std::size_t(i)] ? local : global;
  }
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
  // Real configs nest 5 levels (quantization_config groups).
  json top = parse_json(json_text, src, 32);
  LT_CHECK(top.is_object(), src, ": expected a JSON object");
  const Family& family = find_family(top, src);
  ModelConfig c;
  c.architecture = family.architecture;
  // A multimodal wrapper (Kimi-K2.5, Llama-4, Gemma-3): the text model's config under
  // text_config, its tensors under language_model.
  if (family.text_config) {
    LT_CHECK(top.contains("text_config") && top["text_config"].is_object(), src, ": ", c.architecture,
             " needs a 'text_config' object");
    c.tensor_prefix = "language_model.model.";
  }
  const JsonFields j(family.text_config ? top["text_config"] : top,
                     family.text_config ? src + " (text_config)" : src);
  const JsonFields outer(top, src);

  const TextDefaults* d = family.defaults;
  // A size key: required, or the family's default when its configs may leave it out.
  const auto size = [&](const char* key, int64_t TextDefaults::*fallback, int64_t hi) {
    return d != nullptr ? j.integer_or(key, d->*fallback, 1, hi) : j.integer(key, 1, hi);
  };
  c.hidden_size = size("hidden_size", &TextDefaults::hidden_size, kMaxWidth);
  c.intermediate_size = size("intermediate_size", &TextDefaults::intermediate_size, kMaxWidth);
  c.num_layers = size("num_hidden_layers", &TextDefaults::num_hidden_layers, kMaxLayers);
  c.num_heads = size("num_attention_heads", &TextDefaults::num_attention_heads, kMaxHeads);
  c.num_kv_heads =
      j.integer_or("num_key_value_heads", d != nullptr ? d->num_key_value_heads : c.num_heads, 1, kMaxHeads);
  c.vocab_size = size("vocab_size", &TextDefaults::vocab_size, kMaxVocab);
  c.max_position_embeddings =
      j.integer_or("max_position_embeddings", d != nullptr ? d->max_position_embeddings : 0, 0, kMaxPositions);
  LT_CHECK(c.num_heads % c.num_kv_heads == 0, j.where(), ": num_attention_heads ", c.num_heads,
           " is not a multiple of num_key_value_heads ", c.num_kv_heads);
  // rms_norm_eps is held in float: 1e300 would become infinity and every norm a no-op.
  c.rms_norm_eps = j.number_or("rms_norm_eps", 1e-6, {0, 0.1, true});
  c.rope = parse_rope(j, c.max_position_embeddings);
  c.tie_word_embeddings = j.boolean_or("tie_word_embeddings", d != nullptr && d->tie_word_embeddings);
  if (!family.gemma3) {
    const std::string act = j.string_or("hidden_act", "silu");
    LT_CHECK(act == "silu", j.where(), ": hidden_act '", excerpt(act), "' is not supported (only silu)");
  }

  if (family.attention == Attention::Mla) {
    // head_dim stays 0: it is GQA's (config.json's head_dim, transformers' rope dim, is not read).
    c.mla = parse_mla(j, c);
  } else {
    if (j.has("head_dim") || d != nullptr) {
      c.head_dim =
          d != nullptr ? j.integer_or("head_dim", d->head_dim, 2, kMaxWidth) : j.integer("head_dim", 2, kMaxWidth);
    } else {
      LT_CHECK(c.hidden_size % c.num_heads == 0, j.where(), ": hidden_size ", c.hidden_size,
               " is not divisible by num_attention_heads ", c.num_heads, " and head_dim is not given");
      c.head_dim = c.hidden_size / c.num_heads;
    }
    LT_CHECK(c.head_dim % 2 == 0, j.where(), ": head_dim ", c.head_dim, " must be even");
    const bool attention_bias = j.boolean_or("attention_bias", false);
    c.qkv_bias = attention_bias || family.bias == Bias::QkvAlways;
    c.o_bias = attention_bias && family.bias == Bias::QkvO;
    c.mlp_bias = j.boolean_or("mlp_bias", false);
    c.qk_norm = family.qk_norm == QkNorm::Always ||
                (family.qk_norm == QkNorm::WhenUseQkNorm && j.boolean_or("use_qk_norm", false));
  }
  c.rotary_dim = rotary_dim(j, c.mla ? c.mla->qk_rope_head_dim : c.head_dim, family.partial_rotary_default,
                            c.architecture);
  // Every layer the model's RoPE, no window or chunk, dense until the family's parse says otherwise.
  c.layers.assign(std::size_t(c.num_layers), LayerConfig{.rope = c.rope});
  switch (family.ffn) {
    case Ffn::Dense: break;
    case Ffn::Qwen3Moe: parse_qwen3_moe(j, c); break;
    case Ffn::MixtralMoe: parse_mixtral_moe(j, c); break;
    case Ffn::DeepseekMoe: parse_deepseek_moe(j, c, kDeepseekV3Defaults); break;
    case Ffn::Glm4Moe: parse_deepseek_moe(j, c, kGlm4MoeDefaults); break;
    case Ffn::GptOssMoe: break;  // parse_gpt_oss, with the layers' windows
    case Ffn::Llama4Moe: break;  // parse_llama4, with the layers' attention
  }

  if (family.ffn == Ffn::GptOssMoe) {
    parse_gpt_oss(j, c);
  } else if (family.ffn == Ffn::Llama4Moe) {
    parse_llama4(j, c);
  } else if (family.gemma3) {
    parse_gemma3(j, c);
  } else if (family.mistral_window) {
    const int64_t window = j.integer_or("sliding_window", 0, 0, kMaxPositions);
    for (LayerConfig& l : c.layers) l.window = window;
  } else {
    LT_CHECK(!j.boolean_or("use_sliding_window", false), j.where(),
             ": use_sliding_window=true is not supported for ", c.architecture);
  }
  // torch_dtype (or transformers 5's dtype) in the text model's config, else at the top level.
  for (const JsonFields* cfg : {&j, &outer}) {
    const char* key = cfg->has("torch_dtype") ? "torch_dtype" : cfg->has("dtype") ? "dtype" : nullptr;
    if (!key) continue;
    const std::string name = cfg->string_or(key, "");
    try {
      c.torch_dtype = parse_dtype(name);
    } catch (const Error& e) {
      LT_FAIL(cfg->where(), ": key '", key, "': ", e.what());
    }
    break;
  }
  // quantization_config at the top level, or inside text_config.
  for (const JsonFields* cfg : {&outer, &j}) {
    if (cfg->has("quantization_config")) {
      c.quant = parse_quant_config(cfg->raw().at("quantization_config"), src);
      break;
    }
  }
  if (family.media_token_key != nullptr)
    c.media_placeholder_token_id = outer.integer_or(
        family.media_token_key, j.integer_or(family.media_token_key, -1, -1, kMaxVocab - 1), -1, kMaxVocab - 1);
  return c;
}

float ModelConfig::attention_scale() const {
  return query_pre_attn_scalar > 0 ? float(std::pow(query_pre_attn_scalar, -0.5)) : 1.0f / std::sqrt(float(head_dim));
}

ModelConfig load_model_config(const std::string& path) {
  return parse_model_config(read_regular_file(path, "model config"), path);
}

}  // namespace layertap
