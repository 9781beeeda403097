#include "bench/model_catalog.hpp"

#include <map>

#include "core/error.hpp"

namespace layertap {

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

// The dense models and the two MoE families that are rows of parameters (Mixtral, GLM-4.5).
const char* kLlama3_8B = R"json({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
  "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "rms_norm_eps": 1e-5,
  "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, "hidden_act": "silu", "torch_dtype": "bfloat16"
})json";

const char* kLlama3_70B = R"json({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 8192, "intermediate_size": 28672, "num_hidden_layers": 80,
  "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256, "rms_norm_eps": 1e-5,
  "rope_theta": 500000.0, "rope_scaling": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
  "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}, "hidden_act": "silu", "torch_dtype": "bfloat16"
})json";

const char* kQwen3_8B = R"json({
  "architectures": ["Qwen3ForCausalLM"], "hidden_size": 4096, "intermediate_size": 12288, "num_hidden_layers": 36,
  "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 151936, "rms_norm_eps": 1e-6,
  "rope_theta": 1000000.0, "hidden_act": "silu", "torch_dtype": "bfloat16"
})json";

// Seconds to run: a smoke test of the benchmark itself.
const char* kTiny = R"json({
  "architectures": ["LlamaForCausalLM"], "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 8,
  "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 64, "vocab_size": 1000, "rms_norm_eps": 1e-5,
  "rope_theta": 10000.0, "hidden_act": "silu", "torch_dtype": "bfloat16"
})json";

// mistralai/Mixtral-8x7B-v0.1.
const char* kMixtral8x7B = R"json({
  "architectures": ["MixtralForCausalLM"], "hidden_size": 4096, "intermediate_size": 14336, "num_hidden_layers": 32,
  "num_attention_heads": 32, "num_key_value_heads": 8, "num_local_experts": 8, "num_experts_per_tok": 2,
  "vocab_size": 32000, "max_position_embeddings": 32768, "rms_norm_eps": 1e-5, "rope_theta": 1000000.0,
  "sliding_window": null, "hidden_act": "silu", "torch_dtype": "bfloat16", "tie_word_embeddings": false
})json";

// zai-org/GLM-4.5 (its multi-token-prediction layer is never read).
const char* kGlm45 = R"json({
  "architectures": ["Glm4MoeForCausalLM"], "hidden_size": 5120, "intermediate_size": 12288,
  "moe_intermediate_size": 1536, "num_hidden_layers": 92, "num_attention_heads": 96, "num_key_value_heads": 8,
  "head_dim": 128, "partial_rotary_factor": 0.5, "attention_bias": true, "use_qk_norm": true,
  "n_routed_experts": 160, "n_shared_experts": 1, "num_experts_per_tok": 8, "n_group": 1, "topk_group": 1,
  "first_k_dense_replace": 3, "norm_topk_prob": true, "routed_scaling_factor": 2.5, "num_nextn_predict_layers": 1,
  "vocab_size": 151552, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 1000000,
  "hidden_act": "silu", "torch_dtype": "bfloat16", "tie_word_embeddings": false
})json";

// openai/gpt-oss-120b (layer_types left to their default, the published alternation).
const char* kGptOss120B = R"json({
  "architectures": ["GptOssForCausalLM"], "hidden_size": 2880, "intermediate_size": 2880, "num_hidden_layers": 36,
  "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "attention_bias": true,
  "num_local_experts": 128, "num_experts_per_tok": 4, "sliding_window": 128, "swiglu_limit": 7.0,
  "vocab_size": 201088, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 150000,
  "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "beta_fast": 32.0, "beta_slow": 1.0, "truncate": false,
                   "original_max_position_embeddings": 4096},
  "hidden_act": "silu", "torch_dtype": "bfloat16", "tie_word_embeddings": false,
  "quantization_config": {"quant_method": "mxfp4"}
})json";

// meta-llama/Llama-4-Scout-17B-16E-Instruct's text model (the multimodal wrapper's text_config).
const char* kLlama4Scout = R"json({
  "architectures": ["Llama4ForConditionalGeneration"], "image_token_index": 200092, "text_config": {
  "hidden_size": 5120, "intermediate_size": 8192, "intermediate_size_mlp": 16384, "num_hidden_layers": 48,
  "num_attention_heads": 40, "num_key_value_heads": 8, "head_dim": 128, "num_local_experts": 16,
  "num_experts_per_tok": 1, "interleave_moe_layer_step": 1, "attention_chunk_size": 8192, "use_qk_norm": true,
  "attn_temperature_tuning": true, "floor_scale": 8192, "attn_scale": 0.1, "vocab_size": 202048,
  "max_position_embeddings": 10485760, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
  "rope_scaling": {"rope_type": "llama3", "factor": 16.0, "low_freq_factor": 1.0, "high_freq_factor": 1.0,
                   "original_max_position_embeddings": 8192},
  "hidden_act": "silu", "torch_dtype": "bfloat16", "tie_word_embeddings": false}
})json";

// google/gemma-3-27b-it as published: the multimodal wrapper's text_config names only what differs
// from Gemma3TextConfig's defaults (vocab 262208, the local rope, one full layer in six).
const char* kGemma3_27B = R"json({
  "architectures": ["Gemma3ForConditionalGeneration"], "image_token_index": 262144, "text_config": {
  "head_dim": 128, "hidden_size": 5376, "intermediate_size": 21504, "model_type": "gemma3_text",
  "num_attention_heads": 32, "num_hidden_layers": 62, "num_key_value_heads": 16, "query_pre_attn_scalar": 168,
  "rope_scaling": {"factor": 8.0, "rope_type": "linear"}, "sliding_window": 1024},
  "torch_dtype": "bfloat16"
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
          "kimi-k2.5-mini", "mixtral-8x7b", "glm-4.5", "gpt-oss-120b", "llama-4-scout", "gemma-3-27b"};
}

ModelConfig synthetic_model_config(const std::string& name, std::int64_t layers) {
  LT_CHECK(layers >= 0, "bench: --layers must be positive");
  const std::map<std::string, const char*> json = {
      {"llama3-8b", kLlama3_8B},         {"llama3-70b", kLlama3_70B},       {"qwen3-8b", kQwen3_8B},
      {"tiny", kTiny},                   {"kimi-k2.5", kKimiK25},           {"deepseek-v3", kDeepseekV3},
      {"qwen3-30b-a3b", kQwen3_30B_A3B}, {"tiny-moe", kTinyMoe},            {"kimi-k2.5-mini", kKimiK25Mini},
      {"mixtral-8x7b", kMixtral8x7B},    {"glm-4.5", kGlm45},               {"gpt-oss-120b", kGptOss120B},
      {"llama-4-scout", kLlama4Scout},   {"gemma-3-27b", kGemma3_27B}};
  if (const auto it = json.find(name); it != json.end()) {
    const std::string text = layers > 0 ? with_layers(it->second, layers) : std::string(it->second);
    return parse_model_config(text, "synthetic " + name);
  }
  std::string names;
  for (const std::string& n : synthetic_model_names()) names += (names.empty() ? "" : ", ") + n;
  LT_FAIL("unknown synthetic model '", name, "' (", names, ")");
}

}  // namespace layertap
