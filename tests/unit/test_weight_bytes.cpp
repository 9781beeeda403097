// host_weight_bytes (the memory check before loading) against what load_weights actually holds,
// on every fixture and tensor-parallel layout that divides it.
#include <gtest/gtest.h>

#include <filesystem>
#include <optional>
#include <variant>

#include "core/error.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace layertap {
namespace {

namespace fs = std::filesystem;

std::size_t floats(const Linear& l) { return l.w.size() + l.b.size(); }
std::size_t floats(const std::vector<float>& v) { return v.size(); }
std::size_t floats(const MlpWeights& m) { return floats(m.gate) + floats(m.up) + floats(m.down); }
template <class X>
std::size_t floats(const std::optional<X>& x) {
  return x ? floats(*x) : 0;
}

// Every float the loaded weights hold, field by field.
int64_t held_bytes(const ModelWeights& w) {
  std::size_t n = w.embed.size() + w.final_norm.size();
  for (const LayerWeights& l : w.layers) {
    n += floats(l.input_norm) + floats(l.pre_ffn_norm) + floats(l.post_attn_norm) + floats(l.post_ffn_norm);
    n += std::visit(
        [](const auto& a) -> std::size_t {
          if constexpr (std::is_same_v<std::decay_t<decltype(a)>, GqaWeights>)
            return floats(a.q) + floats(a.k) + floats(a.v) + floats(a.o) + floats(a.q_norm) + floats(a.k_norm) +
                   floats(a.sinks);
          else
            return floats(a.q) + floats(a.q_a) + floats(a.q_a_norm) + floats(a.q_b) + floats(a.kv_a) +
                   floats(a.kv_a_norm) + floats(a.kv_b) + floats(a.o);
        },
        l.attn);
    n += std::visit(
        [](const auto& f) -> std::size_t {
          if constexpr (std::is_same_v<std::decay_t<decltype(f)>, MlpWeights>) {
            return floats(f);
          } else {
            std::size_t e = floats(f.router) + floats(f.score_bias) + floats(f.shared);
            for (const MlpWeights& x : f.routed) e += floats(x);
            return e;
          }
        },
        l.ffn);
  }
  return int64_t(n * sizeof(float));
}

TEST(WeightBytes, EstimateEqualsWhatEachRankHolds) {
  int layouts = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(LAYERTAP_FIXTURES) / "models")) {
    const ModelConfig cfg = load_model_config((entry.path() / "config.json").string());
    const Checkpoint ck(checkpoint_files(entry.path().string()));
    for (int size : {1, 2, 4})
      for (MoeSplit split : {MoeSplit::Experts, MoeSplit::Intermediate})
        for (int rank : {0, size - 1}) {
          const TpShard shard{rank, size, split};
          try {
            check_tp_divisibility(cfg, shard);
          } catch (const Error&) {
            continue;  // a layout this model does not allow
          }
          SCOPED_TRACE(entry.path().filename().string() + " rank " + std::to_string(rank) + " of " +
                       std::to_string(size) + " " + moe_split_name(split));
          EXPECT_EQ(host_weight_bytes(cfg, shard), held_bytes(load_weights(ck, cfg, shard)));
          ++layouts;
        }
  }
  EXPECT_GT(layouts, 40);  // every fixture, most layouts
}

}  // namespace
}  // namespace layertap
