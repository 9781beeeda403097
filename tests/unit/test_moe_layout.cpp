// Tensor-parallel layout checks of MoE/MLA models (check_tp_divisibility), from the config alone,
// before any weight is read: heads, whole experts (--moe-split experts) or their intermediate size
// (--moe-split intermediate), shared experts, and slices that must start and end on FP8 block or
// INT4 group boundaries. Refusals name the number, the module and the format.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"
#include "model/hf_config.hpp"
#include "model/weights.hpp"
#include "error_text.hpp"

namespace layertap {
namespace {

using test::has;

using nlohmann::json;

const std::string kModels = std::string(LAYERTAP_FIXTURES) + "/models/";

ModelConfig fixture(const std::string& model) { return load_model_config(kModels + model + "/config.json"); }

// The fixture's config.json with top-level keys overridden.
ModelConfig fixture_with(const std::string& model, const json& overrides) {
  std::ifstream in(kModels + model + "/config.json");
  json j = json::parse(in);
  for (const auto& [key, value] : overrides.items()) j[key] = value;
  return parse_model_config(j.dump(), model + " (modified)");
}

// The error check_tp_divisibility gives, or "" when the layout is accepted.
std::string layout_error(const ModelConfig& c, int tp, MoeSplit split) {
  try {
    for (int rank = 0; rank < tp; ++rank) check_tp_divisibility(c, TpShard{rank, tp, split});
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(MoeLayout, UnquantizedFixturesSplitAtOneTwoFour) {
  for (const char* model : {"deepseek_v3", "kimi_k2", "deepseek_v3_noqlora", "qwen3_moe"})
    for (int tp : {1, 2, 4})
      for (MoeSplit split : {MoeSplit::Experts, MoeSplit::Intermediate})
        EXPECT_EQ(layout_error(fixture(model), tp, split), "") << model << " tp " << tp << " " << moe_split_name(split);
}

TEST(MoeLayout, Fp8BlocksRefuseTp4AcceptTp2) {
  const ModelConfig c = fixture("deepseek_v3_fp8");
  for (MoeSplit split : {MoeSplit::Experts, MoeSplit::Intermediate}) {
    EXPECT_EQ(layout_error(c, 2, split), "") << moe_split_name(split);
    // q_b_proj: 1 head x 24 rows per rank, not a multiple of the 16-row blocks.
    const std::string e = layout_error(c, 4, split);
    EXPECT_TRUE(has(e, "FP8 block rows (16)")) << e;
    EXPECT_TRUE(has(e, "model.layers.0.self_attn.q_b_proj slices of 24 rows")) << e;
  }
}

TEST(MoeLayout, Fp8BlockColumnsOfRowParallelSlices) {
  // Block [8, 32] at TP 2: q_b/kv_b rows (48 per rank) fit 8, but o_proj columns (2 heads x 8 = 16)
  // are half a 32-column block.
  const ModelConfig c = fixture_with("deepseek_v3_fp8", {{"quantization_config",
                                                          {{"quant_method", "fp8"}, {"weight_block_size", {8, 32}}}}});
  const std::string e = layout_error(c, 2, MoeSplit::Experts);
  EXPECT_TRUE(has(e, "model.layers.0.self_attn.o_proj slices of 16 columns")) << e;
  EXPECT_TRUE(has(e, "FP8 block columns (32)")) << e;
  EXPECT_EQ(layout_error(c, 1, MoeSplit::Experts), "");  // nothing is cut at TP 1
}

TEST(MoeLayout, Fp8RoutedExpertSlicesOnlyMatterWhenSliced) {
  // moe_intermediate 48 at TP 2 gives 24-row expert slices (not whole 16-row blocks); no shared
  // expert, so only the routed experts' split decides.
  const ModelConfig c = fixture_with("deepseek_v3_fp8", {{"moe_intermediate_size", 48}, {"n_shared_experts", 0}});
  EXPECT_EQ(layout_error(c, 2, MoeSplit::Experts), "");
  const std::string e = layout_error(c, 2, MoeSplit::Intermediate);
  EXPECT_TRUE(has(e, "model.layers.1.mlp.experts.0.gate_proj slices of 24 rows")) << e;
  EXPECT_TRUE(has(e, "FP8 block rows (16)")) << e;
}

TEST(MoeLayout, Int4GroupsRefuseSlicedExpertsAtTp4) {
  const ModelConfig c = fixture("kimi_k25_int4");
  // 64 / 4 = 16 input columns of each expert's down_proj: half an INT4 group of 32.
  const std::string e = layout_error(c, 4, MoeSplit::Intermediate);
  EXPECT_TRUE(has(e, "INT4 groups of 32")) << e;
  EXPECT_TRUE(has(e, "language_model.model.layers.1.mlp.experts.0.down_proj slices of 16 input columns")) << e;
  EXPECT_EQ(layout_error(c, 4, MoeSplit::Experts), "");  // whole experts: nothing cut
  EXPECT_EQ(layout_error(c, 2, MoeSplit::Intermediate), "");  // 32 columns: one whole group
  // The dense MLP, shared expert and attention are not int4 (ignore list), so their slices need no
  // group alignment; without the ignore list the dense down_proj (96 / 2 = 48 columns) would.
  const ModelConfig all_int4 = [] {
    std::ifstream in(kModels + "kimi_k25_int4/config.json");
    json j = json::parse(in);
    j["text_config"]["quantization_config"]["ignore"] = json::array();
    return parse_model_config(j.dump(), "kimi_k25_int4 (no ignore list)");
  }();
  const std::string all = layout_error(all_int4, 2, MoeSplit::Experts);
  EXPECT_TRUE(has(all, "language_model.model.layers.0.mlp.down_proj slices of 48 input columns")) << all;
  EXPECT_TRUE(has(layout_error(all_int4, 4, MoeSplit::Experts), "INT4 groups of 32"));
}

TEST(MoeLayout, ExpertsMustDivideUnderExpertSplit) {
  // kimi_k2: 12 experts, 4 heads. TP 8 fails on the heads first.
  EXPECT_TRUE(has(layout_error(fixture("kimi_k2"), 8, MoeSplit::Experts),
                  "tensor parallel size 8 does not divide num_attention_heads 4"));
  // 10 experts: only the expert count fails at TP 4, and only when whole experts are split.
  const ModelConfig ten = fixture_with("kimi_k2", {{"n_routed_experts", 10}});
  const std::string e = layout_error(ten, 4, MoeSplit::Experts);
  EXPECT_TRUE(has(e, "tensor parallel size 4 does not divide the routed experts (--moe-split experts) of 10")) << e;
  EXPECT_EQ(layout_error(ten, 4, MoeSplit::Intermediate), "");
  EXPECT_EQ(layout_error(ten, 2, MoeSplit::Experts), "");
}

TEST(MoeLayout, IntermediateMustDivideUnderIntermediateSplit) {
  // moe_intermediate 26: not divisible by 4; two shared experts make the shared MLP 52, which is.
  const ModelConfig c = fixture_with("kimi_k2", {{"moe_intermediate_size", 26}, {"n_shared_experts", 2}});
  EXPECT_EQ(layout_error(c, 4, MoeSplit::Experts), "");
  const std::string e = layout_error(c, 4, MoeSplit::Intermediate);
  EXPECT_TRUE(has(e, "does not divide moe_intermediate_size (--moe-split intermediate) 26")) << e;
  // With one shared expert the shared MLP (26) is sliced under either split.
  const ModelConfig one = fixture_with("kimi_k2", {{"moe_intermediate_size", 26}, {"n_shared_experts", 1}});
  EXPECT_TRUE(has(layout_error(one, 4, MoeSplit::Experts), "shared experts' intermediate size 26"));
}

TEST(MoeLayout, DenseIntermediateOnlyWhenThereAreDenseLayers) {
  // intermediate_size 90 does not divide by 4; it matters only while layer 0 is dense.
  EXPECT_TRUE(has(layout_error(fixture_with("kimi_k2", {{"intermediate_size", 90}}), 4, MoeSplit::Experts),
                  "does not divide intermediate_size 90"));
  EXPECT_EQ(layout_error(fixture_with("kimi_k2", {{"intermediate_size", 90}, {"first_k_dense_replace", 0}}), 4,
                         MoeSplit::Experts),
            "");
}

TEST(MoeLayout, Qwen3MoeReplicatesKvHeadsAndRefusesBadRanks) {
  const ModelConfig c = fixture("qwen3_moe");  // 4 heads, 2 kv heads
  EXPECT_EQ(layout_error(c, 4, MoeSplit::Experts), "");
  EXPECT_TRUE(has(layout_error(c, 8, MoeSplit::Experts), "num_attention_heads 4"));
  EXPECT_THROW(check_tp_divisibility(c, TpShard{2, 2, MoeSplit::Experts}), Error);
  EXPECT_THROW(check_tp_divisibility(c, TpShard{0, 0, MoeSplit::Experts}), Error);
}

}  // namespace layertap
