// Multi-head latent attention (DeepSeek-V3, Kimi-K2) on the CPU, as transformers'
// DeepseekV3Attention computes it, on this rank's heads.
#pragma once
#include <cstdint>
#include <vector>

#include "backend/cpu/ops.hpp"
#include "model/hf_config.hpp"
#include "model/weights.hpp"

namespace layertap::cpu {

// h [T, H] (normed) -> out [T, H]: this rank's heads' share of o_proj, before the all-reduce.
// `rope` rotates qk_rope_head_dim dims in the checkpoint's layout (interleaved or half-split).
// `kept` [positions, kv_lora_rank + qk_rope_head_dim]: the normed latent and the rotated rope key of
// the sample in flight (model/packed_batch.hpp), as DeepSeek's inference keeps them; read when the
// batch continues that sample, replaced by what the next batch needs.
void mla_attention(const MlaConfig& m, const MlaWeights& w, const Rope& rope, const float* h,
                   const PackedBatch& batch, std::vector<float>& kept, float* out);

}  // namespace layertap::cpu
