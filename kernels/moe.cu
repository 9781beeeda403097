// MoE routing, permutation and un-permutation (see moe.cuh).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "cuda_check.hpp"
#include "launch.cuh"
#include "moe.cuh"
#include "moe_routing.hpp"

namespace layertap::kernels {
namespace {

// ----------------------------------------------------------------------------------------------
// kernels

constexpr int kBlock = 256;
constexpr int kWarps = kBlock / 32;
constexpr std::int64_t kMaxGrid = 1 << 16;
constexpr unsigned kFull = 0xffffffffu;

unsigned grid_for(std::int64_t items, std::int64_t per_block) {
  const std::int64_t blocks = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < kMaxGrid ? (blocks > 0 ? blocks : 1) : kMaxGrid);
}

// ---- routing

// The most experts per lane of the warp router (E <= 32 * kMaxPerLane); beyond, one thread per token.
constexpr int kMaxPerLane = 32;

// Whether the warp router stages a row in shared memory: the group step or the softmax's sum.
// The top-k-of-logits kinds rank the logits in registers.
LT_HD inline bool route_staged(const RouteParams& p) {
  return (p.kind == RouteParams::SigmoidGroupedTopk && p.n_group > 1) || p.kind == RouteParams::SoftmaxTopk;
}

// One thread per token: route_token itself (E > 32 * kMaxPerLane only; no model comes near).
__global__ void __launch_bounds__(kBlock)
    route_serial_kernel(RouteParams p, float* __restrict__ logits, float* __restrict__ choice,
                        const float* __restrict__ bias, const float* __restrict__ logit_offset,
                        std::int32_t* __restrict__ experts, float* __restrict__ weights, std::int64_t T) {
  const std::int64_t E = p.num_experts, k = p.top_k;
  for (std::int64_t t = std::int64_t(blockIdx.x) * kBlock + threadIdx.x; t < T; t += std::int64_t(gridDim.x) * kBlock) {
    float* l = logits + t * E;
    if (logit_offset != nullptr)
      for (std::int64_t e = 0; e < E; ++e) l[e] += logit_offset[e];
    route_token(p, l, choice + t * E, bias, experts + t * k, weights + t * k);
  }
}

// A candidate of the top-k: (value ranked, expert) in route order, and the expert's score.
struct Candidate {
  float v = 0.0f;
  std::int32_t e = -1;  // -1: none
  float s = 0.0f;
};

__device__ __forceinline__ bool candidate_before(const Candidate& a, const Candidate& b) {
  return a.e >= 0 && (b.e < 0 || route_before(a.v, a.e, b.v, b.e));
}

// The first of the lane's experts e = lane + 32 i (values c, scores s) after (prev_v, prev) in
// route order (prev < 0: the very first), as route_next over the lane's experts.
template <int PER>
__device__ __forceinline__ Candidate lane_next(const float (&c)[PER], const float (&s)[PER], int lane, std::int32_t E,
                                               float prev_v, std::int32_t prev) {
  Candidate best;
#pragma unroll
  for (int i = 0; i < PER; ++i) {
    const std::int32_t e = lane + 32 * i;
    if (e >= E || (prev >= 0 && !route_before(prev_v, prev, c[i], e))) continue;
    if (best.e < 0 || route_before(c[i], e, best.v, best.e)) best = Candidate{c[i], e, s[i]};
  }
  return best;
}

// One warp per token, lanes strided over the experts (e = lane + 32 i, i < PER): coalesced loads
// and stores of the token's row, each expert's score computed by one lane with route_token's
// functions. The top-k is k warp arg-mins under route_before (a strict total order, so the
// butterfly's result is the serial scan's, whatever the order it combines in); after each pick
// only the lane that held it looks for its next candidate. Sums keep route_token's order: the
// softmax denominator over e = 0..E-1 and the chosen scores over j = 0..k-1, each lane adding the
// same values in the same order. Shared memory per warp (route_staged: grouped or SoftmaxTopk): E
// floats (the choices for the groups' scores, or the exponentials for the softmax sum) and
// 2 kMaxRouteGroups.
template <int PER>
__global__ void __launch_bounds__(kBlock)
    route_warp_kernel(RouteParams p, float* __restrict__ logits, const float* __restrict__ bias,
                      const float* __restrict__ logit_offset, std::int32_t* __restrict__ experts,
                      float* __restrict__ weights, std::int64_t T) {
  LT_DYNAMIC_SHARED(float, route_smem);
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  const std::int32_t E = p.num_experts, k = p.top_k;
  const bool sigmoid = p.kind == RouteParams::SigmoidGroupedTopk;
  const bool grouped = sigmoid && p.n_group > 1;
  // Null unless staged (else the launch has no shared memory).
  float* stage = route_staged(p) ? route_smem + std::int64_t(warp) * (E + 2 * kMaxRouteGroups) : nullptr;
  float* group_score = grouped ? stage + E : nullptr;
  float* group_kept = grouped ? group_score + kMaxRouteGroups : nullptr;
  for (std::int64_t t = std::int64_t(blockIdx.x) * kWarps + warp; t < T; t += std::int64_t(gridDim.x) * kWarps) {
    float* row = logits + t * E;
    float s[PER], c[PER];
#pragma unroll
    for (int i = 0; i < PER; ++i) {
      const std::int32_t e = lane + 32 * i;
      s[i] = 0.0f;
      c[i] = 0.0f;
      if (e < E) s[i] = logit_offset != nullptr ? row[e] + logit_offset[e] : row[e];
    }
    if (sigmoid) {
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const std::int32_t e = lane + 32 * i;
        if (e >= E) continue;
        s[i] = route_sigmoid(s[i]);
        row[e] = s[i];
        c[i] = route_biased(s[i], bias, e);
      }
      if (grouped) {  // route_token's group step, group g by lane g % 32 over the staged choices
        const std::int32_t per = E / p.n_group;
#pragma unroll
        for (int i = 0; i < PER; ++i)
          if (lane + 32 * i < E) stage[lane + 32 * i] = c[i];
        __syncwarp();
        for (std::int32_t g = lane; g < p.n_group; g += 32) group_score[g] = route_group_score(stage + g * per, per);
        __syncwarp();
        for (std::int32_t g = lane; g < p.n_group; g += 32)
          group_kept[g] = route_group_kept(group_score, p.n_group, p.topk_group, g) ? 1.0f : 0.0f;
        __syncwarp();
#pragma unroll
        for (int i = 0; i < PER; ++i) {
          const std::int32_t e = lane + 32 * i;
          if (e < E && group_kept[e / per] == 0.0f) c[i] = -INFINITY;
        }
        __syncwarp();  // the stage is rewritten by the next token
      }
    } else if (p.kind == RouteParams::TopkSoftmax || p.kind == RouteParams::TopkSigmoid) {
      // The logits ranked as they are; route_weight turns TopkSigmoid's picks into sigmoids.
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const std::int32_t e = lane + 32 * i;
        if (e >= E) continue;
        row[e] = s[i];
        c[i] = s[i];
      }
    } else {
      // Softmax: the max skips NaN (x > mx is false for it); any order gives the same maximum
      // (a zero's sign aside, which no exp(x - max) can tell).
      float mx = -INFINITY;
#pragma unroll
      for (int i = 0; i < PER; ++i)
        if (lane + 32 * i < E) mx = s[i] > mx ? s[i] : mx;
#pragma unroll
      for (int off = 16; off > 0; off /= 2) {
        const float o = __shfl_xor_sync(kFull, mx, off);
        mx = o > mx ? o : mx;
      }
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const std::int32_t e = lane + 32 * i;
        if (e >= E) continue;
        s[i] = route_exp(s[i] - mx);
        stage[e] = s[i];
      }
      __syncwarp();
      float sum = 0.0f;  // in expert order, as route_token (every lane the same)
      for (std::int32_t e = 0; e < E; ++e) {
        const float x = stage[e];
        if (!route_isnan(x)) sum += x;
      }
      __syncwarp();  // the stage is rewritten by the next token
#pragma unroll
      for (int i = 0; i < PER; ++i) {
        const std::int32_t e = lane + 32 * i;
        if (e >= E) continue;
        s[i] /= sum;
        row[e] = s[i];
        c[i] = s[i];
      }
    }
    // Top-k: pick j is the first in route order after pick j - 1 (route_token's route_next).
    Candidate mine = lane_next<PER>(c, s, lane, E, 0.0f, -1);
    float sum = 0.0f;
    std::int32_t my_e = 0;
    float my_w = 0.0f;  // lane j < k: pick j (the first 32 picks); later picks go through memory
    std::int32_t* out_e = experts + t * k;
    float* out_w = weights + t * k;
    for (std::int32_t j = 0; j < k; ++j) {
      Candidate best = mine;
#pragma unroll
      for (int off = 16; off > 0; off /= 2) {
        Candidate o;
        o.v = __shfl_xor_sync(kFull, best.v, off);
        o.e = __shfl_xor_sync(kFull, best.e, off);
        o.s = __shfl_xor_sync(kFull, best.s, off);
        if (candidate_before(o, best)) best = o;
      }
      sum += best.s;
      if (j == lane) {
        my_e = best.e;
        my_w = best.s;
      } else if (j >= 32 && j % 32 == lane) {  // read back by this lane below
        out_e[j] = best.e;
        out_w[j] = best.s;
      }
      if (best.e % 32 == lane) mine = lane_next<PER>(c, s, lane, E, best.v, best.e);
    }
    if (p.kind == RouteParams::TopkSoftmax) {  // the chosen logits' softmax, serially as route_token
      for (std::int32_t j = lane; j < k && j < 32; j += 32) {
        out_e[j] = my_e;
        out_w[j] = my_w;
      }
      __syncwarp();
      if (lane == 0) route_softmax(out_w, k);
      __syncwarp();
      continue;
    }
    for (std::int32_t j = lane; j < k; j += 32) {
      if (j < 32) out_e[j] = my_e;
      out_w[j] = route_weight(p, j < 32 ? my_w : out_w[j], sum);
    }
  }
}

// ---- permutation
//
// The pairs i = t * top_k + j are cut into W tiles of L consecutive pairs, one warp each, walked
// 32 pairs at a time in pair order. `table` (n_local x W, expert-major) holds one counter per
// (local expert, tile): the tile's pairs of that expert (tile_count_kernel), then, after one
// exclusive scan in (expert, tile) order (scan_kernel), the expert's first row for that tile,
// which is offsets[e] plus the expert's pairs in earlier tiles. tile_place_kernel walks each tile
// again and gives each pair that row plus its rank among the expert's pairs before it in the tile.
// Within 32 pairs, the pairs of one expert are found by ballots on the bits of the expert index.
// The table lives in perm_token (rewritten by scatter_kernel afterwards) or, with one tile, in
// counts (rewritten by scatter_kernel too).

// The lanes whose `key` equals this lane's (key < 2^bits): __match_any_sync from ballots.
__device__ __forceinline__ unsigned match_key(std::uint32_t key, int bits) {
  unsigned peers = kFull;
  for (int b = 0; b < bits; ++b) {
    const bool bit = (key >> b) & 1u;
    const unsigned set = __ballot_sync(kFull, bit);
    peers &= bit ? set : ~set;
  }
  return peers;
}

struct TileShape {
  std::int64_t pairs;      // T * top_k
  std::int64_t first;      // first local expert
  std::int32_t n_local;
  std::int32_t bits;       // bits of n_local (the key n_local marks a pair that is not local)
  std::int32_t tiles;      // W
  std::int64_t tile_len;   // L (a multiple of 32)
  bool shared_counters;    // the warps' counters in shared memory (n_local per warp), else in the table
};

__device__ __forceinline__ std::uint32_t pair_key(const std::int32_t* __restrict__ experts, const TileShape& ts,
                                                  std::int64_t i, std::int64_t end) {
  if (i >= end) return std::uint32_t(ts.n_local);
  const std::int64_t e = std::int64_t(experts[i]) - ts.first;
  return e >= 0 && e < ts.n_local ? std::uint32_t(e) : std::uint32_t(ts.n_local);
}

// What warp `warp` of a tile kernel works on: tile w's pairs [begin, end) and its per-expert
// counters, expert e's at ctr[e * stride] (shared memory, n_local per warp; else column w of the
// table). tile_count_kernel and tile_place_kernel must agree on both.
struct TileWork {
  std::int64_t w, begin, end;
  std::int32_t* ctr;
  std::int64_t stride;
};

__device__ __forceinline__ TileWork tile_work(const TileShape& ts, std::int32_t* table, std::int32_t* smem, int warp) {
  const std::int64_t w = std::int64_t(blockIdx.x) * kWarps + warp, begin = w * ts.tile_len;
  return {w, begin, begin + ts.tile_len < ts.pairs ? begin + ts.tile_len : ts.pairs,
          ts.shared_counters ? smem + std::int64_t(warp) * ts.n_local : table + w, ts.shared_counters ? 1 : ts.tiles};
}

// table[e * W + w] = the pairs of tile w routed to local expert e.
__global__ void __launch_bounds__(kBlock)
    tile_count_kernel(const std::int32_t* __restrict__ experts, TileShape ts, std::int32_t* __restrict__ table) {
  LT_DYNAMIC_SHARED(std::int32_t, tile_smem);
  const int lane = int(threadIdx.x) % 32;
  const auto [w, begin, end, ctr, stride] = tile_work(ts, table, tile_smem, int(threadIdx.x) / 32);
  if (w >= ts.tiles) return;  // the whole warp
  const std::int64_t n = ts.n_local;
  for (std::int64_t e = lane; e < n; e += 32) ctr[e * stride] = 0;
  __syncwarp();
  for (std::int64_t base = begin; base < end; base += 32) {
    const std::uint32_t key = pair_key(experts, ts, base + lane, end);
    const unsigned peers = match_key(key, ts.bits);
    if (key < std::uint32_t(n) && (peers >> lane) == 1u) ctr[std::int64_t(key) * stride] += __popc(peers);  // the last peer
    __syncwarp();
  }
  if (ts.shared_counters)
    for (std::int64_t e = lane; e < n; e += 32) table[e * ts.tiles + w] = ctr[e];
}

// Block-wide exclusive scan of one value per thread (integers: any order); returns this thread's
// prefix plus `carry`, and sets `total` to the sum of all.
__device__ __forceinline__ std::int32_t block_exclusive_scan(std::int32_t x, std::int32_t carry, std::int32_t& total,
                                                             std::int32_t* warp_sums) {
  const int lane = int(threadIdx.x) % 32, warp = int(threadIdx.x) / 32;
  std::int32_t inclusive = x, all = x;  // xor butterfly: `all` the sum of the lane's aligned group
#pragma unroll
  for (int d = 1; d < 32; d *= 2) {
    const std::int32_t other = __shfl_xor_sync(kFull, all, d);
    if (lane & d) inclusive += other;
    all += other;
  }
  if (lane == 0) warp_sums[warp] = all;
  __syncthreads();
  std::int32_t before = 0;
  total = 0;
  for (int v = 0; v < kWarps; ++v) {
    before += v < warp ? warp_sums[v] : 0;
    total += warp_sums[v];
  }
  __syncthreads();  // warp_sums is rewritten by the next call
  return carry + before + inclusive - x;
}

// One block: table[0, n * W) becomes its exclusive prefix sums in place, offsets[e] = table[e * W]
// (the expert's first row) and offsets[n] = the rows in all.
constexpr int kScanItems = 16;

__global__ void __launch_bounds__(kBlock)
    scan_kernel(std::int32_t* __restrict__ table, std::int64_t n_local, std::int64_t tiles,
                std::int32_t* __restrict__ offsets) {
  __shared__ std::int32_t warp_sums[kWarps];
  const std::int64_t N = n_local * tiles;
  std::int32_t carry = 0;
  for (std::int64_t chunk = 0; chunk < N; chunk += std::int64_t(kBlock) * kScanItems) {
    const std::int64_t at = chunk + std::int64_t(threadIdx.x) * kScanItems;
    std::int32_t v[kScanItems], sum = 0;
#pragma unroll
    for (int q = 0; q < kScanItems; ++q) {
      v[q] = at + q < N ? table[at + q] : 0;
      sum += v[q];
    }
    std::int32_t total = 0;
    std::int32_t prefix = block_exclusive_scan(sum, carry, total, warp_sums);
#pragma unroll
    for (int q = 0; q < kScanItems; ++q) {
      if (at + q < N) table[at + q] = prefix;
      prefix += v[q];
    }
    carry += total;
  }
  if (threadIdx.x == 0) offsets[n_local] = carry;
  __syncthreads();  // the block's table writes are visible to all of it
  for (std::int64_t e = threadIdx.x; e < n_local; e += kBlock) offsets[e] = table[e * tiles];
}

// slot[i] = the row of pair i (table[e * W + w] + its rank in expert e within tile w), -1 when its
// expert is not local. table's column w serves as the tile's running counters.
__global__ void __launch_bounds__(kBlock)
    tile_place_kernel(const std::int32_t* __restrict__ experts, TileShape ts, std::int32_t* __restrict__ table,
                      std::int32_t* __restrict__ slot) {
  LT_DYNAMIC_SHARED(std::int32_t, tile_smem);
  const int lane = int(threadIdx.x) % 32;
  const auto [w, begin, end, ctr, stride] = tile_work(ts, table, tile_smem, int(threadIdx.x) / 32);
  if (w >= ts.tiles) return;  // the whole warp
  const std::int64_t n = ts.n_local;
  if (ts.shared_counters)
    for (std::int64_t e = lane; e < n; e += 32) ctr[e] = table[e * ts.tiles + w];
  __syncwarp();
  const unsigned before_me = (1u << lane) - 1u;
  for (std::int64_t base = begin; base < end; base += 32) {
    const std::int64_t i = base + lane;
    const std::uint32_t key = pair_key(experts, ts, i, end);
    const unsigned peers = match_key(key, ts.bits);
    const bool local = key < std::uint32_t(n);
    const std::int32_t row = local ? ctr[std::int64_t(key) * stride] + __popc(peers & before_me) : -1;
    if (i < end) slot[i] = row;
    __syncwarp();  // every peer has read its expert's counter
    if (local && (peers >> lane) == 1u) ctr[std::int64_t(key) * stride] = row + 1;  // the last peer
    __syncwarp();
  }
}

// perm_token[slot[i]] = i / top_k, and counts[e] = offsets[e + 1] - offsets[e].
__global__ void __launch_bounds__(kBlock)
    scatter_kernel(const std::int32_t* __restrict__ slot, std::int64_t pairs, std::int32_t top_k,
                   const std::int32_t* __restrict__ offsets, std::int64_t n_local, std::int32_t* __restrict__ counts,
                   std::int32_t* __restrict__ perm_token) {
  const std::int64_t stride = std::int64_t(gridDim.x) * kBlock;
  for (std::int64_t i = std::int64_t(blockIdx.x) * kBlock + threadIdx.x; i < pairs; i += stride) {
    const std::int32_t r = slot[i];
    if (r >= 0) perm_token[r] = std::int32_t(std::uint32_t(i) / std::uint32_t(top_k));  // pairs < 2^31
  }
  for (std::int64_t e = std::int64_t(blockIdx.x) * kBlock + threadIdx.x; e < n_local; e += stride)
    counts[e] = offsets[e + 1] - offsets[e];
}

// Row r's routing weight: weights[i] of its pair i = t * k + j, the one with slot[i] == r.
__device__ __forceinline__ float row_weight(const std::int32_t* __restrict__ slot, const float* __restrict__ weights,
                                            std::int64_t k, std::int32_t t, std::int64_t r) {
  const std::int64_t first = std::int64_t(t) * k;
  for (std::int64_t i = first; i < first + k; ++i)
    if (slot[i] == r) return weights[i];
  return 0.0f;  // unreachable: moe_permute gave row r to one of token t's pairs
}

// Rows grid-strided; 16-byte copies when H % 8 == 0 (the buffers are 256-byte aligned). With
// weights, each element is bf16(float(h) * w): one rounding, w the row's routing weight.
template <int VEC>
__global__ void __launch_bounds__(kBlock)
    gather_kernel(__nv_bfloat16* __restrict__ x_perm, const __nv_bfloat16* __restrict__ h,
                  const std::int32_t* __restrict__ perm_token, const std::int32_t* __restrict__ total_rows,
                  std::int64_t H, const std::int32_t* __restrict__ slot, const float* __restrict__ weights,
                  std::int64_t k) {
  const std::int64_t rows = *total_rows;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int32_t t = perm_token[r];
    const __nv_bfloat16* src = h + std::int64_t(t) * H;
    __nv_bfloat16* dst = x_perm + r * H;
    const float w = weights != nullptr ? row_weight(slot, weights, k, t, r) : 1.0f;
    for (std::int64_t c = std::int64_t(threadIdx.x) * VEC; c < H; c += std::int64_t(kBlock) * VEC) {
      if constexpr (VEC == 8) {
        uint4 v = *reinterpret_cast<const uint4*>(src + c);
        if (weights != nullptr) {
          auto* x = reinterpret_cast<__nv_bfloat16*>(&v);
#pragma unroll
          for (int q = 0; q < 8; ++q) x[q] = __float2bfloat16_rn(__bfloat162float(x[q]) * w);
        }
        *reinterpret_cast<uint4*>(dst + c) = v;
      } else {
        dst[c] = weights != nullptr ? __float2bfloat16_rn(__bfloat162float(src[c]) * w) : src[c];
      }
    }
  }
}

constexpr int kMaxTopK = 64;

__global__ void __launch_bounds__(kBlock)
    combine_kernel(__nv_bfloat16* __restrict__ out, const __nv_bfloat16* __restrict__ y,
                   const std::int32_t* __restrict__ slot, const float* __restrict__ weights,
                   const __nv_bfloat16* __restrict__ shared, std::int64_t T, std::int64_t k, std::int64_t H) {
  __shared__ std::int32_t s_slot[kMaxTopK];
  __shared__ float s_weight[kMaxTopK];
  for (std::int64_t t = blockIdx.x; t < T; t += gridDim.x) {
    __syncthreads();  // the previous token's table is read
    if (threadIdx.x < k) {
      s_slot[threadIdx.x] = slot[t * k + threadIdx.x];
      s_weight[threadIdx.x] = weights != nullptr ? weights[t * k + threadIdx.x] : 1.0f;  // 1 * y: exact
    }
    __syncthreads();
    for (std::int64_t c = threadIdx.x; c < H; c += kBlock) {
      float acc = 0.0f;
      for (std::int64_t j = 0; j < k; ++j) {
        const std::int32_t s = s_slot[j];
        if (s >= 0) acc += s_weight[j] * __bfloat162float(y[std::int64_t(s) * H + c]);
      }
      if (shared != nullptr) acc += __bfloat162float(shared[t * H + c]);
      out[t * H + c] = __float2bfloat16_rn(acc);
    }
  }
}

}  // namespace

// ----------------------------------------------------------------------------------------------
// launchers

namespace {

template <int PER>
void launch_route_warp(const Grid& g, const RouteParams& p, float* logits, const float* bias, const float* logit_offset,
                       std::int32_t* experts, float* weights, std::int64_t T) {
  launch<route_warp_kernel<PER>>(g, p, logits, bias, logit_offset, experts, weights, T);
}

}  // namespace

void moe_route(const RouteParams& p, float* logits, float* choice, const float* bias, const float* logit_offset,
               std::int32_t* experts, float* weights, std::int64_t T, cudaStream_t stream) {
  LT_CHECK(p.kind >= RouteParams::SigmoidGroupedTopk && p.kind <= RouteParams::TopkSigmoid,
           "moe_route: unknown routing kind ", p.kind);
  LT_CHECK(p.num_experts > 0 && p.top_k > 0 && p.top_k <= p.num_experts && T >= 0, "moe_route: bad shape E=",
           p.num_experts, " top_k=", p.top_k, " T=", T);
  LT_CHECK(p.kind != RouteParams::SigmoidGroupedTopk ||
               (p.n_group >= 1 && p.n_group <= kMaxRouteGroups && p.num_experts % p.n_group == 0 &&
                p.topk_group >= 1 && p.topk_group <= p.n_group && p.topk_group * (p.num_experts / p.n_group) >= p.top_k),
           "moe_route: bad groups n_group=", p.n_group, " topk_group=", p.topk_group, " for ", p.num_experts,
           " experts and top_k ", p.top_k);
  LT_CHECK(logits != nullptr && choice != nullptr && experts != nullptr && weights != nullptr,
           "moe_route: null pointer argument");
  if (T == 0) return;
  const double E = p.num_experts, k = p.top_k, tokens = double(T);
  const bool grouped = p.kind == RouteParams::SigmoidGroupedTopk && p.n_group > 1;
  // Bytes: the logits read and the scores written back (T, E), the bias and offset rows (cached),
  // the (T, k) experts and weights.
  Work work;
  work.read = tokens * E * 4 + (bias != nullptr ? E * 4 : 0) + (logit_offset != nullptr ? E * 4 : 0);
  work.written = tokens * E * 4 + tokens * k * 8;
  if (p.num_experts > 32 * kMaxPerLane) {
    // One thread per token: about 40 instructions per expert for the scores and 16 per expert per
    // pick for the serial scans (the choice row written and read back through the cache).
    work.written += tokens * E * 4;
    work.ops = tokens * (E * 40 + k * E * 16);
    launch<route_serial_kernel>(Grid{grid_for(T, kBlock), kBlock, 0, stream, work}, p, logits, choice, bias,
                                logit_offset, experts, weights, T);
    LT_CUDA_CHECK_LAUNCH();
    return;
  }
  const int need = (p.num_experts + 31) / 32;
  const int per = need <= 1 ? 1 : need <= 2 ? 2 : need <= 4 ? 4 : need <= 8 ? 8 : need <= 12 ? 12 : need <= 16 ? 16 : 32;
  // Lane instructions per token (32 lanes): about 40 per expert for the score (exp, an IEEE
  // division, the loads and stores); per pick 5 butterfly steps of 3 shuffles and a comparison
  // (~80 a lane) and the picking lane's rescan of its `per` experts (~16 each, the warp waiting);
  // the softmax sum serial over E in every lane (~4 each); the group scores' two scans of each
  // group by one lane (~16 per expert) and the groups' ranking.
  const double groups = grouped ? p.n_group : 0;
  work.ops = tokens * (E * 40 + 32 * k * (80 + 16.0 * per) + (p.kind == RouteParams::SoftmaxTopk ? 32 * E * 4 : 0) +
                       (grouped ? 32 * (2 * (E / groups) * 16 + groups * 8) + E * 4 : 0));
  const std::size_t smem = route_staged(p) ? std::size_t(kWarps) * std::size_t(p.num_experts + 2 * kMaxRouteGroups) *
                                                 sizeof(float)
                                           : 0;
  const Grid g{grid_for(T, kWarps), kBlock, smem, stream, work};
  switch (per) {
    case 1: launch_route_warp<1>(g, p, logits, bias, logit_offset, experts, weights, T); break;
    case 2: launch_route_warp<2>(g, p, logits, bias, logit_offset, experts, weights, T); break;
    case 4: launch_route_warp<4>(g, p, logits, bias, logit_offset, experts, weights, T); break;
    case 8: launch_route_warp<8>(g, p, logits, bias, logit_offset, experts, weights, T); break;
    case 12: launch_route_warp<12>(g, p, logits, bias, logit_offset, experts, weights, T); break;
    case 16: launch_route_warp<16>(g, p, logits, bias, logit_offset, experts, weights, T); break;
    default: launch_route_warp<32>(g, p, logits, bias, logit_offset, experts, weights, T); break;
  }
  LT_CUDA_CHECK_LAUNCH();
}

void moe_permute(const std::int32_t* experts, std::int64_t T, std::int64_t top_k, std::int64_t first,
                 std::int64_t n_local, std::int32_t* counts, std::int32_t* offsets, std::int32_t* slot,
                 std::int32_t* perm_token, cudaStream_t stream) {
  LT_CHECK(T >= 0 && top_k > 0 && first >= 0 && n_local > 0 && n_local < 65536 && T * top_k < (std::int64_t(1) << 31),
           "moe_permute: bad shape T=", T, " top_k=", top_k, " first=", first, " n_local=", n_local);
  LT_CHECK(experts != nullptr && counts != nullptr && offsets != nullptr && slot != nullptr && perm_token != nullptr,
           "moe_permute: null pointer argument");
  if (T == 0) {
    LT_CUDA_CHECK(cudaMemsetAsync(counts, 0, sizeof(std::int32_t) * std::size_t(n_local), stream));
    LT_CUDA_CHECK(cudaMemsetAsync(offsets, 0, sizeof(std::int32_t) * std::size_t(n_local + 1), stream));
    return;
  }
  const std::int64_t pairs = T * top_k, capacity = T * std::min(top_k, n_local);  // perm_token's length
  // Tile length: a warp's serial steps (tile_len / 32) against the one-block scan of the
  // n_local * pairs / tile_len counters, about sqrt(n_local * pairs / 8) (Kimi-K2.5's 48 local
  // experts at 8192 tokens: 640 pairs, 103 tiles, a 4944-entry scan), at least 256; as many tiles
  // as perm_token holds counters for, else one tile counting in `counts`.
  const auto balanced = std::int64_t(std::sqrt(double(n_local) * double(pairs) / 8.0));
  std::int64_t tile_len = std::max<std::int64_t>(256, (balanced + 31) / 32 * 32);
  std::int64_t tiles = (pairs + tile_len - 1) / tile_len;
  if (tiles > 1 && n_local * tiles > capacity) tiles = capacity / n_local;
  std::int32_t* table = perm_token;
  if (tiles <= 1) {
    tiles = 1;
    table = counts;
  }
  tile_len = ((pairs + tiles - 1) / tiles + 31) / 32 * 32;
  tiles = (pairs + tile_len - 1) / tile_len;
  TileShape ts{};
  ts.pairs = pairs;
  ts.first = first;
  ts.n_local = std::int32_t(n_local);
  ts.bits = std::int32_t(std::bit_width(std::uint32_t(n_local)));
  ts.tiles = std::int32_t(tiles);
  ts.tile_len = tile_len;
  ts.shared_counters = n_local <= 1024;
  const std::size_t smem = ts.shared_counters ? std::size_t(kWarps) * std::size_t(n_local) * sizeof(std::int32_t) : 0;
  const unsigned tile_blocks = static_cast<unsigned>((tiles + kWarps - 1) / kWarps);
  const double P = double(pairs), N = double(n_local * tiles), n = double(n_local);
  // Per 32 pairs a warp: the experts' 128 bytes, `bits` ballots and ~20 other instructions a lane.
  const double per_pair = ts.bits * 4 + 20;
  Work count_work;  // the experts read; the counters zeroed and written (the table once, or twice in place)
  count_work.read = P * 4 + (ts.shared_counters ? 0 : N * 4 + P * 4);
  count_work.written = N * 4 * (ts.shared_counters ? 1 : 2);
  count_work.ops = P * per_pair + N * 4;
  launch<tile_count_kernel>(Grid{tile_blocks, kBlock, smem, stream, count_work}, experts, ts, table);
  LT_CUDA_CHECK_LAUNCH();
  Work scan_work;  // the table read twice (scan, then each expert's first entry) and written once; offsets
  scan_work.read = N * 4 + n * 4;
  scan_work.written = N * 4 + (n + 1) * 4;
  scan_work.ops = N * 4 + std::ceil(N / (kBlock * kScanItems)) * kBlock * 40 + n * 4;
  launch<scan_kernel>(Grid{1, kBlock, 0, stream, scan_work}, table, n_local, tiles, offsets);
  LT_CUDA_CHECK_LAUNCH();
  Work place_work;  // the experts and the tile's counters read; the slots (and counters in place) written
  place_work.read = P * 4 + N * 4 + (ts.shared_counters ? 0 : P * 4);
  place_work.written = P * 4 + (ts.shared_counters ? 0 : P * 4);
  place_work.ops = P * (per_pair + 8) + N * 4;
  launch<tile_place_kernel>(Grid{tile_blocks, kBlock, smem, stream, place_work}, experts, ts, table, slot);
  LT_CUDA_CHECK_LAUNCH();
  Work scatter_work;  // the slots and offsets read; at most `capacity` rows and the counts written
  scatter_work.read = P * 4 + (n + 1) * 4;
  scatter_work.written = double(capacity) * 4 + n * 4;
  scatter_work.ops = P * 10 + n * 6;
  launch<scatter_kernel>(Grid{grid_for(std::max(pairs, n_local), kBlock), kBlock, 0, stream, scatter_work}, slot, pairs,
                         std::int32_t(top_k), offsets, n_local, counts, perm_token);
  LT_CUDA_CHECK_LAUNCH();
}

void moe_gather(__nv_bfloat16* x_perm, const __nv_bfloat16* h, const std::int32_t* perm_token,
                const std::int32_t* total_rows, std::int64_t max_rows, std::int64_t H, cudaStream_t stream,
                const std::int32_t* slot, const float* weights, std::int64_t top_k) {
  LT_CHECK(max_rows >= 0 && H > 0, "moe_gather: bad shape max_rows=", max_rows, " H=", H);
  LT_CHECK(x_perm != nullptr && h != nullptr && perm_token != nullptr && total_rows != nullptr,
           "moe_gather: null pointer argument");
  LT_CHECK(weights == nullptr || (slot != nullptr && top_k > 0), "moe_gather: weights need slot and top_k > 0 (top_k ",
           top_k, ")");
  if (max_rows == 0) return;
  const unsigned grid = static_cast<unsigned>(max_rows < kMaxGrid ? max_rows : kMaxGrid);
  const bool aligned = H % 8 == 0 && reinterpret_cast<std::uintptr_t>(x_perm) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(h) % 16 == 0;
  // Upper bounds (the rows are known on the device only): max_rows rows of H bf16 copied, their
  // tokens read; ~6 instructions per 16-byte copy (per element unaligned). Weighted: every thread
  // of a row scans the token's top_k slots (~4 instructions each, the slots and the weight read
  // through the cache), ~4 per element to widen, multiply and round.
  const bool weighted = weights != nullptr;
  Work work;
  work.read = double(max_rows) * (double(H) * 2 + 4 + (weighted ? double(top_k) * 4 + 4 : 0)) + 4;
  work.written = double(max_rows) * double(H) * 2;
  work.ops = double(max_rows) * double(H) * ((aligned ? 6.0 / 8 : 6.0) + (weighted ? 4 : 0)) +
             double(grid) * kBlock * 10 + (weighted ? double(max_rows) * kBlock * 4 * double(top_k) : 0);
  if (aligned) {
    launch<gather_kernel<8>>(Grid{grid, kBlock, 0, stream, work}, x_perm, h, perm_token, total_rows, H, slot, weights,
                             top_k);
  } else {
    launch<gather_kernel<1>>(Grid{grid, kBlock, 0, stream, work}, x_perm, h, perm_token, total_rows, H, slot, weights,
                             top_k);
  }
  LT_CUDA_CHECK_LAUNCH();
}

void moe_combine(__nv_bfloat16* out, const __nv_bfloat16* y, const std::int32_t* slot, const float* weights,
                 const __nv_bfloat16* shared, std::int64_t T, std::int64_t top_k, std::int64_t H,
                 cudaStream_t stream) {
  LT_CHECK(T >= 0 && top_k > 0 && top_k <= kMaxTopK && H > 0, "moe_combine: bad shape T=", T, " top_k=", top_k,
           " H=", H, " (top_k at most ", kMaxTopK, ")");
  LT_CHECK(out != nullptr && slot != nullptr && y != nullptr, "moe_combine: null pointer argument");
  if (T == 0) return;
  const unsigned grid = static_cast<unsigned>(T < kMaxGrid ? T : kMaxGrid);
  // Upper bound (the rows are known on the device only): a row of y (H bf16) for every choice, as
  // if all were local; the slots and weights, shared and out once. Per element ~6 instructions per
  // choice (slot test, load, convert, multiply-add) and ~8 for shared, the rounding and the store.
  Work work;
  work.read = double(T) * double(top_k) * ((weights != nullptr ? 8 : 4) + double(H) * 2) +
              (shared != nullptr ? double(T) * double(H) * 2 : 0);
  work.written = double(T) * double(H) * 2;
  work.ops = double(T) * double(H) * (6 * double(top_k) + 8);
  launch<combine_kernel>(Grid{grid, kBlock, 0, stream, work}, out, y, slot, weights, shared, T, top_k, H);
  LT_CUDA_CHECK_LAUNCH();
}

}  // namespace layertap::kernels
