// Causal GQA attention over a packed batch (see attention.cuh).
//   reference: one block per (query, head), keys in chunks of the block size, online softmax.
//   flash:     one block of 4 warps per (query tile of 64, head); each warp owns 16 query rows;
//              S = Q K^T and O += P V with mma.sync m16n8k16 bf16 (float32 accumulators), online
//              softmax in registers (FlashAttention-2's scheme).
#include <cmath>
#include <cstdint>
#include <vector>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "attention.cuh"
#include "core/error.hpp"
#include "cuda_check.hpp"
#include "launch.cuh"
#include "tensor_core.cuh"

namespace layertap::kernels {
namespace {

// ----------------------------------------------------------------------------------------------
// kernels: reference

constexpr int kRefBlock = 128;             // keys per chunk = threads per block
constexpr int kRefWarps = kRefBlock / 32;
constexpr int kRefDimsPerThread = 4;       // v head dim <= kRefBlock * kRefDimsPerThread = 512
constexpr std::int64_t kRefMaxDim = kRefBlock * kRefDimsPerThread;

__device__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
__device__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

// Max / sum over the block, returned to every thread; `scratch` holds kRefWarps floats. Ends with
// a barrier, so shared memory written before the call is visible after it.
__device__ float block_max(float v, float* scratch) {
  v = warp_max(v);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float r = scratch[0];
  for (int w = 1; w < kRefWarps; ++w) r = fmaxf(r, scratch[w]);
  __syncthreads();
  return r;
}
__device__ float block_sum(float v, float* scratch) {
  v = warp_sum(v);
  if (threadIdx.x % 32 == 0) scratch[threadIdx.x / 32] = v;
  __syncthreads();
  float r = 0.0f;
  for (int w = 0; w < kRefWarps; ++w) r += scratch[w];
  __syncthreads();
  return r;
}

// grid (T, hq), block kRefBlock; dynamic shared memory: q (qk_dim) | p (kRefBlock) | scratch (kRefWarps) floats.
__global__ void __launch_bounds__(kRefBlock)
    attention_reference_kernel(__nv_bfloat16* __restrict__ ctx,  // (T, hq * v_dim)
                               AttentionLayout a,
                               const std::int32_t* __restrict__ pos,  // (T)
                               std::int64_t window) {
  LT_DYNAMIC_SHARED(float, smem);
  const std::int64_t hd = a.qk_dim, vd = a.v_dim;
  float* q = smem;             // (qk_dim)
  float* p = q + hd;           // (kRefBlock)
  float* scratch = p + kRefBlock;

  const std::int64_t t = blockIdx.x, h = blockIdx.y;
  const std::int64_t g = h / (a.hq / a.hkv);
  const float scale = a.scale;
  const __nv_bfloat16* k = a.k + g * hd;  // key j at k + j * a.k_row
  const __nv_bfloat16* v = a.v + g * vd;  // value j at v + j * a.v_row
  for (std::int64_t d = threadIdx.x; d < hd; d += kRefBlock) q[d] = __bfloat162float(a.q[t * a.q_row + h * hd + d]);
  const std::int64_t u = t + a.key_offset;  // the query's own key row
  std::int64_t lo = u - pos[t];
  if (window > 0 && u - window + 1 > lo) lo = u - window + 1;
  if (a.chunk > 0 && u - pos[t] % a.chunk > lo) lo = u - pos[t] % a.chunk;  // the chunk's first key row
  __syncthreads();

  // A sink is a logit seen before the first key: the running max starts at it, the sum at its exp(0).
  float m = a.sinks != nullptr ? a.sinks[h] : -INFINITY, l = a.sinks != nullptr ? 1.0f : 0.0f;
  float acc[kRefDimsPerThread] = {};
  for (std::int64_t j0 = lo; j0 <= u; j0 += kRefBlock) {
    const std::int64_t j = j0 + threadIdx.x;
    float s = -INFINITY;
    if (j <= u) {
      const __nv_bfloat16* kj = k + j * a.k_row;
      float dot = 0.0f;
      for (std::int64_t d = 0; d < hd; ++d) dot += q[d] * __bfloat162float(kj[d]);
      s = dot * scale;
    }
    const float m_new = fmaxf(m, block_max(s, scratch));  // finite: key j0 <= u is in the chunk
    const float pj = j <= u ? expf(s - m_new) : 0.0f;
    p[threadIdx.x] = pj;
    const float alpha = expf(m - m_new);  // 0 on the first chunk without a sink (m = -inf)
    l = l * alpha + block_sum(pj, scratch);
    m = m_new;
    const std::int64_t n = u - j0 + 1 < kRefBlock ? u - j0 + 1 : kRefBlock;
#pragma unroll
    for (int r = 0; r < kRefDimsPerThread; ++r) {
      const std::int64_t d = threadIdx.x + r * kRefBlock;
      if (d < vd) {
        float sum = acc[r] * alpha;
        for (std::int64_t jj = 0; jj < n; ++jj) sum += p[jj] * __bfloat162float(v[(j0 + jj) * a.v_row + d]);
        acc[r] = sum;
      }
    }
    __syncthreads();  // p is rewritten by the next chunk
  }
  __nv_bfloat16* out = ctx + t * a.hq * vd + h * vd;
#pragma unroll
  for (int r = 0; r < kRefDimsPerThread; ++r) {
    const std::int64_t d = threadIdx.x + r * kRefBlock;
    if (d < vd) out[d] = __float2bfloat16_rn(acc[r] / l);
  }
}

// ----------------------------------------------------------------------------------------------
// kernels: flash
//
// mma.sync.m16n8k16 fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
// g = lane / 4 and c = lane % 4, each register holding two bf16 (lower column/row in the low half):
//   A (16x16, row-major)  a[0]: (g, 2c..2c+1)   a[1]: (g+8, 2c..2c+1)
//                         a[2]: (g, 2c+8..+9)   a[3]: (g+8, 2c+8..+9)
//   B (16x8, "col")       b[0]: (k 2c..2c+1, n g)   b[1]: (k 2c+8..2c+9, n g)
//   C (16x8, float32)     c[0..1]: (g, 2c..2c+1)    c[2..3]: (g+8, 2c..2c+1)

constexpr int kFlashWarps = 4;  // x 16 rows = kFlashTile queries
constexpr int kFlashThreads = kFlashWarps * 32;
constexpr int kKeys = 64;       // keys per tile
constexpr int kPad = 8;         // bf16 of padding per shared row: conflict-free fragment loads

static_assert(kFlashWarps * 16 == kFlashTile, "each warp owns 16 query rows");

__device__ __forceinline__ std::uint32_t load_u32(const __nv_bfloat16* p) {
  return *reinterpret_cast<const std::uint32_t*>(p);
}

// grid (num_tiles, hq), block kFlashThreads. QK: head dim of queries and keys; VD: of values.
template <int QK, int VD>
__global__ void __launch_bounds__(kFlashThreads)
    attention_flash_kernel(__nv_bfloat16* __restrict__ ctx,  // (T, hq * VD)
                           AttentionLayout a,
                           const std::int32_t* __restrict__ pos,    // (T)
                           const std::int32_t* __restrict__ tiles,  // (num_tiles, 2)
                           std::int64_t window) {
  constexpr int kKT = QK / 16;  // k-steps of Q K^T
  constexpr int kND = VD / 8;   // n-tiles of O
  constexpr int kNT = kKeys / 8;  // n-tiles of S
  __shared__ __align__(16) __nv_bfloat16 ks[kKeys][QK + kPad];  // (keys, QK)
  __shared__ __align__(16) __nv_bfloat16 vs[kKeys][VD + kPad];  // (keys, VD)

  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int g = lane / 4, c = lane % 4;
  const std::int64_t q0 = tiles[2 * blockIdx.x], q1 = tiles[2 * blockIdx.x + 1];
  const std::int64_t hq = a.hq;
  const std::int64_t h = blockIdx.y, kvh = h / (hq / a.hkv);
  const float scale = a.scale;
  const std::int64_t off = a.key_offset;            // query row r's own key is key row r + off
  const std::int64_t t0 = q0 + off - pos[q0];       // first key row of the sample
  const std::int64_t r0 = q0 + warp * 16 + g, r1 = r0 + 8;  // this thread's two query rows
  const std::int64_t u0 = r0 + off, u1 = r1 + off;          // and their own key rows

  // Q fragments straight from global memory (rows past the tile read as zeros).
  std::uint32_t qa[kKT][4];
#pragma unroll
  for (int kt = 0; kt < kKT; ++kt) {
    const int col = kt * 16 + 2 * c;
    const __nv_bfloat16* p0 = a.q + r0 * a.q_row + h * QK + col;
    const __nv_bfloat16* p1 = a.q + r1 * a.q_row + h * QK + col;
    qa[kt][0] = r0 < q1 ? load_u32(p0) : 0u;
    qa[kt][1] = r1 < q1 ? load_u32(p1) : 0u;
    qa[kt][2] = r0 < q1 ? load_u32(p0 + 8) : 0u;
    qa[kt][3] = r1 < q1 ? load_u32(p1 + 8) : 0u;
  }
  // lo(u): the first key row the query with own key row u (position u - t0) may see;
  // nondecreasing in u, so lo(q0 + off) starts the key loop: key tiles wholly before the query
  // tile's earliest window or chunk start are skipped. The query tile may span chunks (and rows
  // see different windows): each row masks by its own lo.
  const std::int64_t chunk = a.chunk;
  const auto lowest_key = [&](std::int64_t u) {
    std::int64_t lo = window > 0 && u - window + 1 > t0 ? u - window + 1 : t0;
    if (chunk > 0 && u - (u - t0) % chunk > lo) lo = u - (u - t0) % chunk;
    return lo;
  };
  const std::int64_t lo0 = lowest_key(u0), lo1 = lowest_key(u1);

  float o[kND][4] = {};
  // Running row maxima of the scaled scores and this thread's partial row sums. A sink is a logit
  // seen before the first key: the maxima start at it, and lane c = 0 of each row holds its exp(0).
  const float sink = a.sinks != nullptr ? a.sinks[h] : -INFINITY;
  float m0 = sink, m1 = sink;
  float l0 = a.sinks != nullptr && c == 0 ? 1.0f : 0.0f, l1 = l0;
  const std::int64_t last_key = q1 - 1 + off;
  for (std::int64_t k0 = lowest_key(q0 + off); k0 <= last_key; k0 += kKeys) {
    // K and V tile (keys k0 .. k0+63) into shared memory, 16 bytes per access; keys past the
    // tile's last query are zeros (never read out of bounds, never NaN * 0).
    __syncthreads();  // the previous tile's fragments are all read
    constexpr int kChunksK = QK / 8, kChunksV = VD / 8;  // uint4 per row
    for (int i = threadIdx.x; i < kKeys * kChunksK; i += kFlashThreads) {
      const int r = i / kChunksK, ch = i % kChunksK;
      const std::int64_t j = k0 + r;
      uint4 kv = {0u, 0u, 0u, 0u};
      if (j <= last_key) kv = *reinterpret_cast<const uint4*>(a.k + j * a.k_row + kvh * QK + ch * 8);
      *reinterpret_cast<uint4*>(&ks[r][ch * 8]) = kv;
    }
    for (int i = threadIdx.x; i < kKeys * kChunksV; i += kFlashThreads) {
      const int r = i / kChunksV, ch = i % kChunksV;
      const std::int64_t j = k0 + r;
      uint4 vv = {0u, 0u, 0u, 0u};
      if (j <= last_key) vv = *reinterpret_cast<const uint4*>(a.v + j * a.v_row + kvh * VD + ch * 8);
      *reinterpret_cast<uint4*>(&vs[r][ch * 8]) = vv;
    }
    __syncthreads();

    // S (16 x 64 per warp) = Q K^T
    float s[kNT][4] = {};
#pragma unroll
    for (int kt = 0; kt < kKT; ++kt) {
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const __nv_bfloat16* kp = &ks[nt * 8 + g][kt * 16 + 2 * c];
        mma_bf16_16816(s[nt], qa[kt], load_u32(kp), load_u32(kp + 8));
      }
    }

    // Scale, mask, and the online softmax update of both rows.
    float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        const std::int64_t j = k0 + nt * 8 + 2 * c + e;
        s[nt][e] = (j <= u0 && j >= lo0) ? s[nt][e] * scale : -INFINITY;
        s[nt][2 + e] = (j <= u1 && j >= lo1) ? s[nt][2 + e] * scale : -INFINITY;
        mx0 = fmaxf(mx0, s[nt][e]);
        mx1 = fmaxf(mx1, s[nt][2 + e]);
      }
    }
    // A row's 64 scores sit on the 4 lanes of its group (same g, c = 0..3).
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
    mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
    mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
    const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
    // A row with no visible key yet keeps max -inf: subtract 0 instead, so exp gives 0, not NaN.
    const float base0 = mn0 == -INFINITY ? 0.0f : mn0, base1 = mn1 == -INFINITY ? 0.0f : mn1;
    const float alpha0 = expf(m0 - base0), alpha1 = expf(m1 - base1);
    m0 = mn0;
    m1 = mn1;
    l0 *= alpha0;
    l1 *= alpha1;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
      s[nt][0] = expf(s[nt][0] - base0);
      s[nt][1] = expf(s[nt][1] - base0);
      s[nt][2] = expf(s[nt][2] - base1);
      s[nt][3] = expf(s[nt][3] - base1);
      l0 += s[nt][0] + s[nt][1];
      l1 += s[nt][2] + s[nt][3];
    }
#pragma unroll
    for (int nd = 0; nd < kND; ++nd) {
      o[nd][0] *= alpha0;
      o[nd][1] *= alpha0;
      o[nd][2] *= alpha1;
      o[nd][3] *= alpha1;
    }

    // O (16 x VD per warp) += P V: P's accumulator layout is the A layout of keys 16 at a time.
#pragma unroll
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      const std::uint32_t pa[4] = {pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                                   pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                                   pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int nd = 0; nd < kND; nd += 2) {
        // Matrices: (keys +0..7, dims nd), (keys +8..15, dims nd), (+0..7, nd+1), (+8..15, nd+1);
        // transposed, each gives the B fragment register of its (k half, n-tile).
        const int mat = lane / 8;
        const __nv_bfloat16* vp = &vs[kk * 16 + (mat % 2) * 8 + lane % 8][(nd + mat / 2) * 8];
        std::uint32_t b[4];
        ldmatrix_x4<true>(b, vp);
        mma_bf16_16816(o[nd], pa, b[0], b[1]);
        mma_bf16_16816(o[nd + 1], pa, b[2], b[3]);
      }
    }
  }

  // Row sums over the 4 lanes of each row, then ctx = O / l for the rows inside the tile.
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
#pragma unroll
  for (int nd = 0; nd < kND; ++nd) {
    const int col = nd * 8 + 2 * c;
    if (r0 < q1) {
      *reinterpret_cast<std::uint32_t*>(ctx + r0 * hq * VD + h * VD + col) = pack_bf16x2(o[nd][0] / l0, o[nd][1] / l0);
    }
    if (r1 < q1) {
      *reinterpret_cast<std::uint32_t*>(ctx + r1 * hq * VD + h * VD + col) = pack_bf16x2(o[nd][2] / l1, o[nd][3] / l1);
    }
  }
}

void check_layout(const void* ctx, const AttentionLayout& a, const void* pos, std::int64_t T, std::int64_t window,
                  const char* name) {
  LT_CHECK(T >= 0 && T < (std::int64_t(1) << 31) && a.hq > 0 && a.hkv > 0 && a.hq % a.hkv == 0 && a.qk_dim > 0 &&
               a.v_dim > 0 && window >= 0 && a.chunk >= 0 && a.key_offset >= 0 &&
               a.key_offset < (std::int64_t(1) << 31),
           name, ": bad shape T=", T, " hq=", a.hq, " hkv=", a.hkv, " qk_dim=", a.qk_dim, " v_dim=", a.v_dim,
           " window=", window, " chunk=", a.chunk, " key_offset=", a.key_offset);
  LT_CHECK(a.q_row >= a.hq * a.qk_dim && a.k_row >= a.hkv * a.qk_dim && a.v_row >= a.hkv * a.v_dim, name,
           ": row strides q ", a.q_row, ", k ", a.k_row, ", v ", a.v_row, " are shorter than the heads they hold");
  LT_CHECK(a.hq < 65536, name, ": ", a.hq, " query heads is more than a grid dimension holds");
  LT_CHECK(ctx != nullptr && a.q != nullptr && a.k != nullptr && a.v != nullptr && pos != nullptr, name,
           ": null pointer argument");
  LT_CHECK(a.attended_pairs == 0 || a.attended_pairs >= T, name, ": ", a.attended_pairs,
           " attended pairs for ", T, " queries (each attends at least its own key)");
}

// The stated work of one launch over T queries and T + key_offset key rows, per (pair, head) of
// the attended pairs (unstated: T, one key per query). Bytes: q, k, v, pos once each (the key
// rows that a sample's query tiles and a group's heads share hit L2), sinks, ctx written.
Work attention_work(const AttentionLayout& a, std::int64_t T, bool flash) {
  const double e = sizeof(__nv_bfloat16), pairs = double(a.attended_pairs > 0 ? a.attended_pairs : T) * double(a.hq);
  Work w;
  w.read = e * (double(T) * double(a.hq * a.qk_dim) + double(T + a.key_offset) * double(a.hkv * (a.qk_dim + a.v_dim))) +
           4.0 * double(T) + (a.sinks != nullptr ? 4.0 * double(a.hq) : 0.0);
  w.written = e * double(T) * double(a.hq * a.v_dim);
  if (flash) {
    w.flops = 2 * pairs * double(a.qk_dim + a.v_dim);  // mma.sync S = Q K^T, O += P V (masked tile halves not counted)
    w.ops = 16 * pairs;  // per score: scale, mask, max, exp, row sum, bf16 pack (~16)
  } else {
    // ~4 per q.k and p.v element (load, widen, FMA), ~20 for the online softmax and block reductions
    w.ops = pairs * (4.0 * double(a.qk_dim + a.v_dim) + 20);
  }
  return w;
}

bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

}  // namespace

// ----------------------------------------------------------------------------------------------
// launchers

void attention_reference(__nv_bfloat16* ctx, const AttentionLayout& a, const std::int32_t* pos, std::int64_t T,
                         std::int64_t window, cudaStream_t stream) {
  check_layout(ctx, a, pos, T, window, "attention_reference");
  LT_CHECK(a.qk_dim <= kRefMaxDim && a.v_dim <= kRefMaxDim, "attention_reference: head dims ", a.qk_dim, "/",
           a.v_dim, " exceed ", kRefMaxDim);
  if (T == 0) return;
  const std::size_t smem = sizeof(float) * std::size_t(a.qk_dim + kRefBlock + kRefWarps);
  const dim3 grid(static_cast<unsigned>(T), static_cast<unsigned>(a.hq));
  launch<attention_reference_kernel>(Grid{grid, kRefBlock, smem, stream, attention_work(a, T, false)}, ctx, a, pos,
                                     window);
  LT_CUDA_CHECK_LAUNCH();
}

std::int64_t count_attended_pairs(const std::vector<std::int64_t>& offsets, std::int64_t first_position,
                                  std::int64_t window, std::int64_t chunk) {
  LT_CHECK(!offsets.empty() && offsets.front() == 0 && first_position >= 0 && window >= 0 && chunk >= 0,
           "count_attended_pairs: offsets must start at 0, first position ", first_position, ", window ", window,
           " and chunk ", chunk, " must not be negative");
  // Keys seen by the queries at positions 0 .. m-1 without a chunk: sum over k = 1..m of min(k, window).
  const auto windowed = [window](std::int64_t m) {
    return window == 0 || m <= window ? m * (m + 1) / 2 : window * (window + 1) / 2 + (m - window) * window;
  };
  // With one: position p sees min(p % chunk + 1, window), the same in every whole chunk.
  const auto upto = [&](std::int64_t m) {
    return chunk == 0 ? windowed(m) : (m / chunk) * windowed(chunk) + windowed(m % chunk);
  };
  std::int64_t pairs = 0;
  for (std::size_t s = 0; s + 1 < offsets.size(); ++s) {
    LT_CHECK(offsets[s + 1] >= offsets[s], "count_attended_pairs: offsets decrease at sample ", s);
    const std::int64_t p0 = s == 0 ? first_position : 0;
    pairs += upto(p0 + offsets[s + 1] - offsets[s]) - upto(p0);
  }
  return pairs;
}

std::vector<std::int32_t> flash_query_tiles(const std::vector<std::int64_t>& offsets) {
  LT_CHECK(!offsets.empty() && offsets.front() == 0, "flash_query_tiles: offsets must start at 0");
  std::vector<std::int32_t> tiles;
  for (std::size_t s = 0; s + 1 < offsets.size(); ++s) {
    LT_CHECK(offsets[s + 1] >= offsets[s] && offsets[s + 1] < (std::int64_t(1) << 31),
             "flash_query_tiles: offsets must be nondecreasing and below 2^31");
    for (std::int64_t b = offsets[s]; b < offsets[s + 1]; b += kFlashTile) {
      tiles.push_back(static_cast<std::int32_t>(b));
      tiles.push_back(static_cast<std::int32_t>(b + kFlashTile < offsets[s + 1] ? b + kFlashTile : offsets[s + 1]));
    }
  }
  return tiles;
}

std::int64_t max_flash_tiles(std::int64_t max_tokens) {
  // ceil(n / 64) <= n / 64 + 1 per non-empty sample, and there are at most max_tokens of those.
  return max_tokens / kFlashTile + max_tokens + 1;
}

bool flash_attention_supported(std::int64_t qk_dim, std::int64_t v_dim) {
  const bool shape = (qk_dim == v_dim && (qk_dim == 64 || qk_dim == 128)) || (qk_dim == 192 && v_dim == 128);
  if (!shape) return false;
  int device = 0, major = 0;
  LT_CUDA_CHECK(cudaGetDevice(&device));
  LT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  return major >= 8;
}

bool flash_attention_supported(std::int64_t hd) { return flash_attention_supported(hd, hd); }

void attention_flash(__nv_bfloat16* ctx, const AttentionLayout& a, const std::int32_t* pos, const std::int32_t* tiles,
                     std::int64_t num_tiles, std::int64_t T, std::int64_t window, cudaStream_t stream) {
  check_layout(ctx, a, pos, T, window, "attention_flash");
  LT_CHECK(tiles != nullptr && num_tiles >= 0 && num_tiles < (std::int64_t(1) << 31),
           "attention_flash: bad tile table (", num_tiles, " tiles)");
  LT_CHECK(flash_attention_supported(a.qk_dim, a.v_dim), "attention_flash: head dims ", a.qk_dim, "/", a.v_dim,
           " or this device are not supported (64/64, 128/128 or 192/128 on sm_80+)");
  // 16-byte loads of K/V rows, 4-byte loads of Q and stores of ctx.
  LT_CHECK(aligned(a.k, 16) && aligned(a.v, 16) && a.k_row % 8 == 0 && a.v_row % 8 == 0 && aligned(a.q, 4) &&
               a.q_row % 2 == 0 && aligned(ctx, 4),
           "attention_flash: k and v must be 16-byte aligned with row strides of 8 elements, q and ctx 4-byte aligned");
  if (T == 0 || num_tiles == 0) return;
  const dim3 grid(static_cast<unsigned>(num_tiles), static_cast<unsigned>(a.hq));
  Work work = attention_work(a, T, true);
  work.read += 8.0 * double(num_tiles);  // the tile table
  const Grid g{grid, kFlashThreads, 0, stream, work};
  if (a.qk_dim == 64) {
    launch<attention_flash_kernel<64, 64>>(g, ctx, a, pos, tiles, window);
  } else if (a.qk_dim == 128) {
    launch<attention_flash_kernel<128, 128>>(g, ctx, a, pos, tiles, window);
  } else {
    launch<attention_flash_kernel<192, 128>>(g, ctx, a, pos, tiles, window);
  }
  LT_CUDA_CHECK_LAUNCH();
}

}  // namespace layertap::kernels
