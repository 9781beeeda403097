// Mixture-of-experts FFN on the CPU: routing exactly as transformers' DeepseekV3TopkRouter
// (noaux_tc), Qwen3MoeTopKRouter, GptOssTopKRouter and Llama4Router compute it, then this rank's
// experts on their tokens.
#pragma once
#include <cstdint>
#include <string>
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

// The routing of h [T, H] with the experts given instead of chosen: `experts` [T, k] (a bf16
// backend's recorded choice), weighted as `route` weights its own choice (the scores of these
// experts, renormalised and scaled alike). Throws naming the token when an expert is outside
// [0, E) or repeats within a token.
Routing route_given(const MoeConfig& m, const MoeWeights& w, const float* h, int64_t T, int64_t H,
                    const int32_t* experts);

// Whether a recorded choice is one a forward within `state_bound` of this float32 one could have
// made where this one routes differently: its router input h moves by up to state_bound * |h|,
// spread over H dimensions, so each choice value (sigmoid score + bias, or the logit for softmax
// and top-k-of-logits routing) by about delta_e = 6 * state_bound * |h| * |w_e| / sqrt(H) (1/4 of that for a sigmoid).
// A recorded expert is implausible when, it raised by its delta and every other lowered by theirs,
// its group (DeepSeek groups) is still not kept, or k experts of groups that stay kept still
// outrank it. Returns the first implausible choice as "token t: expert e ...", or "".
std::string implausible_choice(const MoeConfig& m, const MoeWeights& w, const float* h, int64_t T, int64_t H,
                               const int32_t* experts, double state_bound);

// out [T, H] = this rank's share of the MoE block for h [T, H] routed by `r`: the routed experts
// it holds, weighted, plus its slice of the shared experts (of the unweighted h), every MLP with
// activation `act`. Routed expert e of token t with weight w adds w * mlp_e(h[t]), or with
// `weight_input` (Llama-4, MoeConfig::weight_input) mlp_e(h[t] * w), the product in float32 as
// transformers. The caller's all-reduce sums the shares.
void moe_ffn(const MoeWeights& w, const Routing& r, const float* h, int64_t T, int64_t H, float* out,
             const GatedActivation& act, bool weight_input);

}  // namespace layertap::cpu
