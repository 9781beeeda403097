// load_weights on the MoE/MLA fixtures and on damaged copies of them (written to a temp dir with
// tests/unit/safetensors_io.hpp): what each rank holds under expert-parallel and intermediate
// splits, that MTP layers, the LM head and the vision tower are never read, and that missing or
// malformed quantized tensors are refused naming the tensor or module.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"
#include "safetensors_io.hpp"
#include "error_text.hpp"

namespace layertap {
namespace {

using test::error_of;
using test::has;

namespace fs = std::filesystem;
using nlohmann::json;
using test_io::RawTensors;

const fs::path kModels = fs::path(LAYERTAP_FIXTURES) / "models";

ModelWeights load(const fs::path& dir, const TpShard& shard) {
  const Checkpoint ck(checkpoint_files(dir.string()));
  return load_weights(ck, load_model_config((dir / "config.json").string()), shard);
}

const MoeWeights& moe_of(const ModelWeights& w, std::size_t layer) { return std::get<MoeWeights>(w.layers.at(layer).ffn); }
const MlaWeights& mla_of(const ModelWeights& w, std::size_t layer) { return std::get<MlaWeights>(w.layers.at(layer).attn); }

// Rows [r0, r0 + rows) / columns [c0, c0 + cols) of a row-major matrix with `in` columns.
std::vector<float> rows_of(const Linear& l, int64_t r0, int64_t rows) {
  return {l.w.begin() + r0 * l.in, l.w.begin() + (r0 + rows) * l.in};
}
std::vector<float> cols_of(const Linear& l, int64_t c0, int64_t cols) {
  std::vector<float> v;
  for (int64_t r = 0; r < l.out; ++r)
    v.insert(v.end(), l.w.begin() + r * l.in + c0, l.w.begin() + r * l.in + c0 + cols);
  return v;
}

// A temp copy of a fixture: its tensors in one model.safetensors (damaged by the test) and its
// config.json (optionally edited).
class MoeLoaderDamaged : public ::testing::Test {
 protected:
  fs::path dir = fs::temp_directory_path() /
                 ("layertap-moe-loader-" + std::to_string(::getpid()) + "-" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
  void TearDown() override { fs::remove_all(dir); }

  void write(const std::string& model, const RawTensors& tensors, const std::function<void(json&)>& edit = {}) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    test_io::write_file(dir / "model.safetensors", tensors);
    std::ifstream in(kModels / model / "config.json");
    json config = json::parse(in);
    if (edit) edit(config);
    std::ofstream(dir / "config.json") << config.dump(2);
  }
  std::string load_error(const TpShard& shard = {}) {
    return error_of([&] { load(dir, shard); });
  }
};

}  // namespace

TEST(MoeLoader, ExpertParallelHoldsOnlyTheRanksExperts) {
  const fs::path dir = kModels / "deepseek_v3";  // 16 experts of intermediate 32, one shared, 4 heads
  const ModelWeights full = load(dir, {0, 1, MoeSplit::Experts});
  const ModelWeights r1 = load(dir, {1, 2, MoeSplit::Experts});
  ASSERT_EQ(r1.layers.size(), 4u);
  EXPECT_TRUE(std::holds_alternative<MlpWeights>(r1.layers[0].ffn));  // first_k_dense_replace 1
  for (std::size_t layer : {1u, 2u, 3u}) {
    const MoeWeights& f = moe_of(full, layer);
    const MoeWeights& m = moe_of(r1, layer);
    EXPECT_EQ(f.routed.size(), 16u);
    EXPECT_EQ(m.first_expert, 8);
    ASSERT_EQ(m.routed.size(), 8u);
    for (std::size_t i = 0; i < m.routed.size(); ++i) {  // whole experts 8..15
      const MlpWeights& e = m.routed[i];
      EXPECT_EQ(e.gate.out, 32);
      EXPECT_EQ(e.gate.in, 64);
      EXPECT_EQ(e.down.out, 64);
      EXPECT_EQ(e.down.in, 32);
      EXPECT_EQ(e.gate.w, f.routed[8 + i].gate.w);
      EXPECT_EQ(e.up.w, f.routed[8 + i].up.w);
      EXPECT_EQ(e.down.w, f.routed[8 + i].down.w);
    }
    // Router and bias replicated; the shared expert sliced along its intermediate size.
    EXPECT_EQ(m.router.w, f.router.w);
    ASSERT_TRUE(m.score_bias);
    EXPECT_EQ(m.score_bias->size(), 16u);
    EXPECT_EQ(m.score_bias, f.score_bias);
    ASSERT_TRUE(m.shared && f.shared);
    EXPECT_EQ(m.shared->gate.out, 16);
    EXPECT_EQ(m.shared->gate.w, rows_of(f.shared->gate, 16, 16));
    EXPECT_EQ(m.shared->down.w, cols_of(f.shared->down, 16, 16));
  }
  // MLA: heads 2..3 on rank 1 (q_b/kv_b rows, o_proj columns); latent projections replicated.
  const MlaWeights& a = mla_of(r1, 1);
  const MlaWeights& fa = mla_of(full, 1);
  EXPECT_EQ(a.heads, 2);
  EXPECT_EQ(a.q_b->w, rows_of(*fa.q_b, 2 * 24, 2 * 24));
  EXPECT_EQ(a.kv_b.w, rows_of(fa.kv_b, 2 * 28, 2 * 28));
  EXPECT_EQ(a.o.w, cols_of(fa.o, 2 * 12, 2 * 12));
  EXPECT_EQ(a.q_a->w, fa.q_a->w);
  EXPECT_EQ(a.kv_a.w, fa.kv_a.w);
  EXPECT_EQ(a.kv_a.out, 32 + 8);
}

TEST(MoeLoader, IntermediateSplitHoldsEveryExpertSliced) {
  const fs::path dir = kModels / "deepseek_v3";
  const ModelWeights full = load(dir, {0, 1, MoeSplit::Intermediate});
  const ModelWeights r1 = load(dir, {1, 2, MoeSplit::Intermediate});
  const MoeWeights& f = moe_of(full, 2);
  const MoeWeights& m = moe_of(r1, 2);
  EXPECT_EQ(m.first_expert, 0);
  ASSERT_EQ(m.routed.size(), 16u);
  for (std::size_t e = 0; e < 16; ++e) {
    EXPECT_EQ(m.routed[e].gate.out, 16);
    EXPECT_EQ(m.routed[e].down.in, 16);
    EXPECT_EQ(m.routed[e].gate.w, rows_of(f.routed[e].gate, 16, 16));
    EXPECT_EQ(m.routed[e].up.w, rows_of(f.routed[e].up, 16, 16));
    EXPECT_EQ(m.routed[e].down.w, cols_of(f.routed[e].down, 16, 16));
  }
}

TEST(MoeLoader, QuantizedSlicesEqualTheFullDecode) {
  // FP8 blocks [16, 8] (partial edge blocks) at TP 2, and INT4 experts sliced at TP 2 (one whole
  // 32-group of down_proj's 64 input columns per rank).
  const ModelWeights fp8_full = load(kModels / "deepseek_v3_fp8", {0, 1, MoeSplit::Intermediate});
  const ModelWeights fp8_r1 = load(kModels / "deepseek_v3_fp8", {1, 2, MoeSplit::Intermediate});
  EXPECT_EQ(mla_of(fp8_r1, 0).q_b->w, rows_of(*mla_of(fp8_full, 0).q_b, 48, 48));
  EXPECT_EQ(mla_of(fp8_r1, 0).q_a->w, mla_of(fp8_full, 0).q_a->w);  // [36, 72]: partial row blocks
  EXPECT_EQ(mla_of(fp8_r1, 0).o.w, cols_of(mla_of(fp8_full, 0).o, 16, 16));
  EXPECT_EQ(moe_of(fp8_r1, 1).routed[5].down.w, cols_of(moe_of(fp8_full, 1).routed[5].down, 16, 16));

  const ModelWeights int4_full = load(kModels / "kimi_k25_int4", {0, 1, MoeSplit::Intermediate});
  const ModelWeights int4_r1 = load(kModels / "kimi_k25_int4", {1, 2, MoeSplit::Intermediate});
  const MoeWeights& f = moe_of(int4_full, 1);
  const MoeWeights& m = moe_of(int4_r1, 1);
  ASSERT_EQ(m.routed.size(), 8u);
  EXPECT_EQ(m.routed[7].gate.w, rows_of(f.routed[7].gate, 32, 32));
  EXPECT_EQ(m.routed[7].down.w, cols_of(f.routed[7].down, 32, 32));
  // Expert parallel: rank 1 of 2 holds experts 4..7 whole.
  const ModelWeights int4_ep = load(kModels / "kimi_k25_int4", {1, 2, MoeSplit::Experts});
  EXPECT_EQ(moe_of(int4_ep, 1).first_expert, 4);
  ASSERT_EQ(moe_of(int4_ep, 1).routed.size(), 4u);
  EXPECT_EQ(moe_of(int4_ep, 1).routed[3].down.w, f.routed[7].down.w);
}

TEST_F(MoeLoaderDamaged, KimiK2MtpLayerAndLmHeadAreNeverRead) {
  RawTensors t = test_io::read_dir(kModels / "kimi_k2");
  int damaged = 0;
  for (auto& [name, tensor] : t)
    if (name.rfind("model.layers.4.", 0) == 0 || name == "lm_head.weight") {
      test_io::make_opaque(tensor);
      ++damaged;
    }
  ASSERT_GT(damaged, 20);  // the MTP layer really is in the file
  write("kimi_k2", t);
  {  // the damage is visible to anyone who reads those tensors
    const Checkpoint ck(checkpoint_files(dir.string()));
    EXPECT_THROW(ck.read("model.layers.4.eh_proj.weight", {64, 128}), Error);
  }
  const ModelWeights w = load(dir, {0, 1, MoeSplit::Experts});
  EXPECT_EQ(w.layers.size(), 4u);
  EXPECT_EQ(moe_of(w, 3).routed.size(), 12u);
}

TEST_F(MoeLoaderDamaged, KimiK25VisionTowerAndProjectorAreNeverRead) {
  RawTensors t = test_io::read_dir(kModels / "kimi_k25_int4");
  int damaged = 0;
  for (auto& [name, tensor] : t)
    if (name.rfind("vision_tower.", 0) == 0 || name.rfind("mm_projector.", 0) == 0 ||
        name == "language_model.lm_head.weight") {
      test_io::make_opaque(tensor);
      ++damaged;
    }
  ASSERT_GE(damaged, 9);
  write("kimi_k25_int4", t);
  const ModelWeights w = load(dir, {0, 1, MoeSplit::Experts});
  EXPECT_EQ(w.layers.size(), 4u);
  EXPECT_EQ(moe_of(w, 1).routed.size(), 8u);
  // Same values as the sharded original.
  const ModelWeights original = load(kModels / "kimi_k25_int4", {0, 1, MoeSplit::Experts});
  EXPECT_EQ(moe_of(w, 2).routed[3].up.w, moe_of(original, 2).routed[3].up.w);
  EXPECT_EQ(w.embed, original.embed);
}

TEST_F(MoeLoaderDamaged, Fp8TensorWithoutQuantizationConfig) {
  write("deepseek_v3_fp8", test_io::read_dir(kModels / "deepseek_v3_fp8"),
        [](json& c) { c.erase("quantization_config"); });
  const std::string e = load_error();
  EXPECT_TRUE(has(e, "tensor 'model.layers.0.self_attn.q_a_proj.weight'")) << e;
  EXPECT_TRUE(has(e, "float8_e4m3fn but the config has no fp8 quantization_config")) << e;
}

TEST_F(MoeLoaderDamaged, Fp8ScaleWithTheWrongShape) {
  RawTensors t = test_io::read_dir(kModels / "deepseek_v3_fp8");
  test_io::RawTensor& s = t.at("model.layers.0.self_attn.q_a_proj.weight_scale_inv");
  ASSERT_EQ(s.shape, (std::vector<int64_t>{3, 9}));  // [ceil(36/16), 72/8]
  s.shape = {9, 3};
  write("deepseek_v3_fp8", t);
  const std::string e = load_error();
  EXPECT_TRUE(has(e, "tensor 'model.layers.0.self_attn.q_a_proj.weight_scale_inv'")) << e;
  EXPECT_TRUE(has(e, "has shape [9, 3]")) << e;
  EXPECT_TRUE(has(e, "needs [3, 9]")) << e;
}

TEST_F(MoeLoaderDamaged, Fp8ScaleMissing) {
  RawTensors t = test_io::read_dir(kModels / "deepseek_v3_fp8");
  ASSERT_EQ(t.erase("model.layers.2.mlp.experts.1.up_proj.weight_scale_inv"), 1u);
  write("deepseek_v3_fp8", t);
  const std::string e = load_error();
  EXPECT_TRUE(has(e, "model.layers.2.mlp.experts.1.up_proj.weight_scale_inv")) << e;
}

TEST_F(MoeLoaderDamaged, Int4ModuleWithoutWeightPacked) {
  RawTensors t = test_io::read_dir(kModels / "kimi_k25_int4");
  const std::string module = "language_model.model.layers.1.mlp.experts.0.down_proj";
  ASSERT_EQ(t.erase(module + ".weight_packed"), 1u);
  write("kimi_k25_int4", t);
  const std::string e = load_error();
  EXPECT_TRUE(has(e, "module '" + module + "' is int4-quantized")) << e;
  EXPECT_TRUE(has(e, module + ".weight_packed' is missing")) << e;
}

TEST_F(MoeLoaderDamaged, Int4WeightShapeDisagrees) {
  RawTensors t = test_io::read_dir(kModels / "kimi_k25_int4");
  test_io::RawTensor& shape = t.at("language_model.model.layers.2.mlp.experts.5.gate_proj.weight_shape");
  ASSERT_EQ(shape.dtype, "I64");
  shape = test_io::raw<int64_t>("I64", {2}, {64, 32});
  write("kimi_k25_int4", t);
  const std::string e = load_error();
  EXPECT_TRUE(has(e, "language_model.model.layers.2.mlp.experts.5.gate_proj.weight_shape' records shape [64, 32], "
                     "the config implies [64, 64]"))
      << e;
}

TEST_F(MoeLoaderDamaged, Int4ScaleWithTheWrongShape) {
  RawTensors t = test_io::read_dir(kModels / "kimi_k25_int4");
  test_io::RawTensor& s = t.at("language_model.model.layers.3.mlp.experts.2.down_proj.weight_scale");
  ASSERT_EQ(s.shape, (std::vector<int64_t>{64, 2}));
  s.shape = {32, 4};
  write("kimi_k25_int4", t);
  const std::string e = load_error();
  EXPECT_TRUE(has(e, "language_model.model.layers.3.mlp.experts.2.down_proj.weight_scale'")) << e;
  EXPECT_TRUE(has(e, "needs [64, 2]")) << e;
}

TEST_F(MoeLoaderDamaged, Int4CheckpointReadWithoutQuantizationConfig) {
  write("kimi_k25_int4", test_io::read_dir(kModels / "kimi_k25_int4"),
        [](json& c) { c["text_config"].erase("quantization_config"); });
  const std::string e = load_error();
  EXPECT_TRUE(has(e, "module 'language_model.model.layers.1.mlp.experts.0.gate_proj' is stored int4-packed")) << e;
}

TEST_F(MoeLoaderDamaged, ScoreCorrectionBiasIsRequired) {
  RawTensors t = test_io::read_dir(kModels / "deepseek_v3");
  ASSERT_EQ(t.erase("model.layers.2.mlp.gate.e_score_correction_bias"), 1u);
  write("deepseek_v3", t);
  const std::string e = load_error();
  EXPECT_TRUE(has(e, "model.layers.2.mlp.gate.e_score_correction_bias")) << e;
}

}  // namespace layertap
