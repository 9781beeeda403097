// A dense decoder's weights as held by one tensor-parallel rank, in float32 on the host.
// Column-parallel layers (q/k/v, gate/up) keep a slice of output rows; row-parallel layers
// (o, down) keep a slice of input columns and are followed by one all-reduce.
#pragma once
#include <cstdint>
#include <vector>

#include "model/hf_config.hpp"
#include "model/safetensors.hpp"

namespace layertap {

struct TpShard {
  int rank = 0;
  int size = 1;
};

struct Linear {
  int64_t out = 0, in = 0;  // local shape
  std::vector<float> w;     // [out, in] (PyTorch layout: y = x @ w^T)
  std::vector<float> b;     // [out] or empty
};

struct AttentionWeights {
  int64_t heads = 0, kv_heads = 0;  // local counts
  Linear q, k, v, o;                // q: [heads*hd, H], k/v: [kv_heads*hd, H], o: [H, heads*hd]
  std::vector<float> q_norm, k_norm;  // [hd] (Qwen3) or empty
};

struct MlpWeights {
  Linear gate, up, down;  // gate/up: [I/tp, H], down: [H, I/tp]
};

struct LayerWeights {
  std::vector<float> input_norm;      // [H]
  std::vector<float> post_attn_norm;  // [H]
  AttentionWeights attn;
  MlpWeights mlp;
};

struct ModelWeights {
  std::vector<float> embed;       // [V, H], replicated
  std::vector<LayerWeights> layers;
  std::vector<float> final_norm;  // [H]
};

// Checks that `shard` divides heads, kv heads and intermediate size; throws naming the numbers.
void check_tp_divisibility(const ModelConfig& c, const TpShard& shard);

// Reads this rank's slice of every tensor the capture needs (the LM head is never read).
ModelWeights load_weights(const Checkpoint& ckpt, const ModelConfig& c, const TpShard& shard);

}  // namespace layertap
