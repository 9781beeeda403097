// One rank's load plan for the CUDA backend (docs/GPU.md, "Loading and planning"): every window
// of the checkpoint this rank holds, where it goes in the resident device block, and how it is
// converted on the way (bf16 as stored, fp16/fp32 rounded to bf16, FP8 codes and INT4 words with
// their scales as stored). Pure host arithmetic over the config, the checkpoint's headers and the
// rank's layout (DeviceWeights' placements): it reads nothing but INT4 weight_shape values, so a
// login node without a GPU can plan and pre-read a job (weight_loader.hpp executes it).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/local_shape.hpp"
#include "model/packed_weights.hpp"
#include "model/quant_config.hpp"
#include "model/safetensors.hpp"
#include "model/stored_window.hpp"

namespace layertap::cuda {

struct WeightCopy {
  enum class Convert : std::uint8_t {
    AsStored,    // bytes as stored (bf16 tensors, FP8 codes, INT4 words, packed scales)
    ToBf16,      // fp32/fp16 to bf16 (round to nearest even, as float_to_bf16)
    ToFloat32,   // bf16/fp16/fp32 to float32
    RouterHigh,  // bf16(w)
    RouterLow,   // bf16(w - bf16(w))
  };
  StoredWindow src;
  Convert convert = Convert::AsStored;
  ValueRule check = ValueRule::Finite;  // model/stored_window.hpp: the rule both backends apply
  std::size_t dst = 0;        // byte offset in the resident block
  std::size_t dst_bytes = 0;  // src.rows rows of dst_bytes / src.rows bytes each
  // The window is a Linear stored x @ W (Llama-4's stacked experts): src.rows inputs of out values
  // each, written transposed as (out, src.rows) bf16.
  bool transpose = false;
};

struct LoadPlan {
  std::vector<WeightCopy> copies;
  std::size_t resident_bytes = 0;  // the block's size (DeviceWeights::Sizes::resident)
  std::size_t read_bytes = 0;      // bytes read from the checkpoint
  // What the rank holds, by stored form (bytes in the block).
  std::size_t bf16_bytes = 0;       // bf16 as stored
  std::size_t converted_bytes = 0;  // rounded to bf16 from fp32/fp16, router parts, float32 biases
  std::size_t fp8_bytes = 0, int4_bytes = 0, scale_bytes = 0;  // packed codes/words and their scales
  std::size_t files = 0;            // checkpoint files the rank reads from
};

// The plan for `shape` (LocalShape::of with PackedSource::Checkpoint on `ckpt`). Throws naming the
// tensor and file when a tensor is missing or has another shape or dtype than the layout implies,
// or when an INT4 weight_shape records another shape.
LoadPlan plan_load(const LocalShape& shape, const Checkpoint& ckpt, const QuantConfig& quant);

// This rank's shape for loading `ckpt`: Linears packed as the checkpoint stores them
// (PackedSource::Checkpoint), and a bf16 low part for the routers (LocalShape::router_lo) when any
// router holds a value bf16 does not represent (read unless stored as bf16).
LocalShape checkpoint_shape(const ModelConfig& config, const TpShard& shard, const Checkpoint& ckpt);

}  // namespace layertap::cuda
