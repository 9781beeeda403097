// The rank layout (model/rank_layout.hpp), the one description of what each tensor-parallel rank
// holds: over the ranks of a group, every split Linear's windows tile its full shape exactly once,
// whole Linears are whole, routed experts are dealt out once each, and a row-parallel bias lives
// on rank 0 only. Checked on every fixture config at every layout it allows, and on configs that
// exercise kv-head replication.
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <string>

#include "core/error.hpp"
#include "model/hf_config.hpp"
#include "model/rank_layout.hpp"

namespace layertap {
namespace {

namespace fs = std::filesystem;

struct Coverage {
  int64_t out_full = 0, in_full = 0;
  Split split = Split::Whole;
  std::map<int64_t, int64_t> spans;  // start -> length, along rows (Column) or columns (Row)
  int holders = 0;                   // ranks holding it (Whole: every one that holds it at all)
  int bias_holders = 0;
};

// Records each rank's windows of every Linear, by module (and expert, for stacked experts).
class GroupLayout {
 public:
  void add(const LinearSlice& l, int rank) {
    Coverage& c = modules_[l.expert < 0 ? l.module : cat(l.module, " expert ", l.expert)];
    if (c.holders == 0) {
      c.out_full = l.out_full;
      c.in_full = l.in_full;
      c.split = l.split;
    }
    SCOPED_TRACE(l.module + " rank " + std::to_string(rank));
    EXPECT_EQ(c.out_full, l.out_full);
    EXPECT_EQ(c.in_full, l.in_full);
    EXPECT_EQ(int(c.split), int(l.split));
    ++c.holders;
    c.bias_holders += l.bias ? 1 : 0;
    switch (l.split) {
      case Split::Whole:
        EXPECT_EQ(l.win.col0, 0);
        EXPECT_EQ(l.cols(), l.in_full);
        if (l.expert >= 0 && l.rows() < l.out_full) {  // Llama-4's stacked gate/up: two halves of one module
          record(c, l.win.row0, l.rows());
        } else {
          EXPECT_EQ(l.win.row0, 0);
          EXPECT_EQ(l.rows(), l.out_full);
        }
        break;
      case Split::Column:
        EXPECT_EQ(l.win.col0, 0);
        EXPECT_EQ(l.cols(), l.in_full);
        record(c, l.win.row0, l.rows());
        break;
      case Split::Row:
        EXPECT_EQ(l.win.row0, 0);
        EXPECT_EQ(l.rows(), l.out_full);
        record(c, l.win.col0, l.cols());
        if (rank != 0) {
          EXPECT_FALSE(l.bias) << "a row-parallel bias is added once, by rank 0";
        }
        break;
    }
  }

  // Split Linears: the spans tile [0, full) with no gap and no overlap, except that replicated kv
  // heads (k/v of GQA with fewer kv heads than ranks) repeat one span on `replicas` ranks.
  void check_tiles(int size, int kv_replicas) const {
    for (const auto& [module, c] : modules_) {
      SCOPED_TRACE(module);
      if (c.split == Split::Whole) {  // whole, or whole halves that tile the module on the rank holding it
        int64_t at = 0;
        for (const auto& [start, length] : c.spans) {
          EXPECT_EQ(start, at);
          at = start + length;
        }
        if (!c.spans.empty()) {
          EXPECT_EQ(at, c.out_full);
        }
        continue;
      }
      const bool kv = module.ends_with("self_attn.k_proj") || module.ends_with("self_attn.v_proj");
      const int64_t full = c.split == Split::Column ? c.out_full : c.in_full;
      int64_t at = 0;
      for (const auto& [start, length] : c.spans) {
        EXPECT_EQ(start, at) << "a gap or an overlap";
        at = start + length;
      }
      EXPECT_EQ(at, full) << "the windows do not reach the end";
      // Every rank holds the same number of windows (two of a stacked gate/up module: Llama-4's
      // gate and up halves), each span held once but for replicated kv heads.
      EXPECT_EQ(c.holders % size, 0);
      const int repeats = kv ? kv_replicas : 1;
      EXPECT_EQ(int64_t(c.spans.size()) * repeats, c.holders);
    }
  }

  const std::map<std::string, Coverage>& modules() const { return modules_; }

 private:
  static void record(Coverage& c, int64_t start, int64_t length) {
    EXPECT_GT(length, 0);
    const auto [it, fresh] = c.spans.emplace(start, length);
    if (!fresh) {
      EXPECT_EQ(it->second, length) << "two ranks hold different windows from " << start;
    }
  }
  std::map<std::string, Coverage> modules_;
};

// Checks the layout of `cfg` over a group of `size` ranks; returns false when the config does not
// divide at that size.
bool check_group(const ModelConfig& cfg, int size, MoeSplit split) {
  try {
    check_tp_counts(cfg, {0, size, split});
  } catch (const Error&) {
    return false;
  }
  for (int64_t i = 0; i < cfg.num_layers; ++i) {
    SCOPED_TRACE("layer " + std::to_string(i));
    GroupLayout group;
    std::set<int64_t> experts;
    int64_t expert_slots = 0;
    int64_t sink_heads = 0;  // GPT-OSS: each rank's heads' sinks, consecutive windows of [num_heads]
    for (int rank = 0; rank < size; ++rank) {
      const LayerSlices ls = layer_slices(cfg, {rank, size, split}, i);
      ls.for_each_linear([&](const LinearSlice& l) { group.add(l, rank); });
      if (const auto* g = std::get_if<GqaSlices>(&ls.attn); g && g->sinks) {
        EXPECT_EQ(g->sinks->first, sink_heads);
        EXPECT_EQ(g->sinks->size, g->heads);
        EXPECT_EQ(g->sinks->full, cfg.num_heads);
        sink_heads += g->sinks->size;
      }
      if (const auto* e = std::get_if<MoeSlices>(&ls.ffn)) {
        for (std::size_t x = 0; x < e->routed.size(); ++x) {
          const MoeTensorNames& names = cfg.moe->names;
          const int64_t expert = e->first_expert + int64_t(x);
          // Stacked (GPT-OSS): one tensor of every expert, this expert's matrix by index.
          const bool stacked = names.experts != MoeTensorNames::Experts::PerExpert;
          const std::string base = stacked ? cat(cfg.tensor_prefix, "layers.", i, ".", names.block, "experts.")
                                                 : cat(cfg.tensor_prefix, "layers.", i, ".", names.block, "experts.",
                                                       expert, ".");
          EXPECT_EQ(e->routed[x].gate.module, base + names.gate);
          EXPECT_EQ(e->routed[x].down.module, base + names.down);
          EXPECT_EQ(e->routed[x].gate.expert, stacked ? expert : -1);
          EXPECT_EQ(interleaved(e->routed[x]), names.experts == MoeTensorNames::Experts::StackedInterleaved);
          experts.insert(e->first_expert + int64_t(x));
        }
        expert_slots += int64_t(e->routed.size());
      }
    }
    EXPECT_EQ(sink_heads, cfg.attention_sinks ? cfg.num_heads : 0);
    const int kv_replicas = !cfg.mla && cfg.num_kv_heads < size ? size / int(cfg.num_kv_heads) : 1;
    group.check_tiles(size, kv_replicas);
    if (cfg.is_moe_layer(i)) {
      const int64_t E = cfg.moe->num_experts;
      EXPECT_EQ(int64_t(experts.size()), E) << "every routed expert on some rank";
      EXPECT_EQ(expert_slots, split == MoeSplit::Experts ? E : E * size) << "whole experts dealt out once each";
    }
  }
  return true;
}

TEST(RankLayout, WindowsTileEveryLinearOverTheGroup) {
  int groups = 0;
  for (const auto& entry : fs::directory_iterator(fs::path(LAYERTAP_FIXTURES) / "models")) {
    const ModelConfig cfg = load_model_config((entry.path() / "config.json").string());
    for (int size : {1, 2, 4})
      for (MoeSplit split : {MoeSplit::Experts, MoeSplit::Intermediate}) {
        if (!cfg.moe && split == MoeSplit::Intermediate) continue;
        SCOPED_TRACE(entry.path().filename().string() + " tp " + std::to_string(size) + " " + moe_split_name(split));
        groups += check_group(cfg, size, split) ? 1 : 0;
      }
  }
  EXPECT_GT(groups, 30);
}

TEST(RankLayout, ReplicatedKvHeadsAreSharedByConsecutiveRanks) {
  // 8 query heads and 2 kv heads at TP 8: ranks 0-3 hold kv head 0, ranks 4-7 kv head 1.
  const fs::path dir = fs::path(LAYERTAP_FIXTURES) / "models" / "llama";
  ModelConfig cfg = load_model_config((dir / "config.json").string());
  cfg.num_heads = 8;
  cfg.num_kv_heads = 2;
  cfg.intermediate_size = 64;
  for (int rank = 0; rank < 8; ++rank) {
    const GqaSlices g = std::get<GqaSlices>(layer_slices(cfg, {rank, 8}, 0).attn);
    EXPECT_EQ(g.heads, 1);
    EXPECT_EQ(g.kv_heads, 1);
    EXPECT_EQ(g.first_kv_head, rank / 4) << "rank " << rank;
    EXPECT_EQ(g.k.win.row0, (rank / 4) * cfg.head_dim);
    EXPECT_EQ(g.q.win.row0, rank * cfg.head_dim);
  }
  EXPECT_TRUE(check_group(cfg, 8, MoeSplit::Experts));
}

TEST(RankLayout, CountsThatDoNotDivideAreRefusedByName) {
  const fs::path dir = fs::path(LAYERTAP_FIXTURES) / "models" / "llama";
  ModelConfig cfg = load_model_config((dir / "config.json").string());
  cfg.num_heads = 6;
  try {
    check_tp_counts(cfg, {0, 4});
    FAIL() << "6 heads at TP 4 accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("num_attention_heads 6"), std::string::npos) << e.what();
  }
  EXPECT_THROW(check_tp_counts(cfg, {4, 4}), Error);  // a rank outside the group
}

}  // namespace
}  // namespace layertap
