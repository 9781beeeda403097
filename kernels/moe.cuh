// Mixture-of-experts steps between the products (the products themselves are cuBLASLt GEMMs):
// routing, the permutation of tokens by expert (their inputs weighted for Llama-4), and the
// (weighted) un-permutation. One rank holds the experts [first, first + n_local) (whole experts, or
// every expert's intermediate slice with first 0 and n_local E). Usable from host C++ (g++) and
// from .cu files.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "kernels/moe_routing.hpp"

namespace layertap::kernels {

// Per token t < T (one warp each, lanes strided over the experts; E > 1024: one thread each):
// logits (T, E) float32 are overwritten with the scores (TopkSoftmax, TopkSigmoid: the logits),
// choice (T, E) is scratch (used only past 1024 experts), and experts/weights (T, top_k) receive
// route_token's choice, bit for bit.
// `logit_offset` (E) or null is added to every logit first: the router's own bias (GPT-OSS; the
// float32 sum F.linear forms) or a synthetic load skew (benchmark); `bias` (E) or null is
// e_score_correction_bias.
void moe_route(const RouteParams& p, float* logits, float* choice, const float* bias, const float* logit_offset,
               std::int32_t* experts, float* weights, std::int64_t T, cudaStream_t stream);

// The tokens of this rank's experts, grouped by expert, in token order inside each expert:
//   counts  (n_local)      int32: (token, choice) pairs routed to local expert e
//   offsets (n_local + 1)  int32: exclusive prefix sums of counts (offsets[n_local] = rows in all)
//   slot    (T * top_k)    int32: the row of pair i = t * top_k + j, or -1 when its expert is not local
//   perm_token (T * min(top_k, n_local))  int32: the token of each row (entries past
//              offsets[n_local] are scratch)
// Four launches, none scanning all pairs serially: tiles of consecutive pairs, one warp each,
// count their experts; one block scans the (expert, tile) counts; the warps place their pairs;
// rows are scattered to perm_token. Deterministic.
void moe_permute(const std::int32_t* experts, std::int64_t T, std::int64_t top_k, std::int64_t first,
                 std::int64_t n_local, std::int32_t* counts, std::int32_t* offsets, std::int32_t* slot,
                 std::int32_t* perm_token, cudaStream_t stream);

// x_perm (rows, H) = h (T, H) [perm_token[row]] for row < offsets[n_local] (read on the device);
// `max_rows` bounds the launch (T * min(top_k, n_local)).
// Input-weighted experts (Llama-4): with `weights` (T, top_k) float32 (moe_route's) and moe_permute's
// `slot` (T, top_k), row r = slot[t, j] is bf16(h[t] * weights[t, j]), the float32 product rounded
// once; then moe_combine with null weights. Null weights (every other family): a copy.
void moe_gather(__nv_bfloat16* x_perm, const __nv_bfloat16* h, const std::int32_t* perm_token,
                const std::int32_t* total_rows, std::int64_t max_rows, std::int64_t H, cudaStream_t stream,
                const std::int32_t* slot = nullptr, const float* weights = nullptr, std::int64_t top_k = 0);

// out (T, H) = bf16( sum_j [slot[t, j] >= 0] weights[t, j] * y[slot[t, j]] + shared[t] ), the sum in
// float32 in choice order j = 0..top_k-1, shared (T, H) or null (no shared experts). Null weights:
// every weight 1, the outputs summed unweighted (input-weighted experts, weighted by moe_gather).
void moe_combine(__nv_bfloat16* out, const __nv_bfloat16* y, const std::int32_t* slot, const float* weights,
                 const __nv_bfloat16* shared, std::int64_t T, std::int64_t top_k, std::int64_t H,
                 cudaStream_t stream);

}  // namespace layertap::kernels
