// What one tensor-parallel rank holds of a decoder: for every tensor the capture reads, the
// checkpoint tensor, its full shape, this rank's window of it and how it is split, in the layer's
// one structure (model/layer_parts.hpp). The divisibility checks, the CPU loader (load_weights),
// the host byte count, and the CUDA backend's device placement and load plan all walk it. Host only:
// it needs the config and nothing else (no checkpoint, no GPU).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "model/hf_config.hpp"
#include "model/layer_parts.hpp"
#include "model/quant_formats.hpp"

namespace layertap {

// How the routed experts of a MoE layer are laid out over a tensor-parallel group.
enum class MoeSplit {
  Experts,       // whole experts: rank r holds experts [r*E/tp, (r+1)*E/tp)
  Intermediate,  // every expert, sliced along moe_intermediate_size like a dense MLP
};
MoeSplit parse_moe_split(const std::string& s);  // "experts" | "intermediate"
const char* moe_split_name(MoeSplit s);

struct TpShard {
  int rank = 0;
  int size = 1;
  MoeSplit moe_split = MoeSplit::Experts;
};

// How a Linear is divided over the group. Whole: the rank holds all of it (a replicated
// projection, or one of its whole experts); Column: a slice of output rows; Row: a slice of input
// columns, followed by one all-reduce.
enum class Split { Whole, Column, Row };

// This rank's part of one Linear module: window `win` of `module`.weight [out_full, in_full].
struct LinearSlice {
  std::string module;  // tensor-name prefix, e.g. "model.layers.3.self_attn.q_proj"
  std::int64_t out_full = 0, in_full = 0;
  quant::Window win;  // Whole: all of it; Column: rows; Row: columns
  Split split = Split::Whole;
  // The rank holds `module`.bias: the window's rows of it, or for a row-parallel Linear all of it
  // on rank 0 only (the bias is added once, after the all-reduce).
  bool bias = false;
  // Stacked experts (GPT-OSS, Llama-4): `module` holds every expert and this is expert `expert`'s
  // matrix (its bias row `expert` of `module`_bias [E, out_full]); -1: a module of its own.
  std::int64_t expert = -1;
  // Stored as x @ W: expert `expert`'s [in_full, out_full] (Llama-4's plain stacked experts), the
  // window read transposed.
  bool transposed = false;

  std::int64_t rows() const { return win.rows; }
  std::int64_t cols() const { return win.cols; }
  std::int64_t bias_values() const { return bias ? (split == Split::Row ? out_full : win.rows) : 0; }
};

// A 1-D tensor: the whole of `tensor` [size] (norm weights), or the window [first, first + size)
// of `tensor` [full] (attention sinks, a rank's heads').
struct VectorSlice {
  std::string tensor;
  std::int64_t size = 0;
  std::int64_t first = 0, full = 0;  // full 0: the whole tensor
  std::int64_t full_size() const { return full > 0 ? full : size; }
};

// The rank layout's instance of the layer's parts (model/layer_parts.hpp): every tensor as the
// window of the checkpoint tensor this rank holds.
struct Slices {
  using Linear = LinearSlice;
  using Vector = VectorSlice;
};
using GqaSlices = GqaParts<Slices>;
using MlaSlices = MlaParts<Slices>;
using MlpSlices = MlpParts<Slices>;
using MoeSlices = MoeParts<Slices>;
using LayerSlices = LayerParts<Slices>;

// GPT-OSS's stacked experts: gate and up rows interleaved in one Linear, `gate`, with `up` empty.
inline bool interleaved(const MlpSlices& m) { return m.up.module.empty(); }
// This rank's intermediate size of `m`.
inline std::int64_t intermediate(const MlpSlices& m) { return interleaved(m) ? m.gate.rows() / 2 : m.gate.rows(); }

// The replicated tensors outside the layers.
struct ModelSlices {
  std::string embed;     // [vocab, H]
  VectorSlice final_norm;  // [H]
};

// Checks that `shard` divides what it splits (heads, kv heads, intermediate sizes, routed experts
// or their intermediate size); throws naming the numbers. layer_slices needs it to hold.
void check_tp_counts(const ModelConfig& c, const TpShard& shard);

ModelSlices model_slices(const ModelConfig& c);
// Layer `layer`'s slices on this rank (built one layer at a time: a config may hold 2^20 expert
// modules). Expects check_tp_counts to hold.
LayerSlices layer_slices(const ModelConfig& c, const TpShard& shard, std::int64_t layer);

}  // namespace layertap
