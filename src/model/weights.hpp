// A decoder's weights as held by one tensor-parallel rank, in float32 on the host: the slices
// model/rank_layout.hpp describes, read from the checkpoint.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/hf_config.hpp"
#include "model/layer_parts.hpp"
#include "model/rank_layout.hpp"
#include "model/safetensors.hpp"

namespace layertap {

struct Linear {
  int64_t out = 0, in = 0;  // local shape
  std::vector<float> w;     // [out, in] (PyTorch layout: y = x @ w^T)
  std::vector<float> b;     // [out] or empty
};

// The host's instance of the layer's parts (model/layer_parts.hpp): this rank's slice of every
// tensor in float32, local shapes. Interleaved gate/up (GPT-OSS) are split into gate and up.
struct HostTensors {
  using Linear = layertap::Linear;
  using Vector = std::vector<float>;
};
using GqaWeights = GqaParts<HostTensors>;
using MlaWeights = MlaParts<HostTensors>;
using MlpWeights = MlpParts<HostTensors>;
using MoeWeights = MoeParts<HostTensors>;
using LayerWeights = LayerParts<HostTensors>;

struct ModelWeights {
  std::vector<float> embed;       // [V, H], replicated
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [H]
};

// Checks, before any weight is read, that `shard` divides what it splits (check_tp_counts) and
// that every slice of the rank layout starts and ends on an FP8 block or INT4 group boundary.
// Throws naming the numbers.
void check_tp_divisibility(const ModelConfig& c, const TpShard& shard);

// Reads this rank's slice of every tensor the capture needs (the LM head, multi-token-prediction
// layers and vision tower are never read), decoding quantized weights to float32.
ModelWeights load_weights(const Checkpoint& ckpt, const ModelConfig& c, const TpShard& shard);

// Bytes of float32 that load_weights will hold for this rank, from the rank layout alone (exactly
// the sum of its vectors): checked against the host's memory before anything is read.
int64_t host_weight_bytes(const ModelConfig& c, const TpShard& shard);

}  // namespace layertap
