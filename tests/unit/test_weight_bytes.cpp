// host_weight_bytes (the memory check before loading) against what load_weights actually holds,
// on every fixture and tensor-parallel layout that divides it.
#include <gtest/gtest.h>

#include <filesystem>
#include <variant>

#include "core/error.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace layertap {
namespace {

namespace fs = std::filesystem;

std::size_t floats(const Linear& l) { return l.w.size() + l.b.size(); }
std::size_t floats(const MlpWeights& m) { return floats(m.gate) + floats(m.up) + floats(m.down); }

// Every float the loaded weights hold.
int64_t held_bytes(const ModelWeights& w) {
  std::size_t n = w.embed.size() + w.final_norm.size();
  for (const LayerWeights& l : w.layers) {
    n += l.input_norm.size() + l.pre_ffn_norm.size() + l.post_attn_norm.size() + l.post_ffn_norm.size();
    n += std::visit(
        [](const auto& a) -> std::size_t {
          if constexpr (std::is_same_v<std::decay_t<decltype(a)>, AttentionWeights>)
            return floats(a.q) + floats(a.k) + floats(a.v) + floats(a.o) + a.q_norm.size() + a.k_norm.size() +
                   a.sinks.size();
          else
            return floats(a.q) + floats(a.q_a) + a.q_a_norm.size() + floats(a.q_b) + floats(a.kv_a) +
                   a.kv_a_norm.size() + floats(a.kv_b) + floats(a.o);
        },
        l.attn);
    n += std::visit(
        [](const auto& f) -> std::size_t {
          if constexpr (std::is_same_v<std::decay_t<decltype(f)>, MlpWeights>) {
            return floats(f);
          } else {
            std::size_t e = floats(f.router) + f.score_bias.size() + (f.has_shared ? floats(f.shared) : 0);
            for (const MlpWeights& x : f.experts) e += floats(x);
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
