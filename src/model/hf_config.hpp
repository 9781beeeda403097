// The subset of a Hugging Face config.json that the dense decoder families share, validated once.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace layertap {

struct RopeConfig {
  enum class Type { Default, Llama3 };
  Type type = Type::Default;
  double theta = 10000.0;
  // llama3 frequency scaling (transformers' _compute_llama3_parameters)
  double factor = 1.0, low_freq_factor = 1.0, high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string architecture;  // e.g. "LlamaForCausalLM"
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t vocab_size = 0;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool qkv_bias = false;   // Qwen2: q/k/v biases; Llama attention_bias: q/k/v/o
  bool o_bias = false;
  bool mlp_bias = false;   // Llama mlp_bias
  bool qk_norm = false;    // Qwen3: per-head RMSNorm on q and k before RoPE
  std::vector<int64_t> sliding_window;  // [L] per layer; 0 = full causal attention
  DType torch_dtype = DType::F32;

  int64_t q_dim() const { return num_heads * head_dim; }
  int64_t kv_dim() const { return num_kv_heads * head_dim; }
};

// Parses and validates config.json; errors name the file and the key.
ModelConfig load_model_config(const std::string& config_json_path);
ModelConfig parse_model_config(const std::string& json_text, const std::string& source_name);

}  // namespace layertap
