// The shapes one tensor-parallel rank holds of a decoder (heads, kv heads, intermediate sizes and
// routed experts, read off the rank layout of src/model/rank_layout.hpp), and how each of its
// Linear weights is stored on the device: bf16, or packed (FP8 blocks, INT4 groups).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "kernels/moe_routing.hpp"
#include "kernels/quant_element.hpp"
#include "model/hf_config.hpp"
#include "model/rank_layout.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace layertap::cuda {

// What in `c` the CUDA backend does not implement ("" when it runs it all). Every family and
// format of docs/MODELS.md runs now; this names only limits of the kernels (e.g. an MLA head
// wider than the attention kernels take, more groups than the router kernel takes).
std::string unsupported_parts(const ModelConfig& c);

// How one Linear of this rank is stored on the device.
struct LinearStorage {
  enum class Kind { Bf16, Fp8Block, Int4Group };
  Kind kind = Kind::Bf16;
  // Int4Group: the scales' dtype; E8M0 is MXFP4 (e2m1 codes in the INT4 words' places, GPT-OSS)
  kernels::ScaleType scale = kernels::ScaleType::BF16;
};

// Where the packed storage of quantized Linears is decided.
enum class PackedSource {
  None,        // every Linear bf16 (uploaded from the float32 host slices)
  Checkpoint,  // as the checkpoint stores each module (FP8 by its dtype, INT4 by the config)
  Config,      // from the config alone (synthetic models): INT4 where the config's groups target a
               // module; FP8 blocks for every decoder Linear of an fp8 config (DeepSeek's layout)
};

struct LocalShape {
  std::int64_t hidden = 0, layers = 0, vocab = 0, head_dim = 0;  // head_dim: GQA's; 0 under MLA
  std::int64_t heads = 0, kv_heads = 0, inter = 0;  // this rank's query heads, kv heads, dense intermediate size
  bool qkv_bias = false;   // q/k/v biases (Qwen2, Llama attention_bias)
  bool o_bias = false;     // o_proj bias, on TP rank 0 only (added once, before the all-reduce)
  bool mlp_bias = false;   // gate/up biases
  bool down_bias = false;  // down_proj bias, on TP rank 0 only
  bool qk_norm = false;    // Qwen3 per-head q/k RMSNorm
  bool sinks = false;      // GPT-OSS attention sinks

  // MLA (every layer when set): this rank's `heads` heads; q_lora 0 = q_proj on the hidden state.
  bool mla = false;
  std::int64_t q_lora = 0, kv_lora = 0, nope = 0, rope_dim = 0, v_dim = 0;
  bool rope_interleave = false;
  bool mla_bias = false;    // q_a_proj and kv_a_proj_with_mqa biases
  float softmax_scale = 0;  // MlaConfig::softmax_scale

  // MoE layers: moe_layer[i]; routed experts [first_expert, first_expert + local_experts) of
  // `experts`, each of intermediate size expert_inter (whole, or this rank's slice); shared
  // experts sliced to shared_inter (0: none).
  std::vector<bool> moe_layer;
  std::int64_t experts = 0, top_k = 0, first_expert = 0, local_experts = 0, expert_inter = 0, shared_inter = 0;
  bool moe_whole = true;    // --moe-split experts (whole experts); false: every expert's intermediate slice
  kernels::RouteParams route;
  bool score_bias = false;  // e_score_correction_bias
  bool router_bias = false;  // the router's bias (GPT-OSS)
  // GPT-OSS: routed experts stacked in one module per projection, gate and up rows interleaved in
  // one Linear, with biases; the activation reads gate/up pairs.
  bool experts_interleaved = false;
  bool router_lo = false;   // the router needs a bf16 low part (its float32 weights are not all bf16 values)
  // Routed experts multiplied by the grouped GEMM as stored (grouped_experts.hpp): packed ones are
  // never expanded, so they get no slots in the dequantization scratch.
  bool experts_grouped = false;
  // Packed routed experts expanded into the dequantization scratch at once (0: all of a layer's).
  std::int64_t expert_group = 0;

  // Packed Linears by full module name (absent: bf16), and the format parameters.
  std::map<std::string, LinearStorage> packed;
  std::int64_t block_rows = 0, block_cols = 0, group = 0;
  std::string prefix;  // tensor-name prefix of the layers ("model.", "language_model.model.")
  int tp_rank = 0;
  // What the shape was made from: the rank layout that the device placement walks.
  ModelConfig config;
  TpShard shard;

  // GQA's widths of this rank's attention output and fused q|k|v rows (0 under MLA).
  std::int64_t q_dim() const { return heads * head_dim; }
  std::int64_t qkv_dim() const { return (heads + 2 * kv_heads) * head_dim; }
  std::int64_t mla_qk() const { return nope + rope_dim; }
  // A layer's row of the inv_freq table (Workspace::inv_freq, [layers, rope_freqs()]): half the
  // dims a head's RoPE spans, GQA's head_dim (its first rotary_dim rotate) or MLA's rope_dim.
  std::int64_t rope_freqs() const { return (mla ? rope_dim : head_dim) / 2; }
  bool any_moe() const;
  // MoE layers before layer `layer` (a MoE layer's index among them; moe_layers_before(layers): all).
  std::int64_t moe_layers_before(std::int64_t layer) const;
  bool any_dense_ffn() const;
  // Rows of the permuted-token buffers: every (token, choice) pair that can land on this rank.
  std::int64_t max_routed_rows(std::int64_t tokens) const;
  std::string module(std::int64_t layer, const std::string& suffix) const;  // full module name
  LinearStorage storage(const std::string& module) const;
  ModelSlices model_slices() const { return layertap::model_slices(config); }
  LayerSlices layer_slices(std::int64_t layer) const { return layertap::layer_slices(config, shard, layer); }

  // Checks divisibility (check_tp_divisibility) and derives the rank's shapes; `ckpt` is needed for
  // PackedSource::Checkpoint.
  static LocalShape of(const ModelConfig& c, const TpShard& shard, PackedSource packed = PackedSource::None,
                       const Checkpoint* ckpt = nullptr);
  // Matrix parameters of the decoder layers on this rank, as every token multiplies them: GQA q,
  // k, v, o or MLA's projections, dense gate/up/down, and for a MoE layer the router, top_k routed
  // experts' share on this rank (top_k / tp of an expert per token with whole experts, top_k
  // slices with the intermediate split) and the shared slice. The GEMM-bound FLOP count is 2 x
  // this per token (embedding, norms and biases excluded).
  std::int64_t layer_matmul_params() const;
};

}  // namespace layertap::cuda
