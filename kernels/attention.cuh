// Causal grouped-query attention over a packed batch (block-diagonal: never across samples), with
// an optional sliding window or attention chunk (Llama-4). Two kernels compute the same function:
//   attention_reference  any head dims up to 512, float32 throughout; simple, the yardstick;
//   attention_flash      head dims 64/64, 128/128 (dense) and 192/128 (MLA: qk = nope + rope dims,
//                        v), bf16 tensor cores (mma.sync, sm_80+), online softmax.
// Each takes an AttentionLayout: q, k and v rows with head dims and a score scale of their own
// (the dense decoders' fused q/k/v projection: fused_qkv_layout; MLA's separate rows). Usable from
// host C++ (g++) and from .cu files.
#pragma once
#include <cstdint>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

namespace layertap::kernels {

// Query head h of token t at q + t * q_row + h * qk_dim; key and value head g of key row j at
// k + j * k_row + g * qk_dim and v + j * v_row + g * v_dim (g = h / (hq / hkv)); the scores are
// scaled by `scale`. ctx is (T, hq * v_dim). Query t's own key is key row t + key_offset: chunked
// prefill puts the kept keys of the sample in flight's earlier chunks (key_offset rows, positions
// 0 .. key_offset - 1) ahead of the batch's, and its first segment's positions continue from there.
// attended_pairs: the batch's attended (query, key) pairs per head, count_attended_pairs(offsets,
// key_offset, window, chunk); it only sizes the launch's stated work (kernels/work.hpp), 0 = not
// stated (counted as T, one key per query). sinks: GPT-OSS's per-head sink logits (below), or
// null. chunk: Llama-4's attention chunk (below), 0 = none.
struct AttentionLayout {
  const __nv_bfloat16* q = nullptr;
  std::int64_t q_row = 0;
  const __nv_bfloat16* k = nullptr;
  std::int64_t k_row = 0;
  const __nv_bfloat16* v = nullptr;
  std::int64_t v_row = 0;
  std::int64_t hq = 0, hkv = 0, qk_dim = 0, v_dim = 0;
  float scale = 1.0f;
  std::int64_t key_offset = 0;
  std::int64_t attended_pairs = 0;
  const float* sinks = nullptr;  // device float32 [hq], or null
  std::int64_t chunk = 0;        // > 0: only keys of the query's own chunk of `chunk` positions
};

// The dense decoders' fused projection qkv (T, (hq + 2 hkv) * hd), q heads then k heads then v
// heads, as a layout with score scale `scale`.
inline AttentionLayout fused_qkv_layout(const __nv_bfloat16* qkv, std::int64_t hq, std::int64_t hkv, std::int64_t hd,
                                        float scale) {
  const std::int64_t row = (hq + 2 * hkv) * hd;
  return AttentionLayout{qkv, row, qkv + hq * hd, row, qkv + (hq + hkv) * hd, row, hq, hkv, hd, hd, scale};
}

// The (query, key) pairs per head that attention over a packed batch attends (causal within each
// sample; host-known, for the launches' stated work): with sample offsets [S+1], the first
// sample's first position p0 (its kept positions under chunked prefill; the others start at 0), a
// sliding window and an attention chunk (0 = none), query i of sample s at position p = p_s + i
// sees min(p + 1, window, p % chunk + 1) keys, so pairs = sum over samples and their queries of
// that. E.g. samples of 3 and 5 tokens: 6 + 15; with window 2: 5 + 9; with chunk 2: 4 + 7.
std::int64_t count_attended_pairs(const std::vector<std::int64_t>& offsets, std::int64_t first_position,
                                  std::int64_t window, std::int64_t chunk = 0);

// For query t of sample s (its own key row u = t + key_offset, the sample's first key row
// u0 = u - pos[t]) and query head h (key/value head g = h / (hq / hkv)):
//   keys  j in [lo, u],  lo = u0, or max(u0, u - window + 1) when window > 0 (HF sliding window:
//         the last `window` positions, the query's own included), and at least u - pos[t] % chunk
//         when chunk > 0 (Llama-4's chunked attention: only keys of the query's own chunk, those
//         at positions floor(pos[t] / chunk) * chunk .. pos[t]; both when both are given)
//   ctx[t, h*v_dim : (h+1)*v_dim] = bf16( sum_j softmax_j(scale * q_t . k_j) v_j )
// with softmax and sums in float32. With sinks (GPT-OSS), head h's sink logit joins the softmax's
// denominator and has no value: with s_j = scale * q_t . k_j and m = max(max_j s_j, sinks[h]),
//   ctx[t, h*v_dim : (h+1)*v_dim] = bf16( sum_j exp(s_j - m) v_j / (sum_j exp(s_j - m) + exp(sinks[h] - m)) )
//
//   ctx  (T, hq * v_dim)  bf16, written; qk_dim and v_dim at most 512
//   pos  (T)              int32, position of each token within its sample
// Launches on `stream`; throws layertap::Error on bad arguments or a failed launch.
void attention_reference(__nv_bfloat16* ctx, const AttentionLayout& layout, const std::int32_t* pos, std::int64_t T,
                         std::int64_t window, cudaStream_t stream);

// Queries per tile of attention_flash.
inline constexpr std::int64_t kFlashTile = 64;

// The query tiles of a packed batch with sample offsets [S+1]: (num_tiles, 2) int32 pairs
// [begin, end) of at most kFlashTile tokens, each inside one sample, in token order.
std::vector<std::int32_t> flash_query_tiles(const std::vector<std::int64_t>& offsets);
// An upper bound on the tile count for any batch of at most `max_tokens` tokens.
std::int64_t max_flash_tiles(std::int64_t max_tokens);

// Whether attention_flash runs for this head_dim on the current device (hd 64 or 128, sm_80+).
bool flash_attention_supported(std::int64_t hd);
// Whether attention_flash runs for these head dims (64/64, 128/128, 192/128) on the current device.
bool flash_attention_supported(std::int64_t qk_dim, std::int64_t v_dim);

// Same function as attention_reference, except that the probabilities are rounded to bf16 for
// the tensor-core product with V (their float32 sum is the softmax denominator), as FlashAttention-2.
// Its head dims as flash_attention_supported(qk, v) says; k and v 16-byte aligned with row strides
// of whole 8-element chunks; q and ctx 4-byte aligned.
//   tiles  (num_tiles, 2) int32  from flash_query_tiles(offsets), on the device
void attention_flash(__nv_bfloat16* ctx, const AttentionLayout& layout, const std::int32_t* pos,
                     const std::int32_t* tiles, std::int64_t num_tiles, std::int64_t T, std::int64_t window,
                     cudaStream_t stream);

}  // namespace layertap::kernels
