#include <gtest/gtest.h>

#include "core/error.hpp"
#include "model/hf_config.hpp"

namespace layertap {
namespace {

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

std::string with(std::string json, const std::string& from, const std::string& to) {
  json.replace(json.find(from), from.size(), to);
  return json;
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
  EXPECT_EQ(c.sliding_window, std::vector<int64_t>(4, 0));
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
  EXPECT_EQ(mistral.sliding_window, std::vector<int64_t>(4, 8));
}

TEST(HfConfig, ErrorsNameTheProblem) {
  EXPECT_NE(error_of(with(kLlama, "LlamaForCausalLM", "GPT2LMHeadModel")).find("unsupported architecture 'GPT2LMHeadModel'"),
            std::string::npos);
  EXPECT_NE(error_of(with(kLlama, R"("vocab_size": 160,)", "")).find("missing key 'vocab_size'"), std::string::npos);
  EXPECT_NE(error_of(with(kLlama, R"("num_key_value_heads": 2)", R"("num_key_value_heads": 4)")).find("not a multiple"),
            std::string::npos);
  EXPECT_NE(error_of(with(kLlama, "llama3", "yarn")).find("unsupported rope type 'yarn'"), std::string::npos);
  EXPECT_NE(error_of(with(kLlama, R"("silu")", R"("gelu")")).find("hidden_act 'gelu'"), std::string::npos);
  EXPECT_NE(error_of("{not json").find("not valid JSON"), std::string::npos);
}

}  // namespace layertap
