// Config parsing: the dense families (llama3 rope, rope_parameters spelling, per-family biases and
// windows) and the MoE/MLA fixtures (DeepSeek-V3, Kimi-K2, Kimi-K2.5, Qwen3-MoE): MLA shapes, YaRN
// numbers, MoE layer selection, tensor prefix, quantization; errors name what is refused.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "core/error.hpp"
#include "model/hf_config.hpp"
#include "error_text.hpp"

namespace layertap {
namespace {

using test::has;

const char* kLlama = R"({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 72, "intermediate_size": 100,
  "num_hidden_layers": 4, "num_attention_heads": 6, "num_key_value_heads": 2, "vocab_size": 160,
  "rms_norm_eps": 1e-5, "rope_theta": 500000.0, "hidden_act": "silu", "torch_dtype": "bfloat16",
  "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                   "high_freq_factor": 4.0, "original_max_position_embeddings": 32}})";

std::string error_of(const std::string& json) {
  try {
    parse_model_config(json, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// `json` with the first occurrence of `from` replaced by `to`; a `from` that is absent is a test bug.
std::string with(std::string json, const std::string& from, const std::string& to) {
  const std::size_t at = json.find(from);
  if (at == std::string::npos) throw std::runtime_error("test bug: '" + from + "' is not in the JSON text");
  json.replace(at, from.size(), to);
  return json;
}

std::string fixture_config(const std::string& model) {
  const std::string path = std::string(LAYERTAP_FIXTURES) + "/models/" + model + "/config.json";
  std::ifstream in(path);
  if (!in) throw std::runtime_error("cannot open " + path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

ModelConfig fixture(const std::string& model) { return parse_model_config(fixture_config(model), model); }

// One field of every layer, to compare with a list.
std::vector<int64_t> windows(const ModelConfig& c) {
  std::vector<int64_t> v;
  for (const LayerConfig& l : c.layers) v.push_back(l.window);
  return v;
}
std::vector<int64_t> chunks(const ModelConfig& c) {
  std::vector<int64_t> v;
  for (const LayerConfig& l : c.layers) v.push_back(l.chunk);
  return v;
}
std::vector<bool> rope_layers(const ModelConfig& c) {  // false: NoPE
  std::vector<bool> v;
  for (const LayerConfig& l : c.layers) v.push_back(l.rope.has_value());
  return v;
}
std::vector<bool> moe_layers(const ModelConfig& c) {
  std::vector<bool> v;
  for (const LayerConfig& l : c.layers) v.push_back(l.moe);
  return v;
}

// transformers' yarn_get_mscale.
double mscale(double factor, double m) { return 0.1 * m * std::log(factor) + 1.0; }

// The fields the MoE/MLA families fill, compared one by one (failures name the field).
void expect_same_moe_mla(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(a.architecture, b.architecture);
  EXPECT_EQ(a.hidden_size, b.hidden_size);
  EXPECT_EQ(a.head_dim, b.head_dim);
  EXPECT_EQ(a.num_heads, b.num_heads);
  EXPECT_EQ(a.rms_norm_eps, b.rms_norm_eps);
  EXPECT_EQ(a.rope.type, b.rope.type);
  EXPECT_EQ(a.rope.theta, b.rope.theta);
  EXPECT_EQ(a.rope.factor, b.rope.factor);
  EXPECT_EQ(a.rope.attention_factor, b.rope.attention_factor);
  EXPECT_EQ(a.rope.beta_fast, b.rope.beta_fast);
  EXPECT_EQ(a.rope.beta_slow, b.rope.beta_slow);
  ASSERT_EQ(a.mla.has_value(), b.mla.has_value());
  if (a.mla) {
    EXPECT_EQ(a.mla->q_lora_rank, b.mla->q_lora_rank);
    EXPECT_EQ(a.mla->kv_lora_rank, b.mla->kv_lora_rank);
    EXPECT_EQ(a.mla->qk_head_dim(), b.mla->qk_head_dim());
    EXPECT_EQ(a.mla->v_head_dim, b.mla->v_head_dim);
    EXPECT_EQ(a.mla->rope_interleave, b.mla->rope_interleave);
    EXPECT_EQ(a.mla->softmax_scale, b.mla->softmax_scale);
  }
  ASSERT_EQ(a.moe.has_value(), b.moe.has_value());
  if (a.moe) {
    EXPECT_EQ(a.moe->routing, b.moe->routing);
    EXPECT_EQ(a.moe->num_experts, b.moe->num_experts);
    EXPECT_EQ(a.moe->experts_per_token, b.moe->experts_per_token);
    EXPECT_EQ(a.moe->expert_intermediate_size, b.moe->expert_intermediate_size);
    EXPECT_EQ(a.moe->num_shared_experts, b.moe->num_shared_experts);
    EXPECT_EQ(a.moe->n_group, b.moe->n_group);
    EXPECT_EQ(a.moe->topk_group, b.moe->topk_group);
    EXPECT_EQ(a.moe->norm_topk_prob, b.moe->norm_topk_prob);
    EXPECT_EQ(a.moe->routed_scaling_factor, b.moe->routed_scaling_factor);
    EXPECT_EQ(a.moe->score_bias, b.moe->score_bias);
  }
  EXPECT_EQ(moe_layers(a), moe_layers(b));
  EXPECT_EQ(a.tensor_prefix, b.tensor_prefix);
  EXPECT_EQ(a.quant.method, b.quant.method);
}

}  // namespace

TEST(HfConfig, ParsesClassicLlamaWithLlama3Rope) {
  const ModelConfig c = parse_model_config(kLlama, "config.json");
  EXPECT_EQ(c.head_dim, 12);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.rope.type, RopeConfig::Type::Llama3);
  EXPECT_EQ(c.rope.theta, 500000.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 32);
  EXPECT_EQ(c.torch_dtype, DType::BF16);
  EXPECT_FALSE(c.qkv_bias);
  EXPECT_EQ(windows(c), std::vector<int64_t>(4, 0));
}

TEST(HfConfig, ParsesRopeParametersSpelling) {
  const std::string j = with(with(kLlama, R"("rope_scaling")", R"("rope_parameters")"),
                             R"("factor")", R"("rope_theta": 1000.0, "factor")");
  const ModelConfig c = parse_model_config(j, "config.json");
  EXPECT_EQ(c.rope.theta, 1000.0);
  EXPECT_EQ(c.rope.type, RopeConfig::Type::Llama3);
}

TEST(HfConfig, FamiliesSetBiasesNormsAndWindows) {
  const ModelConfig qwen2 = parse_model_config(with(kLlama, "LlamaForCausalLM", "Qwen2ForCausalLM"), "c");
  EXPECT_TRUE(qwen2.qkv_bias);
  EXPECT_FALSE(qwen2.o_bias);
  const ModelConfig qwen3 = parse_model_config(
      with(with(kLlama, "LlamaForCausalLM", "Qwen3ForCausalLM"), R"("hidden_act")", R"("head_dim": 16, "hidden_act")"), "c");
  EXPECT_TRUE(qwen3.qk_norm);
  EXPECT_EQ(qwen3.head_dim, 16);
  const ModelConfig mistral = parse_model_config(
      with(with(kLlama, "LlamaForCausalLM", "MistralForCausalLM"), R"("hidden_act")", R"("sliding_window": 8, "hidden_act")"), "c");
  EXPECT_EQ(windows(mistral), std::vector<int64_t>(4, 8));
}

// Gemma-3 (the fixture): sliding layers by layer_types with the local rope, the full layer with the
// model's (rope_theta and rope_scaling).
TEST(HfConfig, Gemma3LayersTakeTheirWindowAndRope) {
  const ModelConfig c = fixture("gemma3");
  EXPECT_EQ(windows(c), (std::vector<int64_t>{8, 8, 8, 8, 8, 0}));
  EXPECT_EQ(rope_layers(c), std::vector<bool>(6, true));
  EXPECT_EQ(c.rope.type, RopeConfig::Type::Linear);
  EXPECT_EQ(c.rope.theta, 1e6);
  for (std::size_t i = 0; i < c.layers.size(); ++i) {
    const RopeConfig& r = c.layers[i].rope.value();
    EXPECT_EQ(r.type, i == 5 ? RopeConfig::Type::Linear : RopeConfig::Type::Default) << "layer " << i;
    EXPECT_EQ(r.theta, i == 5 ? 1e6 : 1e4) << "layer " << i;
    EXPECT_EQ(r.factor, i == 5 ? 8.0 : 1.0) << "layer " << i;
  }
}


// Gemma-3's multimodal checkpoints (4B, 12B, 27B) as published: the text model under text_config,
// which names only what differs from Gemma3TextConfig's defaults (heads, kv heads, head_dim,
// vocab, query_pre_attn_scalar, the local rope and the layer pattern come from them).
TEST(HfConfig, Gemma3WrapperTakesGemma3TextConfigDefaults) {
  const std::string gemma_4b = R"({"architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
      "eoi_token_index": 256000, "eos_token_id": [1, 106], "image_token_index": 262144, "mm_tokens_per_image": 256,
      "model_type": "gemma3", "text_config": {"hidden_size": 2560, "intermediate_size": 10240,
        "model_type": "gemma3_text", "num_hidden_layers": 34, "rope_scaling": {"factor": 8.0, "rope_type": "linear"},
        "sliding_window": 1024},
      "torch_dtype": "bfloat16", "vision_config": {"hidden_size": 1152, "image_size": 896, "intermediate_size": 4304,
        "model_type": "siglip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 27, "patch_size": 14}})";
  const ModelConfig c = parse_model_config(gemma_4b, "c");
  EXPECT_EQ(c.tensor_prefix, "language_model.model.");
  EXPECT_EQ(c.media_placeholder_token_id, 262144);
  EXPECT_EQ(c.hidden_size, 2560);
  EXPECT_EQ(c.num_layers, 34);
  EXPECT_EQ(c.num_heads, 8);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.head_dim, 256);
  EXPECT_EQ(c.vocab_size, 262208);
  EXPECT_EQ(c.query_pre_attn_scalar, 256);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_EQ(c.torch_dtype, DType::BF16);
  EXPECT_EQ(c.norm_weight_offset, 1.0f);
  EXPECT_TRUE(c.sandwich_norms);
  std::vector<int64_t> pattern;  // five sliding layers, then a full one
  for (int64_t i = 0; i < 34; ++i) pattern.push_back((i + 1) % 6 == 0 ? 0 : 1024);
  EXPECT_EQ(windows(c), pattern);
  EXPECT_EQ(c.layers[5].rope->type, RopeConfig::Type::Linear);
  EXPECT_EQ(c.layers[5].rope->theta, 1e6);
  EXPECT_EQ(c.layers[0].rope->type, RopeConfig::Type::Default);
  EXPECT_EQ(c.layers[0].rope->theta, 1e4);
  // 27B: its own head_dim and query_pre_attn_scalar.
  const ModelConfig big = parse_model_config(
      with(with(gemma_4b, R"("hidden_size": 2560, "intermediate_size": 10240)",
                R"("hidden_size": 5376, "intermediate_size": 21504, "head_dim": 128, "query_pre_attn_scalar": 168,
                   "num_attention_heads": 32, "num_key_value_heads": 16)"),
           R"("num_hidden_layers": 34)", R"("num_hidden_layers": 62)"),
      "c");
  EXPECT_EQ(big.head_dim, 128);
  EXPECT_EQ(big.num_heads, 32);
  EXPECT_EQ(big.num_kv_heads, 16);
  EXPECT_FLOAT_EQ(big.attention_scale(), float(std::pow(168.0, -0.5)));
  // The wrapper without its text model is refused.
  EXPECT_TRUE(has(error_of(R"({"architectures": ["Gemma3ForConditionalGeneration"]})"), "needs a 'text_config'"));
}
// Mixtral: every layer MoE, experts of intermediate_size, softmax top-k renormalised, the window
// on every layer, tensors under block_sparse_moe with w1/w3/w2.
TEST(HfConfigMoe, MixtralIsARowOfParameters) {
  const std::string mixtral = with(with(kLlama, "LlamaForCausalLM", "MixtralForCausalLM"), R"("hidden_act")",
                                   R"("num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": 16, "hidden_act")");
  const ModelConfig c = parse_model_config(mixtral, "c");
  ASSERT_TRUE(c.moe.has_value());
  EXPECT_EQ(moe_layers(c), std::vector<bool>(4, true));
  EXPECT_EQ(c.moe->routing, MoeConfig::Routing::SoftmaxTopk);
  EXPECT_TRUE(c.moe->norm_topk_prob);
  EXPECT_EQ(c.moe->num_experts, 8);
  EXPECT_EQ(c.moe->experts_per_token, 2);
  EXPECT_EQ(c.moe->expert_intermediate_size, 100);
  EXPECT_EQ(c.moe->num_shared_experts, 0);
  EXPECT_EQ(c.moe->names.block, "block_sparse_moe.");
  EXPECT_EQ(c.moe->names.gate + c.moe->names.up + c.moe->names.down, "w1w3w2");
  EXPECT_EQ(windows(c), std::vector<int64_t>(4, 16));
  EXPECT_EQ(c.rotary_dim, c.head_dim);
  EXPECT_TRUE(has(error_of(with(mixtral, R"("num_experts_per_tok": 2)", R"("num_experts_per_tok": 9)")),
                  "num_experts_per_tok 9 exceeds num_local_experts 8"));
}

// GLM-4.5: partial rotary (0.5 by default), q/k/v biases without o, q/k norm by use_qk_norm, the
// DeepSeek router with GLM's defaults.
TEST(HfConfigMoe, Glm4MoeIsARowOfParameters) {
  const std::string glm = with(with(kLlama, "LlamaForCausalLM", "Glm4MoeForCausalLM"), R"("hidden_act")",
                               R"("head_dim": 16, "attention_bias": true, "use_qk_norm": true, "n_routed_experts": 16,
                                  "moe_intermediate_size": 32, "num_experts_per_tok": 4, "n_group": 4, "topk_group": 2,
                                  "first_k_dense_replace": 1, "num_nextn_predict_layers": 1, "hidden_act")");
  const ModelConfig c = parse_model_config(glm, "c");
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rotary_dim, 8);  // Glm4MoeConfig's default partial_rotary_factor 0.5
  EXPECT_TRUE(c.qkv_bias);
  EXPECT_FALSE(c.o_bias);
  EXPECT_TRUE(c.qk_norm);
  ASSERT_TRUE(c.moe.has_value());
  EXPECT_EQ(c.moe->routing, MoeConfig::Routing::SigmoidGroupedTopk);
  EXPECT_TRUE(c.moe->score_bias);
  EXPECT_EQ(c.moe->num_shared_experts, 1);          // GLM's default
  EXPECT_DOUBLE_EQ(c.moe->routed_scaling_factor, 1.0);  // GLM's default, not DeepSeek's 2.5
  EXPECT_EQ(moe_layers(c), (std::vector<bool>{false, true, true, true}));
  EXPECT_EQ(c.moe->names.block, "mlp.");
  EXPECT_EQ(parse_model_config(with(glm, R"("head_dim": 16,)", R"("head_dim": 16, "partial_rotary_factor": 0.25,)"), "c")
                .rotary_dim, 4);
  EXPECT_EQ(parse_model_config(with(glm, R"("head_dim": 16,)", R"("head_dim": 16, "partial_rotary_factor": 1.0,)"), "c")
                .rotary_dim, 16);
  EXPECT_FALSE(parse_model_config(with(glm, R"("use_qk_norm": true)", R"("use_qk_norm": false)"), "c").qk_norm);
  EXPECT_TRUE(has(error_of(with(glm, R"("head_dim": 16,)", R"("head_dim": 16, "partial_rotary_factor": 0.0625,)")),
                  "rotates 1 dims"));
  // A family whose attention rotates whole heads refuses a partial factor.
  EXPECT_TRUE(has(error_of(with(kLlama, R"("hidden_act")", R"("partial_rotary_factor": 0.5, "hidden_act")")),
                  "partial_rotary_factor 0.5 is not supported for LlamaForCausalLM"));
}

// GPT-OSS: every layer MoE with stacked experts of intermediate_size, the top-k of the logits
// softmaxed (router bias), expert biases, the clamped SwiGLU, sinks, q/k/v/o biases, sliding and
// full layers (every other by default, from the first), the rope settings required.
TEST(HfConfigMoe, GptOssIsARowOfParameters) {
  const std::string gpt_oss = R"({
    "architectures": ["GptOssForCausalLM"], "hidden_size": 64, "intermediate_size": 128, "head_dim": 16,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 160,
    "num_local_experts": 8, "num_experts_per_tok": 2, "sliding_window": 8, "attention_bias": true,
    "swiglu_limit": 1.0, "hidden_act": "silu", "rope_theta": 150000.0,
    "rope_scaling": {"rope_type": "yarn", "factor": 8.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": false,
                     "original_max_position_embeddings": 64},
    "quantization_config": {"quant_method": "mxfp4", "modules_to_not_convert": ["model.layers.*.self_attn"]}})";
  const ModelConfig c = parse_model_config(gpt_oss, "c");
  ASSERT_TRUE(c.moe.has_value());
  EXPECT_EQ(moe_layers(c), std::vector<bool>(4, true));
  EXPECT_EQ(c.moe->routing, MoeConfig::Routing::TopkSoftmax);
  EXPECT_EQ(c.moe->num_experts, 8);
  EXPECT_EQ(c.moe->experts_per_token, 2);
  EXPECT_EQ(c.moe->expert_intermediate_size, 128);
  EXPECT_TRUE(c.moe->router_bias && c.moe->expert_bias);
  EXPECT_EQ(c.moe->names.experts, MoeTensorNames::Experts::StackedInterleaved);
  EXPECT_EQ(c.moe->names.router, "router");
  EXPECT_TRUE(c.attention_sinks);
  EXPECT_TRUE(c.qkv_bias && c.o_bias);
  EXPECT_EQ(c.activation.kind, GatedActivation::Kind::ClampedSwiglu);
  EXPECT_FLOAT_EQ(c.activation.alpha, 1.702f);  // transformers' default
  EXPECT_FLOAT_EQ(c.activation.limit, 1.0f);
  EXPECT_EQ(windows(c), (std::vector<int64_t>{8, 0, 8, 0}));
  EXPECT_EQ(c.rope.type, RopeConfig::Type::Yarn);
  EXPECT_FALSE(c.rope.truncate);
  EXPECT_EQ(c.quant.method, QuantConfig::Method::Mxfp4);
  EXPECT_EQ(windows(parse_model_config(with(gpt_oss, R"("sliding_window": 8,)",
                                            R"("sliding_window": 8, "layer_types": ["full_attention",
                                               "sliding_attention", "sliding_attention", "full_attention"],)"), "c")),
            (std::vector<int64_t>{0, 8, 8, 0}));
  EXPECT_TRUE(has(error_of(with(gpt_oss, R"("rope_scaling")", R"("no_rope_scaling")")), "GPT-OSS needs its rope"));
  EXPECT_TRUE(has(error_of(with(gpt_oss, R"("num_experts_per_tok": 2)", R"("num_experts_per_tok": 9)")),
                  "num_experts_per_tok 9 exceeds num_local_experts 8"));
}

// Llama-4 text: MoE layers by interleave_moe_layer_step (from step - 1), top-1 sigmoid routing
// weighting the experts' input, one shared expert, dense layers of intermediate_size_mlp; NoPE
// layers by no_rope_layers with the temperature; chunked attention on the RoPE layers; the
// weightless q/k norm; interleaved RoPE pairs; tensors under feed_forward.
TEST(HfConfigMoe, Llama4IsARowOfParameters) {
  const std::string text = R"({
    "hidden_size": 64, "intermediate_size": 32, "intermediate_size_mlp": 96, "head_dim": 16,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 160,
    "num_local_experts": 8, "num_experts_per_tok": 1, "interleave_moe_layer_step": 2,
    "no_rope_layers": [1, 0, 1, 0], "attention_chunk_size": 8, "floor_scale": 4, "attn_scale": 0.1,
    "attn_temperature_tuning": true, "use_qk_norm": true, "hidden_act": "silu", "rope_theta": 500000.0,
    "rope_scaling": {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0,
                     "original_max_position_embeddings": 8192}})";
  const std::string causal = with(text, "{", R"({"architectures": ["Llama4ForCausalLM"], )");
  const ModelConfig c = parse_model_config(causal, "c");
  ASSERT_TRUE(c.moe.has_value());
  EXPECT_EQ(moe_layers(c), (std::vector<bool>{false, true, false, true}));
  EXPECT_EQ(c.moe->routing, MoeConfig::Routing::TopkSigmoid);
  EXPECT_TRUE(c.moe->weight_input);
  EXPECT_EQ(c.moe->expert_intermediate_size, 32);
  EXPECT_EQ(c.intermediate_size, 96);  // the dense layers'
  EXPECT_EQ(c.moe->num_shared_experts, 1);
  EXPECT_EQ(c.moe->names.block + c.moe->names.router + " " + c.moe->names.shared, "feed_forward.router shared_expert.");
  EXPECT_EQ(c.moe->names.experts, MoeTensorNames::Experts::StackedTransposed);
  EXPECT_EQ(c.ffn_block, "feed_forward.");
  EXPECT_EQ(rope_layers(c), (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(chunks(c), (std::vector<int64_t>{8, 0, 8, 0}));
  EXPECT_TRUE(c.nope_temperature.on);
  EXPECT_DOUBLE_EQ(c.nope_temperature.floor_scale, 4);
  EXPECT_TRUE(c.qk_l2_norm && c.rope_interleave);
  EXPECT_FALSE(c.qk_norm);
  EXPECT_EQ(c.rope.type, RopeConfig::Type::Llama3);  // equal low and high factors (Scout) accepted
  EXPECT_EQ(c.tensor_prefix, "model.");
  // Defaults: every layer MoE (step 1), every 4th layer NoPE; Scout's numeric attn_temperature_tuning.
  const ModelConfig d = parse_model_config(
      with(with(with(causal, R"("interleave_moe_layer_step": 2,)", ""), R"("no_rope_layers": [1, 0, 1, 0],)", ""),
           R"("attn_temperature_tuning": true)", R"("attn_temperature_tuning": 4)"), "c");
  EXPECT_EQ(moe_layers(d), std::vector<bool>(4, true));
  EXPECT_EQ(rope_layers(d), (std::vector<bool>{true, true, true, false}));
  EXPECT_EQ(chunks(d), (std::vector<int64_t>{8, 8, 8, 0}));
  EXPECT_TRUE(d.nope_temperature.on);
  EXPECT_EQ(chunks(parse_model_config(with(causal, R"("attention_chunk_size": 8)", R"("attention_chunk_size": null)"),
                                      "c")),
            std::vector<int64_t>(4, 0));
  // The multimodal checkpoint: the text model under text_config and language_model.model.
  const std::string wrapper = R"({"architectures": ["Llama4ForConditionalGeneration"], "image_token_index": 200,
                                  "text_config": )" + text + "}";
  const ModelConfig w = parse_model_config(wrapper, "c");
  EXPECT_EQ(w.tensor_prefix, "language_model.model.");
  EXPECT_EQ(w.media_placeholder_token_id, 200);
  EXPECT_EQ(moe_layers(w), moe_layers(c));
  EXPECT_TRUE(has(error_of(with(causal, R"("no_rope_layers": [1, 0, 1, 0])", R"("no_rope_layers": [1, 0])")),
                  "no_rope_layers lists 2 layers"));
}

TEST(HfConfig, ErrorsNameTheProblem) {
  EXPECT_NE(error_of(with(kLlama, "LlamaForCausalLM", "GPT2LMHeadModel")).find("unsupported architecture 'GPT2LMHeadModel'"),
            std::string::npos);
  EXPECT_NE(error_of(with(kLlama, R"("vocab_size": 160,)", "")).find("missing key 'vocab_size'"), std::string::npos);
  EXPECT_NE(error_of(with(kLlama, R"("num_key_value_heads": 2)", R"("num_key_value_heads": 4)")).find("not a multiple"),
            std::string::npos);
  EXPECT_NE(error_of(with(kLlama, "llama3", "longrope")).find("unsupported rope type 'longrope'"), std::string::npos);
  EXPECT_NE(error_of(with(kLlama, R"("silu")", R"("gelu")")).find("hidden_act 'gelu'"), std::string::npos);
  EXPECT_NE(error_of("{not json").find("malformed JSON at byte 3"), std::string::npos);
}

// ---- MoE / MLA fixtures (tests/fixtures/README.md, "MoE / MLA models") ----

TEST(HfConfigMoe, DeepseekV3NativeConfig) {
  const ModelConfig c = fixture("deepseek_v3");
  EXPECT_EQ(c.architecture, "DeepseekV3ForCausalLM");
  EXPECT_EQ(c.tensor_prefix, "model.");
  EXPECT_EQ(c.media_placeholder_token_id, -1);
  EXPECT_EQ(c.quant.method, QuantConfig::Method::None);
  EXPECT_EQ(c.torch_dtype, DType::BF16);  // from "dtype"
  EXPECT_EQ(c.rms_norm_eps, 1e-3);
  EXPECT_EQ(c.num_kv_heads, 4);
  ASSERT_TRUE(c.mla);
  EXPECT_EQ(c.mla->q_lora_rank, 40);
  EXPECT_EQ(c.mla->kv_lora_rank, 32);
  EXPECT_EQ(c.mla->qk_nope_head_dim, 16);
  EXPECT_EQ(c.mla->qk_rope_head_dim, 8);
  EXPECT_EQ(c.mla->v_head_dim, 12);
  EXPECT_TRUE(c.mla->rope_interleave);
  EXPECT_EQ(c.head_dim, 0);  // GQA's; config.json's 8 (the rope dim) is not read
  EXPECT_EQ(c.rotary_dim, 8);  // all of the rope part
  // YaRN from rope_parameters: mscale == mscale_all_dim, so cos/sin are not scaled.
  EXPECT_EQ(c.rope.type, RopeConfig::Type::Yarn);
  EXPECT_EQ(c.rope.theta, 10000.0);
  EXPECT_EQ(c.rope.factor, 4.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
  EXPECT_EQ(c.rope.beta_fast, 32.0);
  EXPECT_EQ(c.rope.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(c.rope.attention_factor, 1.0);
  EXPECT_EQ(c.rope.mscale_all_dim, 1.0);
  // softmax scale = 24^-0.5 * mscale(4, 1)^2 = 0.264642258 (plain 0.204124145).
  EXPECT_NEAR(c.mla->softmax_scale, std::pow(24.0, -0.5) * mscale(4, 1) * mscale(4, 1), 1e-12);
  EXPECT_NEAR(c.mla->softmax_scale, 0.264642258, 1e-9);
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(c.moe->routing, MoeConfig::Routing::SigmoidGroupedTopk);
  EXPECT_EQ(c.moe->num_experts, 16);
  EXPECT_EQ(c.moe->experts_per_token, 4);
  EXPECT_EQ(c.moe->expert_intermediate_size, 32);
  EXPECT_EQ(c.moe->num_shared_experts, 1);
  EXPECT_EQ(c.moe->n_group, 4);
  EXPECT_EQ(c.moe->topk_group, 2);
  EXPECT_TRUE(c.moe->norm_topk_prob);
  EXPECT_EQ(c.moe->routed_scaling_factor, 2.5);
  EXPECT_TRUE(c.moe->score_bias);
  EXPECT_EQ(moe_layers(c), (std::vector<bool>{false, true, true, true}));  // first_k_dense_replace 1
  EXPECT_FALSE(c.is_moe_layer(0));
  EXPECT_TRUE(c.is_moe_layer(3));
}

// head_dim is GQA's: under MLA it is 0 whatever config.json says, so no GQA width (q_dim, kv_dim)
// reads an MLA dim; RoPE's dims come from the MlaConfig.
TEST(HfConfigMoe, MlaLeavesHeadDimZero) {
  const std::string ds = fixture_config("deepseek_v3");
  for (const std::string& text : {ds, with(ds, R"("head_dim": 8,)", R"("head_dim": 7,)"),
                                  with(ds, R"("head_dim": 8,)", ""), fixture_config("kimi_k2")}) {
    const ModelConfig c = parse_model_config(text, "c");
    ASSERT_TRUE(c.mla);
    EXPECT_EQ(c.head_dim, 0);
    EXPECT_EQ(c.q_dim(), 0);
    EXPECT_EQ(c.kv_dim(), 0);
    EXPECT_EQ(c.rotary_dim, c.mla->qk_rope_head_dim);
  }
  EXPECT_EQ(parse_model_config(with(ds, R"("qk_rope_head_dim": 8)", R"("qk_rope_head_dim": 12)"), "c").rotary_dim, 12);
  EXPECT_TRUE(has(error_of(with(ds, R"("head_dim": 8,)", R"("head_dim": 8, "partial_rotary_factor": 0.5,)")),
                  "partial_rotary_factor 0.5 is not supported for DeepseekV3ForCausalLM"));
}

TEST(HfConfigMoe, KimiK2RealConfigYarnAttentionFactor) {
  const ModelConfig c = fixture("kimi_k2");
  EXPECT_EQ(c.architecture, "DeepseekV3ForCausalLM");
  EXPECT_EQ(c.num_layers, 4);  // the MTP layer (num_nextn_predict_layers) is not a decoder layer
  EXPECT_EQ(moe_layers(c), (std::vector<bool>{false, true, true, true}));
  ASSERT_TRUE(c.mla);
  EXPECT_EQ(c.mla->q_lora_rank, 48);
  EXPECT_EQ(c.mla->kv_lora_rank, 24);
  EXPECT_EQ(c.mla->qk_head_dim(), 20);
  EXPECT_EQ(c.mla->v_head_dim, 16);
  EXPECT_TRUE(c.mla->rope_interleave);  // key absent: transformers' default
  // rope_scaling {"type": "yarn"} with the top-level rope_theta.
  EXPECT_EQ(c.rope.type, RopeConfig::Type::Yarn);
  EXPECT_EQ(c.rope.theta, 50000.0);
  EXPECT_EQ(c.rope.factor, 32.0);
  EXPECT_EQ(c.rope.original_max_position_embeddings, 4096);
  EXPECT_EQ(c.rope.beta_fast, 1.0);
  EXPECT_EQ(c.rope.beta_slow, 1.0);
  // mscale 0.707 vs mscale_all_dim 1: (0.1*0.707*ln32 + 1) / (0.1*ln32 + 1) = 0.924589296.
  EXPECT_NEAR(c.rope.attention_factor, mscale(32, 0.707) / mscale(32, 1.0), 1e-12);
  EXPECT_NEAR(c.rope.attention_factor, 0.924589296, 1e-9);
  EXPECT_NEAR(c.mla->softmax_scale, std::pow(20.0, -0.5) * mscale(32, 1) * mscale(32, 1), 1e-12);
  EXPECT_NEAR(c.mla->softmax_scale, 0.405457359, 1e-9);
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(c.moe->num_experts, 12);
  EXPECT_EQ(c.moe->experts_per_token, 3);
  EXPECT_EQ(c.moe->n_group, 1);
  EXPECT_EQ(c.moe->topk_group, 1);
  EXPECT_EQ(c.moe->routed_scaling_factor, 2.827);
  EXPECT_EQ(c.torch_dtype, DType::BF16);  // from "torch_dtype"
}

// The math is chosen by architecture: model_type "kimi_k2" and "deepseek_v3" parse the same.
TEST(HfConfigMoe, ModelTypeKimiK2ParsesAsDeepseekV3) {
  const std::string kimi = fixture_config("kimi_k2");
  expect_same_moe_mla(parse_model_config(kimi, "kimi"),
                      parse_model_config(with(kimi, R"("model_type": "kimi_k2")", R"("model_type": "deepseek_v3")"), "ds"));
  const std::string ds = fixture_config("deepseek_v3");
  expect_same_moe_mla(parse_model_config(ds, "ds"),
                      parse_model_config(with(ds, R"("model_type": "deepseek_v3")", R"("model_type": "kimi_k2")"), "kimi"));
}

TEST(HfConfigMoe, DeepseekV3WithoutQLora) {
  const ModelConfig c = fixture("deepseek_v3_noqlora");
  ASSERT_TRUE(c.mla);
  EXPECT_EQ(c.mla->q_lora_rank, 0);  // null: q_proj reads the hidden state
  EXPECT_FALSE(c.mla->rope_interleave);
  EXPECT_EQ(c.rope.type, RopeConfig::Type::Default);
  EXPECT_EQ(c.rope.theta, 10000.0);
  EXPECT_DOUBLE_EQ(c.mla->softmax_scale, std::pow(24.0, -0.5));  // default rope: no mscale
  ASSERT_TRUE(c.moe);
  EXPECT_FALSE(c.moe->norm_topk_prob);
  EXPECT_EQ(c.moe->expert_intermediate_size, 16);
  EXPECT_EQ(moe_layers(c), (std::vector<bool>{false, true, true, true}));
}

TEST(HfConfigMoe, KimiK25WrapperReadsTextConfig) {
  const ModelConfig c = fixture("kimi_k25_int4");
  EXPECT_EQ(c.architecture, "KimiK25ForConditionalGeneration");
  EXPECT_EQ(c.tensor_prefix, "language_model.model.");
  EXPECT_EQ(c.media_placeholder_token_id, 158);
  EXPECT_EQ(c.hidden_size, 64);
  EXPECT_EQ(c.intermediate_size, 96);
  EXPECT_EQ(c.vocab_size, 160);
  EXPECT_EQ(c.rms_norm_eps, 1e-5);
  ASSERT_TRUE(c.mla);
  EXPECT_EQ(c.mla->q_lora_rank, 32);
  EXPECT_EQ(c.mla->qk_head_dim(), 24);
  EXPECT_EQ(c.rope.type, RopeConfig::Type::Yarn);
  EXPECT_EQ(c.rope.factor, 64.0);
  EXPECT_EQ(c.rope.theta, 50000.0);
  EXPECT_DOUBLE_EQ(c.rope.attention_factor, 1.0);
  EXPECT_NEAR(c.mla->softmax_scale, 0.409215778, 1e-9);
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(c.moe->num_experts, 8);
  EXPECT_EQ(c.moe->experts_per_token, 2);
  EXPECT_EQ(c.moe->expert_intermediate_size, 64);
  EXPECT_EQ(moe_layers(c), (std::vector<bool>{false, true, true, true}));
  // quantization_config inside text_config.
  EXPECT_EQ(c.quant.method, QuantConfig::Method::Int4Group);
  EXPECT_EQ(c.quant.group_size, 32);
  EXPECT_EQ(c.quant.targets, std::vector<std::string>{"Linear"});
  EXPECT_EQ(c.quant.ignore.size(), 6u);
  EXPECT_EQ(c.quant.ignore_match.pattern_count(), 6u);
  EXPECT_EQ(c.quant.describe(), "int4 groups of 32 (compressed-tensors pack-quantized)");
  // Without a placeholder id the wrapper reports none.
  EXPECT_EQ(parse_model_config(with(fixture_config("kimi_k25_int4"), R"("media_placeholder_token_id": 158,)", ""), "k")
                .media_placeholder_token_id,
            -1);
}

TEST(HfConfigMoe, DeepseekV3Fp8Blocks) {
  const ModelConfig c = fixture("deepseek_v3_fp8");
  EXPECT_EQ(c.quant.method, QuantConfig::Method::Fp8Block);
  EXPECT_EQ(c.quant.block_rows, 16);
  EXPECT_EQ(c.quant.block_cols, 8);
  EXPECT_EQ(c.hidden_size, 72);
  EXPECT_EQ(c.rope.factor, 40.0);
  EXPECT_NEAR(c.mla->softmax_scale, 0.382498888, 1e-9);
  EXPECT_EQ(c.moe->n_group, 2);
  EXPECT_EQ(c.moe->topk_group, 1);
  EXPECT_EQ(c.moe->experts_per_token, 2);
  EXPECT_EQ(c.tensor_prefix, "model.");
}

TEST(HfConfigMoe, Qwen3MoeLayersBySparseStepAndMlpOnlyLayers) {
  const ModelConfig c = fixture("qwen3_moe");
  EXPECT_FALSE(c.mla);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.rope.type, RopeConfig::Type::Default);
  ASSERT_TRUE(c.moe);
  EXPECT_EQ(c.moe->routing, MoeConfig::Routing::SoftmaxTopk);
  EXPECT_EQ(c.moe->num_experts, 8);
  EXPECT_EQ(c.moe->experts_per_token, 2);
  EXPECT_EQ(c.moe->expert_intermediate_size, 32);
  EXPECT_EQ(c.moe->num_shared_experts, 0);
  EXPECT_FALSE(c.moe->norm_topk_prob);
  EXPECT_FALSE(c.moe->score_bias);
  // step 2 makes 1, 3, 5 MoE; mlp_only_layers [1] makes 1 dense.
  EXPECT_EQ(moe_layers(c), (std::vector<bool>{false, false, false, true, false, true}));

  const std::string text = fixture_config("qwen3_moe");
  // transformers 5 spells the expert count num_local_experts.
  const ModelConfig local = parse_model_config(with(text, R"("num_experts":)", R"("num_local_experts":)"), "q");
  ASSERT_TRUE(local.moe);
  EXPECT_EQ(local.moe->num_experts, 8);
  // Step 1 and no mlp_only_layers: every layer is MoE.
  const ModelConfig all = parse_model_config(
      with(with(text, R"("decoder_sparse_step": 2)", R"("decoder_sparse_step": 1)"), "[\n    1\n  ]", "[]"), "q");
  EXPECT_EQ(moe_layers(all), std::vector<bool>(6, true));
  // No experts: a dense model.
  const ModelConfig dense = parse_model_config(with(text, R"("num_experts": 8)", R"("num_experts": 0)"), "q");
  EXPECT_FALSE(dense.moe);
  EXPECT_FALSE(dense.is_moe_layer(3));
  EXPECT_TRUE(has(error_of(with(text, R"("num_experts": 8)", R"("num_experts_x": 8)")), "num_local_experts"));
}

TEST(HfConfigMoe, DeepseekMoeLayersByFirstDenseAndFrequency) {
  const std::string ds = fixture_config("deepseek_v3");
  // Original DeepSeek rule: MoE iff i >= first_k_dense_replace and i % moe_layer_freq == 0.
  const ModelConfig freq2 = parse_model_config(
      with(ds, R"("first_k_dense_replace": 1,)", R"("first_k_dense_replace": 1, "moe_layer_freq": 2,)"), "c");
  EXPECT_EQ(moe_layers(freq2), (std::vector<bool>{false, false, true, false}));
  const ModelConfig dense3 =
      parse_model_config(with(ds, R"("first_k_dense_replace": 1,)", R"("first_k_dense_replace": 3,)"), "c");
  EXPECT_EQ(moe_layers(dense3), (std::vector<bool>{false, false, false, true}));
  // Absent: DeepseekV3Config's default 3.
  const ModelConfig absent = parse_model_config(with(ds, R"("first_k_dense_replace": 1,)", ""), "c");
  EXPECT_EQ(moe_layers(absent), (std::vector<bool>{false, false, false, true}));
}

// Thousands of MoE layers of tens of thousands of experts: refused from the config, before any
// per-expert loop (layout checks, tensor names) runs over them.
TEST(HfConfigMoe, ExpertModulesBoundedBeforeAnyLoop) {
  const std::string ds = fixture_config("deepseek_v3");
  const std::string huge = with(with(with(ds, R"("num_hidden_layers": 4)", R"("num_hidden_layers": 4096)"),
                                     R"("n_routed_experts": 16)", R"("n_routed_experts": 65536)"),
                                R"("n_group": 4)", R"("n_group": 2)");
  EXPECT_TRUE(has(error_of(huge), "expert modules, more than the 1048576 layertap takes")) << error_of(huge);
  const std::string qwen = fixture_config("qwen3_moe");
  const std::string huge_qwen = with(qwen, R"("num_hidden_layers": 6)", R"("num_hidden_layers": 4096)");
  EXPECT_TRUE(has(error_of(with(huge_qwen, R"("num_experts": 8)", R"("num_experts": 65536)")), "expert modules"));
}

TEST(HfConfigMoe, ErrorsNameTheProblem) {
  const std::string ds = fixture_config("deepseek_v3");
  const std::string fp8 = fixture_config("deepseek_v3_fp8");
  const std::string k25 = fixture_config("kimi_k25_int4");
  for (const char* method : {"awq", "gptq", "bitsandbytes"}) {
    const std::string e = error_of(with(fp8, R"("quant_method": "fp8")", std::string(R"("quant_method": ")") + method + "\""));
    EXPECT_TRUE(has(e, std::string("quant_method '") + method + "' is not supported")) << e;
  }
  EXPECT_TRUE(has(error_of(with(fp8, R"("weight_block_size")", R"("weight_block_size_x")")), "weight_block_size"));
  // compressed-tensors variants other than int4 symmetric pack-quantized weights, inside text_config.
  EXPECT_TRUE(has(error_of(with(k25, R"("num_bits": 4)", R"("num_bits": 8)")), "num_bits 8"));
  EXPECT_TRUE(has(error_of(with(k25, R"("symmetric": true)", R"("symmetric": false)")), "symmetric"));
  EXPECT_TRUE(has(error_of(with(k25, R"("input_activations": null)",
                                R"("input_activations": {"num_bits": 8, "type": "float"})")),
                  "input_activations"));
  EXPECT_TRUE(has(error_of(with(k25, R"("format": "pack-quantized")", R"("format": "float-quantized")")),
                  "format 'float-quantized'"));
  // MLA rotates its whole rope dims: a partial factor is refused, as for every family but GLM-4.5.
  EXPECT_TRUE(has(error_of(with(ds, R"("hidden_size")", R"("partial_rotary_factor": 0.5, "hidden_size")")),
                  "partial_rotary_factor 0.5 is not supported for DeepseekV3ForCausalLM"));
  // Routing other than noaux_tc/sigmoid.
  EXPECT_TRUE(has(error_of(with(fp8, R"("topk_method": "noaux_tc")", R"("topk_method": "greedy")")),
                  "topk_method 'greedy'"));
  EXPECT_TRUE(has(error_of(with(fp8, R"("scoring_func": "sigmoid")", R"("scoring_func": "softmax")")),
                  "scoring_func 'softmax'"));
  // MLA shares no kv heads.
  EXPECT_TRUE(has(error_of(with(ds, R"("num_key_value_heads": 4)", R"("num_key_value_heads": 2)")),
                  "MLA needs num_key_value_heads (2) equal to num_attention_heads (4)"));
  EXPECT_TRUE(has(error_of(with(ds, R"("n_group": 4)", R"("n_group": 3)")),
                  "n_group 3 does not divide n_routed_experts 16"));
  EXPECT_TRUE(has(error_of(with(ds, R"("topk_group": 2)", R"("topk_group": 5)")), "topk_group 5"));
  EXPECT_TRUE(has(error_of(with(ds, R"("num_experts_per_tok": 4)", R"("num_experts_per_tok": 9)")),
                  "num_experts_per_tok 9 exceeds"));
  EXPECT_TRUE(has(error_of(with(ds, R"("rope_type": "yarn")", R"("rope_type": "longrope")")),
                  "unsupported rope type 'longrope'"));
  // Kimi-K2.5 needs its text_config.
  EXPECT_TRUE(has(error_of(with(k25, R"("text_config")", R"("text_config_x")")),
                  "KimiK25ForConditionalGeneration needs a 'text_config' object"));
  // Errors inside text_config say so.
  EXPECT_TRUE(has(error_of(with(k25, R"("hidden_size": 64,)", "")), "(text_config): missing key 'hidden_size'"));
  // architectures must be a list of exactly one string.
  const std::string arch = "[\n    \"DeepseekV3ForCausalLM\"\n  ]";
  for (const char* bad : {R"("DeepseekV3ForCausalLM")", "[]", R"(["DeepseekV3ForCausalLM", "LlamaForCausalLM"])", "[3]"}) {
    const std::string e = error_of(with(ds, arch, bad));
    EXPECT_TRUE(has(e, "'architectures' must list exactly one architecture name")) << bad << ": " << e;
  }
  EXPECT_TRUE(has(error_of(with(ds, "\"architectures\"", "\"archs\"")), "'architectures'"));
}

// Hostile values: each is refused before anything is sized from it, naming the key and the range.
// Before the typed accessor these ended in std::bad_alloc (1e9 layers), signed overflow (head_dim
// 2^62), NaN states blamed on a sample (negative eps, zero rope factors), all-zero output (eps
// 1e300 is infinity as float) or library messages that named no key (wrong JSON types).
TEST(HfConfig, HostileValuesAreRefusedNamingTheKey) {
  struct Case {
    const char* from;
    const char* to;
    std::vector<std::string> expected;
  };
  const std::vector<Case> cases = {
      {R"("num_hidden_layers": 4)", R"("num_hidden_layers": 1000000000)",
       {"key 'num_hidden_layers' = 1000000000 is outside [1, 4096]"}},
      {R"("num_hidden_layers": 4)", R"("num_hidden_layers": 0)", {"key 'num_hidden_layers' = 0 is outside [1, "}},
      {R"("num_hidden_layers": 4)", R"("num_hidden_layers": -3)", {"key 'num_hidden_layers' = -3"}},
      {R"("num_hidden_layers": 4)", R"("num_hidden_layers": 4.5)", {"key 'num_hidden_layers' must be an integer"}},
      {R"("num_hidden_layers": 4)", R"("num_hidden_layers": 18446744073709551615)",
       {"key 'num_hidden_layers' = 18446744073709551615 is outside"}},
      {R"("hidden_size": 72)", R"("hidden_size": "72")", {"key 'hidden_size' must be an integer, found string"}},
      {R"("vocab_size": 160)", R"("vocab_size": 4294967296)", {"key 'vocab_size' = 4294967296 is outside"}},
      {R"("num_attention_heads": 6)", R"("num_attention_heads": 6, "head_dim": 4611686018427387904)",
       {"key 'head_dim' = 4611686018427387904 is outside"}},
      {R"("rms_norm_eps": 1e-5)", R"("rms_norm_eps": -1e-5)", {"key 'rms_norm_eps' = -1e-05 is outside (0, 0.1]"}},
      {R"("rms_norm_eps": 1e-5)", R"("rms_norm_eps": 1e300)", {"key 'rms_norm_eps' = 1e+300 is outside"}},
      {R"("rms_norm_eps": 1e-5)", R"("rms_norm_eps": 0)", {"key 'rms_norm_eps' = 0 is outside"}},
      {R"("rms_norm_eps": 1e-5)", R"("rms_norm_eps": "1e-5")", {"key 'rms_norm_eps' must be a number, found string"}},
      {R"("rope_theta": 500000.0)", R"("rope_theta": "500000")", {"key 'rope_theta' must be a number"}},
      {R"("rope_theta": 500000.0)", R"("rope_theta": 0)", {"key 'rope_theta' = 0 is outside"}},
      {R"("factor": 8.0)", R"("factor": 0)", {"(rope_scaling): key 'factor' = 0 is outside [1, "}},
      {R"("low_freq_factor": 1.0)", R"("low_freq_factor": 0)", {"(rope_scaling): key 'low_freq_factor' = 0"}},
      {R"("original_max_position_embeddings": 32)", R"("original_max_position_embeddings": 0)",
       {"key 'original_max_position_embeddings' = 0 is outside"}},
      {R"("torch_dtype": "bfloat16")", R"("torch_dtype": 16)", {"key 'torch_dtype' must be a string, found number"}},
      {R"("torch_dtype": "bfloat16")", R"("torch_dtype": "int3")", {"key 'torch_dtype'", "int3"}},
      {R"("vocab_size": 160,)", R"("vocab_size": 160, "tie_word_embeddings": "yes",)",
       {"key 'tie_word_embeddings' must be true or false, found string"}},
      {R"("hidden_act": "silu")", R"("hidden_act": ["silu"])", {"key 'hidden_act' must be a string, found array"}},
      // A huge invalid value is quoted as an excerpt, not whole.
      {R"("hidden_act": "silu")", R"("hidden_act": ")" "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx" R"(")",
       {"hidden_act 'xxxx", "... ("}},
  };
  for (const Case& c : cases) {
    const std::string e = error_of(with(kLlama, c.from, c.to));
    ASSERT_FALSE(e.empty()) << c.to;
    EXPECT_TRUE(has(e, "config.json")) << e;
    for (const std::string& part : c.expected) EXPECT_TRUE(has(e, part)) << c.to << "\n  gives: " << e;
  }
  // Nesting deep enough to overflow recursive code is refused while parsing.
  const std::string deep = R"({"architectures": ["LlamaForCausalLM"], "x": )" + std::string(100000, '[');
  EXPECT_TRUE(has(error_of(deep), "nested deeper than")) << error_of(deep).substr(0, 200);
  // MoE keys too, inside a DeepSeek config.
  const std::string ds = fixture_config("deepseek_v3");
  EXPECT_TRUE(has(error_of(with(ds, R"("n_routed_experts": 16)", R"("n_routed_experts": 100000000)")),
                  "key 'n_routed_experts' = 100000000 is outside"));
  EXPECT_TRUE(has(error_of(with(ds, R"("routed_scaling_factor": 2.5)", R"("routed_scaling_factor": "2.5")")),
                  "key 'routed_scaling_factor' must be a number"));
  const std::string fp8 = fixture_config("deepseek_v3_fp8");
  EXPECT_TRUE(has(error_of(with(fp8, R"("weight_block_size")", R"("weight_block_size": [-16, 16], "x")")),
                  "(quantization_config): key 'weight_block_size'[0] = -"));
}

}  // namespace layertap
