// A decoder's weights as held by one tensor-parallel rank, in float32 on the host: the slices
// model/rank_layout.hpp describes, read from the checkpoint.
#pragma once
#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "model/hf_config.hpp"
#include "model/rank_layout.hpp"
#include "model/safetensors.hpp"

namespace layertap {

struct Linear {
  int64_t out = 0, in = 0;  // local shape
  std::vector<float> w;     // [out, in] (PyTorch layout: y = x @ w^T)
  std::vector<float> b;     // [out] or empty
};

// Grouped-query attention (Llama, Mistral, Qwen2/3, Qwen3-MoE).
struct AttentionWeights {
  int64_t heads = 0, kv_heads = 0;  // local counts
  Linear q, k, v, o;                // q: [heads*hd, H], k/v: [kv_heads*hd, H], o: [H, heads*hd]
  std::vector<float> q_norm, k_norm;  // [hd] (Qwen3) or empty
  std::vector<float> sinks;           // [heads] (GPT-OSS) or empty
};

// Multi-head latent attention on this rank's heads (qk = nope + rope dims per head).
struct MlaWeights {
  int64_t heads = 0;             // local
  Linear q;                      // q_lora_rank 0: q_proj [heads*qk, H]
  Linear q_a;                    // replicated [q_lora, H]
  std::vector<float> q_a_norm;   // [q_lora]
  Linear q_b;                    // [heads*qk, q_lora]
  Linear kv_a;                   // replicated kv_a_proj_with_mqa [kv_lora + rope, H]
  std::vector<float> kv_a_norm;  // [kv_lora]
  Linear kv_b;                   // [heads*(nope+v), kv_lora]
  Linear o;                      // row-parallel [H, heads*v]
};

struct MlpWeights {
  Linear gate, up, down;  // gate/up: [I/tp, H], down: [H, I/tp]
};

struct MoeWeights {
  Linear router;                  // [E, H] (+ bias [E], GPT-OSS), replicated (float32 logits, as transformers)
  std::vector<float> score_bias;  // [E] e_score_correction_bias, or empty
  int64_t first_expert = 0;       // experts[i] is expert first_expert + i
  std::vector<MlpWeights> experts;  // this rank's experts (whole or intermediate slices)
  bool has_shared = false;
  MlpWeights shared;              // shared experts as one MLP, intermediate-sliced
};

struct LayerWeights {
  std::vector<float> input_norm;    // [H]
  std::vector<float> pre_ffn_norm;  // [H]
  std::vector<float> post_attn_norm, post_ffn_norm;  // [H] sandwich norms (Gemma-3), or empty
  std::variant<AttentionWeights, MlaWeights> attn;
  std::variant<MlpWeights, MoeWeights> ffn;
};

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
