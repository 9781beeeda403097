// What one tensor-parallel rank holds of a decoder: for every tensor the capture reads, the
// checkpoint tensor, its full shape, this rank's window of it and how it is split. The one
// description of the rank's slices: the divisibility checks, the CPU loader (load_weights), the
// host byte count, and the CUDA backend's device placement and load plan all walk it. Host only:
// it needs the config and nothing else (no checkpoint, no GPU).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "model/hf_config.hpp"
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

// A gated MLP: gate and up column-parallel, down row-parallel (or all three whole). GPT-OSS's
// experts store gate and up as one Linear [2I, H] with gate rows at even and up rows at odd
// indices: `gate` is then that Linear's window (2 rows per intermediate index of the slice) and
// `up` is empty. (Llama-4's stacked gate and up are two windows of one module: two slices.)
struct MlpSlices {
  LinearSlice gate, up, down;
  bool interleaved() const { return up.module.empty(); }
  std::int64_t intermediate() const { return interleaved() ? gate.rows() / 2 : gate.rows(); }  // this rank's
};

// Grouped-query attention. Fewer kv heads than ranks: each kv head is replicated on
// size / num_kv_heads ranks (as Megatron and vLLM do).
struct GqaSlices {
  std::int64_t heads = 0, kv_heads = 0;  // this rank's
  std::int64_t first_kv_head = 0;        // of the model's kv heads
  LinearSlice q, k, v, o;                // q: [heads*hd, H], k/v: [kv_heads*hd, H], o: [H, heads*hd]
  std::optional<VectorSlice> q_norm, k_norm;  // [hd] (Qwen3)
  std::optional<VectorSlice> sinks;           // [heads] of self_attn.sinks [num_heads] (GPT-OSS)
};

// Multi-head latent attention: heads split (q_b or q_proj and kv_b by head rows, o_proj by head
// columns); the latent projections and their norms replicated.
struct MlaSlices {
  std::int64_t heads = 0;              // this rank's
  std::optional<LinearSlice> q;        // q_proj [heads*qk, H] when q_lora_rank is 0
  std::optional<LinearSlice> q_a;      // [q_lora, H], replicated
  std::optional<VectorSlice> q_a_norm;  // [q_lora]
  std::optional<LinearSlice> q_b;      // [heads*qk, q_lora]
  LinearSlice kv_a;                    // kv_a_proj_with_mqa [kv_lora + rope, H], replicated
  VectorSlice kv_a_norm;               // [kv_lora]
  LinearSlice kv_b;                    // [heads*(nope+v), kv_lora]
  LinearSlice o;                       // [H, heads*v], row-parallel
};

// A MoE block: the router replicated, this rank's routed experts (whole, or every expert's
// intermediate slice) and the shared experts as one intermediate-sliced MLP.
struct MoeSlices {
  std::string router;                     // `router` [experts, H], float32 logits as transformers
  std::optional<std::string> router_bias;  // [experts] (GPT-OSS)
  std::int64_t experts = 0;               // the model's routed experts
  std::optional<std::string> score_bias;  // e_score_correction_bias [experts]
  std::int64_t first_expert = 0;          // routed[i] is expert first_expert + i
  std::vector<MlpSlices> routed;
  std::optional<MlpSlices> shared;
};

struct LayerSlices {
  VectorSlice input_norm, pre_ffn_norm;  // [H] the attention's and the FFN's input norms
  // [H] with sandwich norms (Gemma-3): the attention's and the FFN's outputs normed before their
  // residual adds.
  std::optional<VectorSlice> post_attn_norm, post_ffn_norm;
  std::variant<GqaSlices, MlaSlices> attn;
  std::variant<MlpSlices, MoeSlices> ffn;

  // Every Linear of the layer in checkpoint order (attention, then the MLP or the experts).
  template <class F>
  void for_each_linear(F&& f) const;
  // Every 1-D weight of the layer but the MoE router's (the layer's, q/k or latent norms, sinks).
  template <class F>
  void for_each_vector(F&& f) const;
};

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

template <class F>
void LayerSlices::for_each_linear(F&& f) const {
  if (const auto* g = std::get_if<GqaSlices>(&attn)) {
    for (const LinearSlice* l : {&g->q, &g->k, &g->v, &g->o}) f(*l);
  } else {
    const MlaSlices& m = std::get<MlaSlices>(attn);
    for (const auto* l : {&m.q_a, &m.q_b, &m.q})
      if (*l) f(**l);
    for (const LinearSlice* l : {&m.kv_a, &m.kv_b, &m.o}) f(*l);
  }
  const auto mlp = [&](const MlpSlices& m) {
    f(m.gate);
    if (!m.interleaved()) f(m.up);
    f(m.down);
  };
  if (const auto* d = std::get_if<MlpSlices>(&ffn)) {
    mlp(*d);
  } else {
    const MoeSlices& e = std::get<MoeSlices>(ffn);
    for (const MlpSlices& x : e.routed) mlp(x);
    if (e.shared) mlp(*e.shared);
  }
}

template <class F>
void LayerSlices::for_each_vector(F&& f) const {
  for (const VectorSlice* v : {&input_norm, &pre_ffn_norm}) f(*v);
  for (const auto* v : {&post_attn_norm, &post_ffn_norm})
    if (*v) f(**v);
  if (const auto* g = std::get_if<GqaSlices>(&attn)) {
    for (const auto* v : {&g->q_norm, &g->k_norm, &g->sinks})
      if (*v) f(**v);
  } else {
    const MlaSlices& m = std::get<MlaSlices>(attn);
    if (m.q_a_norm) f(*m.q_a_norm);
    f(m.kv_a_norm);
  }
}

}  // namespace layertap
