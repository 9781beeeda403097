// Mixture-of-experts FFN on the CPU: routing exactly as transformers' DeepseekV3TopkRouter
// (noaux_tc) and Qwen3MoeTopKRouter compute it, then this rank's experts on their tokens.
#pragma once
#include <cstdint>
#include <vector>

#include "model/hf_config.hpp"
#include "model/weights.hpp"

namespace layertap::cpu {

// The top-k choice of every token: experts[t*k + j] with weight weights[t*k + j].
struct Routing {
  int64_t k = 0;
  std::vector<int32_t> experts;  // [T, k]
  std::vector<float> weights;    // [T, k]
};

// Routes h [T, H] with the (replicated) router: every rank computes the same choice.
Routing route(const MoeConfig& m, const MoeWeights& w, const float* h, int64_t T, int64_t H);

// out [T, H] = this rank's share of the MoE block for h [T, H]: the routed experts it holds,
// weighted, plus its slice of the shared experts. The caller's all-reduce sums the shares.
// Returns the routing it used.
Routing moe_ffn(const MoeConfig& m, const MoeWeights& w, const float* h, int64_t T, int64_t H, float* out);

}  // namespace layertap::cpu
