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
void mla_attention(const MlaConfig& m, const MlaWeights& w, const Rope& rope, const float* h, int64_t T,
                   const std::vector<int64_t>& offsets, float* out);

}  // namespace layertap::cpu
