// A decoder's weights resident on one GPU: this tensor-parallel rank's slice, in one allocation.
// Plain Linears are bf16, with q/k/v fused into one matrix and gate/up into another (one GEMM
// each). Quantized Linears stay packed as the checkpoint stores them (FP8 blocks + float32 scales,
// INT4 words + group scales); before a layer runs, its packed Linears are expanded into a bf16
// scratch and the layer's GEMMs read them there: routed experts a group at a time into slots
// (LocalShape::expert_group of them), the rest of the layer at once.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/arena.hpp"
#include "backend/cuda/cuda_resources.hpp"
#include "backend/cuda/local_shape.hpp"
#include "model/quant_config.hpp"
#include "model/quant_formats.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace layertap::cuda {

struct DeviceLinear {
  __nv_bfloat16* w = nullptr;  // (out, in), y = x @ w^T: resident, or in the scratch (packed)
  __nv_bfloat16* b = nullptr;  // (out) or null
  std::int64_t out = 0, in = 0;
  bool packed = false;  // w is in the scratch, filled from the layer's PackedPieces
  bool biased = false;  // has a bias (b is null in a layout without memory)
};

// Rows of a DeviceLinear stored packed: one checkpoint module's window.
struct PackedPiece {
  LinearStorage storage;
  std::byte* data = nullptr;    // device: FP8 codes (rows, cols) or INT4 words (rows, ceil(cols / 8))
  std::byte* scales = nullptr;  // device: the window's scales (see PackedLinear)
  std::int64_t data_bytes = 0, scale_bytes = 0;
  std::int64_t rows = 0, cols = 0, row_phase = 0, col_phase = 0;
  std::int64_t block_rows = 0, block_cols = 0, group = 0;  // Fp8Block; Int4Group
  __nv_bfloat16* dst = nullptr;  // (rows, cols) inside the scratch
  std::int64_t expert = -1;      // the local routed expert it belongs to (its group's slot); -1: the layer's part
  std::string module;            // where it comes from: module's [out_full, in_full] weight, window `win`
  std::int64_t stacked = -1;     // module stacks every expert (GPT-OSS): this expert's matrix; -1: its own
  std::int64_t out_full = 0, in_full = 0;
  quant::Window win;
};

// What fills one range of the resident block: recorded by DeviceWeights::place for every tensor it
// places, so the load plan (load_plan.hpp) and the layout cannot disagree.
struct Placement {
  enum class Fill {
    Bf16,          // window `win` of tensor `tensor` ([out_full, in_full]; 1-D: out_full 1), as bf16
    PackedData,    // module `tensor`'s stored FP8 codes or INT4 words of window `win`
    PackedScales,  // their scales, as stored
    RouterHigh,    // bf16(w) of the router weight `tensor`
    RouterLow,     // bf16(w - bf16(w))
    Float32,       // window `win` of tensor `tensor` as float32 (e_score_correction_bias, router bias, sinks)
  };
  Fill fill = Fill::Bf16;
  std::string tensor;  // tensor name; the module name for Packed*
  std::int64_t expert = -1;  // a module stacking every expert (GPT-OSS, Llama-4): this expert's matrix
  bool transposed = false;   // Bf16 of a Linear stored x @ W ([in, out], Llama-4's experts): read transposed
  bool vector = false;  // a 1-D tensor [in_full]
  bool linear = false;  // a Linear module's weight (Bf16) or packed parts
  std::int64_t out_full = 1, in_full = 0;
  quant::Window win;
  std::size_t offset = 0, bytes = 0;  // in the resident block
};

struct DeviceMla {
  DeviceLinear q;                       // q_proj (heads * qk, H), when q_lora == 0
  DeviceLinear q_a;                     // (q_lora, H), replicated
  __nv_bfloat16* q_a_norm = nullptr;    // (q_lora)
  DeviceLinear q_b;                     // (heads * qk, q_lora)
  DeviceLinear kv_a;                    // kv_a_proj_with_mqa (kv_lora + rope, H), replicated
  __nv_bfloat16* kv_a_norm = nullptr;   // (kv_lora)
  DeviceLinear kv_b;                    // (heads * (nope + v), kv_lora)
  DeviceLinear o;                       // (H, heads * v), row-parallel
};

struct DeviceMoe {
  __nv_bfloat16* router = nullptr;     // (E, H): bf16(w)
  __nv_bfloat16* router_lo = nullptr;  // (E, H): bf16(w - bf16(w)), when the weights are not all bf16 values
  float* score_bias = nullptr;         // (E) e_score_correction_bias, or null
  float* router_bias = nullptr;        // (E) the router's bias (GPT-OSS), or null
  // [local experts] (2 Ie, H): gate rows, then up rows; GPT-OSS's stacked experts as stored, gate and
  // up rows interleaved (LocalShape::experts_interleaved).
  std::vector<DeviceLinear> gate_up;
  std::vector<DeviceLinear> down;      // [local experts] (H, Ie)
  DeviceLinear shared_gate_up;         // (2 Is, H), w null without shared experts
  DeviceLinear shared_down;            // (H, Is)
};

struct DeviceLayer {
  __nv_bfloat16* input_norm = nullptr;      // (H)
  __nv_bfloat16* pre_ffn_norm = nullptr;  // (H)
  __nv_bfloat16* post_attn_norm = nullptr;  // (H) sandwich norms (Gemma-3), or null
  __nv_bfloat16* post_ffn_norm = nullptr;   // (H)
  // GQA
  __nv_bfloat16* q_norm = nullptr;  // (hd) Qwen3, else null
  __nv_bfloat16* k_norm = nullptr;  // (hd) Qwen3, else null
  float* sinks = nullptr;           // (heads) this rank's heads' attention sinks (GPT-OSS), else null
  DeviceLinear qkv;                 // ((heads + 2 kv_heads) * hd, H): q rows, then k rows, then v rows
  DeviceLinear o;                   // (H, heads * hd)
  // MLA
  DeviceMla mla;
  // FFN: dense, or MoE
  bool moe = false;
  DeviceLinear gate_up;  // (2 I, H): gate rows, then up rows (I = this rank's intermediate size)
  DeviceLinear down;     // (H, I)
  DeviceMoe experts;
  // Packed Linears of this layer, expanded into the scratch by DeviceWeights::dequantize.
  std::vector<PackedPiece> packed;
};

struct LoadPlan;       // load_plan.hpp
struct LoaderOptions;  // weight_loader.hpp
struct LoadStats;      // weight_loader.hpp

class DeviceWeights {
 public:
  struct Sizes {
    std::size_t resident = 0;     // the one allocation: bf16 tensors, packed bytes, router, biases
    std::size_t packed = 0;       // of which packed weights (codes, words and their scales)
    std::size_t scratch = 0;      // the dequantization scratch: layer_scratch + expert_group slots
    std::size_t layer_scratch = 0;    // bf16 expansion of the largest layer's packed Linears but its routed experts
    std::int64_t scratch_layer = -1;  // that layer (-1: none packed)
    std::size_t expert_scratch = 0;   // bf16 expansion of one packed routed expert (0: none packed)
    std::int64_t expert_group = 0;    // experts expanded at once (shape.expert_group, or all of a layer's)
  };
  static Sizes sizes(const LocalShape& shape);
  // The layout alone (every device pointer null): the tensors, Linears and packed pieces that
  // `shape` places, with their modules and windows (tests, sizing). Needs no GPU.
  static DeviceWeights layout(const LocalShape& shape);
  // Device bytes of the resident weights of `shape` (alignment padding included).
  static std::size_t bytes(const LocalShape& shape);

  // This rank's float32 host slices (load_weights), converted to bf16 once and copied to the
  // current device; the Linears `shape` holds packed are read from `ckpt` as stored instead
  // (ckpt and quant may be null when nothing is packed). Throws naming the tensor when a slice's
  // shape does not match `shape`.
  static DeviceWeights upload(const LocalShape& shape, const ModelWeights& host, const Checkpoint* ckpt,
                              const QuantConfig* quant);
  // Seeded random weights made on the current device, enqueued on `stream`: linear weights with
  // variance 1/in (packed ones: random codes or nibbles with scales that give that variance),
  // biases +-0.1, norm weights 1 +- 0.1, embedding +-1, router bias +-0.01. Nothing of the size
  // of the model touches the host.
  static DeviceWeights random(const LocalShape& shape, std::uint64_t seed, cudaStream_t stream);

  // Every range of the resident block and what fills it, in placement order (no pointers needed).
  const std::vector<Placement>& placements() const { return placements_; }

  // The resident block that DeviceWeights::upload copies to the device, made in host memory from
  // this rank's float32 host slices (and `ckpt` for packed Linears): the reference that a load
  // plan's image is compared with byte for byte. Needs no GPU.
  static std::vector<std::byte> reference_image(const LocalShape& shape, const ModelWeights& host,
                                                const Checkpoint* ckpt, const QuantConfig* quant);
  // The resident block from a load plan, read from the checkpoint in the weights' stored form
  // through a ring of pinned staging buffers straight to the current device (no float32 copy).
  static DeviceWeights load(const LocalShape& shape, const LoadPlan& plan, const LoaderOptions& options,
                            LoadStats* stats = nullptr);

  // Expands layer i's packed Linears but its routed experts into the scratch (enqueued on `stream`).
  void dequantize(std::int64_t layer, cudaStream_t stream) const;
  // Expands the packed routed experts [first, last) of layer i (one group: last - first <=
  // sizes().expert_group) into their slots, overwriting the previous group's.
  void dequantize_experts(std::int64_t layer, std::int64_t first, std::int64_t last, cudaStream_t stream) const;
  const Sizes& sizes() const { return sizes_; }
  // The resident block (sizes().resident bytes on the device; padding between tensors zero).
  const std::byte* block() const { return memory_.data(); }

  __nv_bfloat16* embed = nullptr;       // (V, H)
  __nv_bfloat16* final_norm = nullptr;  // (H)
  std::vector<DeviceLayer> layers;      // (L)

 private:
  DeviceWeights() = default;
  // Places every tensor of `shape`: resident ones in `resident`; each layer's expanded packed
  // Linears from the start of `scratch_base`, its routed experts' in slots after `counted`'s
  // layer_scratch (counting only, filling sizes_, when the arenas have no memory).
  void place(Arena& resident, std::byte* scratch_base, const Sizes& counted, const LocalShape& shape);
  static DeviceWeights allocate(const LocalShape& shape);

  Sizes sizes_;
  std::vector<Placement> placements_;
  DeviceMemory memory_;
  DeviceMemory scratch_;
};

}  // namespace layertap::cuda
