// MoE routing, permutation and un-permutation (see moe.cuh).
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

unsigned grid_for(std::int64_t items, std::int64_t per_block) {
  const std::int64_t blocks = (items + per_block - 1) / per_block;
  return static_cast<unsigned>(blocks < kMaxGrid ? (blocks > 0 ? blocks : 1) : kMaxGrid);
}

__global__ void __launch_bounds__(kBlock)
    route_kernel(RouteParams p, float* __restrict__ logits, float* __restrict__ choice,
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

// slot[i] = -1 and counts[e - first] += 1 for every pair i of a local expert e.
__global__ void __launch_bounds__(kBlock)
    count_kernel(const std::int32_t* __restrict__ experts, std::int64_t pairs, std::int64_t first,
                 std::int64_t n_local, std::int32_t* __restrict__ counts, std::int32_t* __restrict__ slot) {
  for (std::int64_t i = std::int64_t(blockIdx.x) * kBlock + threadIdx.x; i < pairs;
       i += std::int64_t(gridDim.x) * kBlock) {
    const std::int64_t e = std::int64_t(experts[i]) - first;
    if (e >= 0 && e < n_local) atomicAdd(counts + e, 1);
    slot[i] = -1;
  }
}

// One block per local expert: its offset from the counts, then its pairs in order (a block-wide
// stable compaction, kBlock pairs per step).
__global__ void __launch_bounds__(kBlock)
    place_kernel(const std::int32_t* __restrict__ experts, std::int64_t pairs, std::int64_t top_k,
                 std::int64_t first, std::int64_t n_local, const std::int32_t* __restrict__ counts,
                 std::int32_t* __restrict__ offsets, std::int32_t* __restrict__ slot,
                 std::int32_t* __restrict__ perm_token) {
  __shared__ std::int32_t warp_totals[kWarps];
  __shared__ std::int32_t offset_shared;
  const std::int64_t e = blockIdx.x;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x == 0) {
    std::int32_t o = 0;
    for (std::int64_t x = 0; x < e; ++x) o += counts[x];
    offset_shared = o;
    offsets[e] = o;
    if (e == n_local - 1) offsets[n_local] = o + counts[e];
  }
  __syncthreads();
  std::int32_t base = offset_shared;
  const std::int32_t mine = std::int32_t(first + e);
  for (std::int64_t i0 = 0; i0 < pairs; i0 += kBlock) {
    const std::int64_t i = i0 + threadIdx.x;
    const bool hit = i < pairs && experts[i] == mine;
    const unsigned ballot = __ballot_sync(0xffffffffu, hit);
    const std::int32_t before_in_warp = __popc(ballot & ((1u << lane) - 1u));
    if (lane == 0) warp_totals[warp] = __popc(ballot);
    __syncthreads();
    std::int32_t before = base + before_in_warp, total = 0;
    for (int w = 0; w < kWarps; ++w) {
      before += w < warp ? warp_totals[w] : 0;
      total += warp_totals[w];
    }
    if (hit) {
      slot[i] = before;
      perm_token[before] = std::int32_t(i / top_k);
    }
    base += total;
    __syncthreads();  // warp_totals is rewritten next step
  }
}

// Rows grid-strided; 16-byte copies when H % 8 == 0 (the buffers are 256-byte aligned).
template <int VEC>
__global__ void __launch_bounds__(kBlock)
    gather_kernel(__nv_bfloat16* __restrict__ x_perm, const __nv_bfloat16* __restrict__ h,
                  const std::int32_t* __restrict__ perm_token, const std::int32_t* __restrict__ total_rows,
                  std::int64_t H) {
  const std::int64_t rows = *total_rows;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const __nv_bfloat16* src = h + std::int64_t(perm_token[r]) * H;
    __nv_bfloat16* dst = x_perm + r * H;
    for (std::int64_t c = std::int64_t(threadIdx.x) * VEC; c < H; c += std::int64_t(kBlock) * VEC) {
      if constexpr (VEC == 8) {
        *reinterpret_cast<uint4*>(dst + c) = *reinterpret_cast<const uint4*>(src + c);
      } else {
        dst[c] = src[c];
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
      s_weight[threadIdx.x] = weights[t * k + threadIdx.x];
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

void moe_route(const RouteParams& p, float* logits, float* choice, const float* bias, const float* logit_offset,
               std::int32_t* experts, float* weights, std::int64_t T, cudaStream_t stream) {
  LT_CHECK(p.num_experts > 0 && p.top_k > 0 && p.top_k <= p.num_experts && T >= 0, "moe_route: bad shape E=",
           p.num_experts, " top_k=", p.top_k, " T=", T);
  LT_CHECK(p.kind == RouteParams::SoftmaxTopk ||
               (p.n_group >= 1 && p.n_group <= kMaxRouteGroups && p.num_experts % p.n_group == 0 &&
                p.topk_group >= 1 && p.topk_group <= p.n_group && p.topk_group * (p.num_experts / p.n_group) >= p.top_k),
           "moe_route: bad groups n_group=", p.n_group, " topk_group=", p.topk_group, " for ", p.num_experts,
           " experts and top_k ", p.top_k);
  LT_CHECK(logits != nullptr && choice != nullptr && experts != nullptr && weights != nullptr,
           "moe_route: null pointer argument");
  if (T == 0) return;
  launch<route_kernel>(Grid{grid_for(T, kBlock), kBlock, 0, stream}, p, logits, choice, bias, logit_offset, experts, weights, T);
  LT_CUDA_CHECK_LAUNCH();
}

void moe_permute(const std::int32_t* experts, std::int64_t T, std::int64_t top_k, std::int64_t first,
                 std::int64_t n_local, std::int32_t* counts, std::int32_t* offsets, std::int32_t* slot,
                 std::int32_t* perm_token, cudaStream_t stream) {
  LT_CHECK(T >= 0 && top_k > 0 && first >= 0 && n_local > 0 && n_local < 65536 && T * top_k < (std::int64_t(1) << 31),
           "moe_permute: bad shape T=", T, " top_k=", top_k, " first=", first, " n_local=", n_local);
  LT_CHECK(experts != nullptr && counts != nullptr && offsets != nullptr && slot != nullptr && perm_token != nullptr,
           "moe_permute: null pointer argument");
  LT_CUDA_CHECK(cudaMemsetAsync(counts, 0, sizeof(std::int32_t) * std::size_t(n_local), stream));
  const std::int64_t pairs = T * top_k;
  if (pairs > 0) {
    launch<count_kernel>(Grid{grid_for(pairs, kBlock), kBlock, 0, stream}, experts, pairs, first, n_local, counts, slot);
    LT_CUDA_CHECK_LAUNCH();
  }
  launch<place_kernel>(Grid{static_cast<unsigned>(n_local), kBlock, 0, stream}, experts, pairs, top_k, first, n_local, counts,
                                                                      offsets, slot, perm_token);
  LT_CUDA_CHECK_LAUNCH();
}

void moe_gather(__nv_bfloat16* x_perm, const __nv_bfloat16* h, const std::int32_t* perm_token,
                const std::int32_t* total_rows, std::int64_t max_rows, std::int64_t H, cudaStream_t stream) {
  LT_CHECK(max_rows >= 0 && H > 0, "moe_gather: bad shape max_rows=", max_rows, " H=", H);
  LT_CHECK(x_perm != nullptr && h != nullptr && perm_token != nullptr && total_rows != nullptr,
           "moe_gather: null pointer argument");
  if (max_rows == 0) return;
  const unsigned grid = static_cast<unsigned>(max_rows < kMaxGrid ? max_rows : kMaxGrid);
  const bool aligned = H % 8 == 0 && reinterpret_cast<std::uintptr_t>(x_perm) % 16 == 0 &&
                       reinterpret_cast<std::uintptr_t>(h) % 16 == 0;
  if (aligned) {
    launch<gather_kernel<8>>(Grid{grid, kBlock, 0, stream}, x_perm, h, perm_token, total_rows, H);
  } else {
    launch<gather_kernel<1>>(Grid{grid, kBlock, 0, stream}, x_perm, h, perm_token, total_rows, H);
  }
  LT_CUDA_CHECK_LAUNCH();
}

void moe_combine(__nv_bfloat16* out, const __nv_bfloat16* y, const std::int32_t* slot, const float* weights,
                 const __nv_bfloat16* shared, std::int64_t T, std::int64_t top_k, std::int64_t H,
                 cudaStream_t stream) {
  LT_CHECK(T >= 0 && top_k > 0 && top_k <= kMaxTopK && H > 0, "moe_combine: bad shape T=", T, " top_k=", top_k,
           " H=", H, " (top_k at most ", kMaxTopK, ")");
  LT_CHECK(out != nullptr && slot != nullptr && weights != nullptr && y != nullptr, "moe_combine: null pointer argument");
  if (T == 0) return;
  const unsigned grid = static_cast<unsigned>(T < kMaxGrid ? T : kMaxGrid);
  launch<combine_kernel>(Grid{grid, kBlock, 0, stream}, out, y, slot, weights, shared, T, top_k, H);
  LT_CUDA_CHECK_LAUNCH();
}

}  // namespace layertap::kernels
