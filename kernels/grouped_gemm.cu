// Grouped expert GEMM over packed weights (see grouped_gemm.cuh).
//
// One block of 4 warps computes a tile of kBM = 64 rows of one expert x kBN = 128 output columns.
// Warp w owns columns [32 w, 32 w + 32) of the tile and all 64 rows (4 x 4 mma tiles of 16 x 8,
// 64 float32 accumulators per lane), so each weight value of the tile is decoded once per block.
// K runs in steps of kBK = 64 through a ring of kStages shared-memory slots (INT4 4, FP8 3, bf16
// 2: 48 KiB each) that cp.async fills kStages - 1 steps ahead of the math: the step's x rows
// (64 x 128 bytes) and the packed weight rows (128 x 32, 64 or 128 bytes), 16 bytes per copy, or
// 4 where a format's rows are not a multiple of 16 bytes long (INT4 K % 32 != 0, FP8 K % 16 != 0,
// bf16 K % 8 != 0). x rows likewise: 16 bytes per copy when K % 8 == 0 and x is 16-byte aligned
// (X16, the launcher's choice), else 4 (K % 2 == 0, x 4-byte aligned: a 4-byte word of x holds 2 k,
// all in or all out of K), the slot's layout the same either way.
// Bytes past K, rows past the expert's last and past N are zero-filled by the copy (src-size 0),
// and the scales of groups or blocks past K read as 0, so padding decodes to finite zeros times
// zero inputs (a group or block that K ends inside keeps its scale: its padding codes decode to
// finite values, times x's zeros).
//
//   A fragments  ldmatrix.x4 from the x slot; 16-byte chunks XOR-swizzled by row (conflict-free).
//   B fragments  per lane, the stored bytes of its row n (= the mma's column g) at k 2c, 2c+1, 2c+8,
//                2c+9 of each 16-step, decoded in registers to bf16 pairs:
//                INT4: one 16-byte read per row and 32 k (4 words; byte c of each word holds the
//                lane's two nibbles), one scale per row and group (MXFP4: the same bytes of e2m1
//                codes, a 1-byte E8M0 scale);
//                FP8: two 4-byte reads per row and 16 k; scale_inv per row and step when every
//                step lies in one block (block_cols and col_phase multiples of 64), else per row and
//                8 k (Fine: blocks of any multiple of 8 columns at a phase that is one, so 8 k never
//                cross a block and each half of a 16-step, k 2c..2c+1 or 2c+8..2c+9, has one scale);
//                bf16: ldmatrix.x4 (rows n, columns k: the "col" B operand as stored).
//   scales       each lane's 4 rows, read from global memory one step ahead into registers (FP8
//                Fine: 8 per row and step, the scale columns of its 8-k groups, walked without a
//                division per group).
//   math         mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32; y rounded to bf16 once.
//
// Which expert and row tile a block has: block b = mt * ntiles + nt. Expert e owns the row tiles
// [s(e), s(e+1)) with s(e) = floor((offsets[e] + e (kBM - 1)) / kBM). Since
// floor(a + b) >= floor(a) + floor(b), s(e+1) - s(e) >= ceil(rows_e / kBM): every tile the expert
// needs has a place, and s(n) <= floor((max_rows + n (kBM - 1)) / kBM), the grid's bound. Every
// thread finds the same e by binary search over s (log2 n reads of `offsets`, the same addresses
// for the whole block); a block past its expert's rows returns at once, before any barrier.
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "core/error.hpp"
#include "cuda_check.hpp"
#include "grouped_gemm.cuh"
#include "launch.cuh"
#include "quant_element.hpp"
#include "tensor_core.cuh"

namespace layertap::kernels {
namespace {

constexpr int kBM = int(kGroupedTileRows);
constexpr int kBN = int(kGroupedTileCols);
constexpr int kBK = 64;
constexpr int kThreads = 128;  // 4 warps x 32 columns
constexpr int kXRowBytes = 2 * kBK;                // a step's x row: 128 bytes, 8 chunks
constexpr int kXSlotBytes = kBM * kXRowBytes;      // 8 KiB
static_assert(kBN == kThreads, "the 4-byte weight loader gives each thread one weight row");
static_assert(kBN == 4 * 32, "4 warps of 32 columns");

// Per format: bytes of one weight row per K step, and the pipeline depth.
template <GroupedFormat F>
struct Layout;
template <>
struct Layout<GroupedFormat::Int4Group> {
  static constexpr int kRowBytes = kBK / 2, kStages = 4;
};
template <>
struct Layout<GroupedFormat::Fp8Block> {
  static constexpr int kRowBytes = kBK, kStages = 3;
};
template <>
struct Layout<GroupedFormat::Bf16> {
  static constexpr int kRowBytes = 2 * kBK, kStages = 2;
};
template <GroupedFormat F>
constexpr std::size_t smem_bytes() {
  return std::size_t(Layout<F>::kStages) * std::size_t(kXSlotBytes + kBN * Layout<F>::kRowBytes);
}
// Dynamic shared memory a kernel may use without opting in.
static_assert(smem_bytes<GroupedFormat::Int4Group>() <= 48 * 1024);
static_assert(smem_bytes<GroupedFormat::Fp8Block>() <= 48 * 1024);
static_assert(smem_bytes<GroupedFormat::Bf16>() <= 48 * 1024);

// The launch's shapes (by value; the pointers are separate kernel arguments).
struct Args {
  std::int64_t n, max_rows, N, K;
  std::int64_t ntiles;     // column tiles: ceil(N / kBN)
  std::int64_t P, part_rows;
  std::int64_t block_rows, block_cols, row_phase, col_phase;  // FP8
  std::int64_t group;                                         // INT4
};

// ----------------------------------------------------------------------------------------------
// element decoders: the values of quant_element.hpp, bit for bit, in fewer instructions

// INT4: q = nibble - 8 as a float (2^23 + nibble, less 2^23 + 8: exact), times the scale. bf16
// scales: q * s is exact in float32 (4 x 8 significant bits) and int4_value's rounding to bf16 is
// the one pack_bf16x2 makes; f32: the same float32 product; f16 rounds to f16 first (int4_value).
// E8M0 (MXFP4): int4_value's exact e2m1 product.
template <ScaleType ST>
__device__ __forceinline__ float int4_decoded(std::uint32_t nibble, float scale) {
  if constexpr (ST == ScaleType::F16 || ST == ScaleType::E8M0) {
    return int4_value(nibble, scale, ST);
  } else {
    return (bits_to_float(0x4b000000u | nibble) - 8388616.0f) * scale;
  }
}
// The bf16 pair of a byte's two nibbles (low nibble: the lower k).
template <ScaleType ST>
__device__ __forceinline__ std::uint32_t int4_pair(std::uint32_t byte, float scale) {
  return pack_bf16x2(int4_decoded<ST>(byte & 0xfu, scale), int4_decoded<ST>((byte >> 4) & 0xfu, scale));
}

// fp8_e4m3fn_value: the code's exponent and mantissa placed at float32's exponent bits 23..26 and
// mantissa bits 20..22 read 2^-120 of the value (codes with exponent 0 as float32 subnormals), so
// one exact multiplication by 2^120 gives it; 0x7f and 0xff are NaN.
__device__ __forceinline__ float fp8_value(std::uint32_t code) {
  const float v = bits_to_float((code & 0x80u) << 24 | (code & 0x7fu) << 20) * 0x1p120f;
  return (code & 0x7fu) == 0x7fu ? bits_to_float(0x7fc00000u) : v;
}
// The bf16 pair of two codes (low byte: the lower k): fp8_block_element of each.
__device__ __forceinline__ std::uint32_t fp8_pair(std::uint32_t two_codes, float scale_inv) {
  return pack_bf16x2(fp8_value(two_codes & 0xffu) * scale_inv, fp8_value((two_codes >> 8) & 0xffu) * scale_inv);
}

// 16-byte chunk `ch` of row `row` in a slot: XOR-swizzled so that the 8 rows one ldmatrix phase
// (or one FP8 read) touches lie in different banks.
__device__ __forceinline__ int x_chunk(int row, int ch) { return ch ^ (row & 7); }
template <GroupedFormat F>
__device__ __forceinline__ int w_chunk(int row, int ch) {
  if constexpr (F == GroupedFormat::Int4Group) {
    return ch;  // 32-byte rows: a 16-byte read per row, 2 rows per phase, already apart
  } else if constexpr (F == GroupedFormat::Fp8Block) {
    return ch ^ ((row >> 1) & 3);  // 64-byte rows: rows g = 0..7 at 8 distinct bank quads
  } else {
    return ch ^ (row & 7);  // 128-byte rows, read by ldmatrix as x
  }
}

// ----------------------------------------------------------------------------------------------
// the kernel

// 1-D grid of Args::ntiles x (row-tile bound) blocks, kThreads threads, smem_bytes<F>() of dynamic
// shared memory. V16: weight rows are a multiple of 16 bytes (16-byte copies), else 4-byte copies.
// Fine (FP8 only): a scale per 8 k (block_cols or col_phase not a multiple of kBK), else per step.
// X16: x rows in 16-byte copies (K % 8 == 0, x 16-byte aligned), else 4-byte copies (K % 2 == 0).
template <GroupedFormat F, ScaleType ST, bool V16, bool Fine, bool X16>
__global__ void __launch_bounds__(kThreads)
    grouped_gemm_kernel(__nv_bfloat16* __restrict__ y,                // (max_rows, N)
                        const __nv_bfloat16* __restrict__ x,          // (max_rows, K)
                        const std::int32_t* __restrict__ offsets,     // (n + 1)
                        const GroupedWeightPart* __restrict__ parts,  // (n * P)
                        Args a) {
  constexpr int kStages = Layout<F>::kStages;
  constexpr int kRowBytes = Layout<F>::kRowBytes;
  constexpr int kWSlotBytes = kBN * kRowBytes;
  constexpr int kChunks = kRowBytes / 16;          // 16-byte chunks of a weight row per step
  constexpr int kWRows = V16 ? kChunks : 1;        // weight rows a thread copies per step
  LT_DYNAMIC_SHARED(uint4, smem);
  unsigned char* const xs = reinterpret_cast<unsigned char*>(smem);  // kStages x (kBM, kBK) bf16
  unsigned char* const ws = xs + kStages * kXSlotBytes;              // kStages x (kBN, kRowBytes)

  // ---- this block's expert, rows and columns
  const std::int64_t mt = std::int64_t(blockIdx.x) / a.ntiles, nt = std::int64_t(blockIdx.x) % a.ntiles;
  const auto first_tile = [&](std::int64_t ex) { return (std::int64_t(offsets[ex]) + ex * (kBM - 1)) / kBM; };
  if (first_tile(0) > mt) return;
  std::int64_t lo = 0, hi = a.n;  // the last e in [0, n] with first_tile(e) <= mt
  while (lo < hi) {
    const std::int64_t mid = (lo + hi + 1) / 2;
    if (first_tile(mid) <= mt) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  if (lo >= a.n) return;  // past the last expert's tiles
  const std::int64_t e = lo;
  const auto clamp_row = [&](std::int64_t r) { return r < 0 ? std::int64_t(0) : r > a.max_rows ? a.max_rows : r; };
  const std::int64_t r_begin = clamp_row(offsets[e]);
  const std::int64_t r_end = clamp_row(offsets[e + 1]);
  const std::int64_t row0 = r_begin + (mt - first_tile(e)) * kBM;
  if (row0 >= r_end) return;  // the expert needs fewer tiles than its range holds
  const int rows = int(r_end - row0 < kBM ? r_end - row0 : kBM);

  const int tid = int(threadIdx.x), lane = tid % 32, warp = tid / 32, g = lane / 4, c = lane % 4;
  const std::int64_t N = a.N, K = a.K;
  const std::int64_t n0 = nt * kBN;  // the tile's first output column
  const int nk = int((K + kBK - 1) / kBK);
  const std::int64_t wrow_bytes =
      F == GroupedFormat::Int4Group ? K / 2 : F == GroupedFormat::Fp8Block ? K : 2 * K;  // a stored weight row
  const GroupedWeightPart* const eparts = parts + e * a.P;

  // ---- the weight rows this thread copies, and the scale rows of this lane's B fragments
  const unsigned char* wsrc[kWRows];
#pragma unroll
  for (int i = 0; i < kWRows; ++i) {
    const int r = V16 ? tid / kChunks + i * (kThreads / kChunks) : tid;
    const std::int64_t n = n0 + r;
    wsrc[i] = nullptr;
    if (n < N) {
      const auto* base = static_cast<const unsigned char*>(eparts[n / a.part_rows].data);
      if (reinterpret_cast<std::uintptr_t>(base) % (V16 ? 16u : 4u) != 0) __trap();  // contract: aligned parts
      wsrc[i] = base + (n % a.part_rows) * wrow_bytes;
    }
  }
  // INT4: row n's group scales; FP8: the float32 row of scale_inv that row n falls in.
  static_assert(!Fine || F == GroupedFormat::Fp8Block, "per-8-k scales are FP8's");
  constexpr int kScales = F == GroupedFormat::Int4Group ? 2 : Fine ? kBK / 8 : 1;  // per B row and K step
  const unsigned char* srow[4] = {};
  if constexpr (F != GroupedFormat::Bf16) {
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const std::int64_t n = n0 + warp * 32 + 8 * j + g;
      if (n < N) {
        const auto* s = static_cast<const unsigned char*>(eparts[n / a.part_rows].scales);
        const std::int64_t rr = n % a.part_rows;
        if constexpr (F == GroupedFormat::Int4Group) {
          const std::int64_t groups = (K + a.group - 1) / a.group;
          srow[j] = s + rr * groups * scale_size(ST);
        } else {
          const std::int64_t scale_cols = (a.col_phase + K + a.block_cols - 1) / a.block_cols;
          srow[j] = s + ((rr + a.row_phase) / a.block_rows) * scale_cols * 4;
        }
      }
    }
  }
  // The scales of step kt (0 past N or K, so that zero-filled padding decodes to zeros).
  const auto load_scales = [&](float (&sc)[4][kScales], int kt) {
    if constexpr (Fine) {
      // 8-k group h of the step is group u + h of the scale row's columns counted from col_phase's
      // (col_phase % 8 == 0), in scale column (u + h) / bq, bq = block_cols / 8 groups per block.
      const int bq = int(a.block_cols / 8);
      const int u = kt * (kBK / 8) + int(a.col_phase / 8);
      int col = u / bq, in = u - col * bq;  // scale column of group h, and h's place in it
#pragma unroll
      for (int h = 0; h < kScales; ++h) {
        const bool in_k = std::int64_t(kt) * kBK + 8 * h < K;  // a group K ends inside (K % 8 == 4) keeps its scale
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          float s = 0.0f;
          if (srow[j] != nullptr && in_k) s = reinterpret_cast<const float*>(srow[j])[col];
          sc[j][h] = s;
        }
        if (++in == bq) {
          in = 0;
          ++col;
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int h = 0; h < kScales; ++h) {
          const std::int64_t k = std::int64_t(kt) * kBK + 32 * h;
          float s = 0.0f;
          if (srow[j] != nullptr && k < K) {
            if constexpr (F == GroupedFormat::Int4Group) {
              s = scale_value(srow[j], k / a.group, ST);
            } else if constexpr (F == GroupedFormat::Fp8Block) {
              s = reinterpret_cast<const float*>(srow[j])[(k + a.col_phase) / a.block_cols];
            }
          }
          sc[j][h] = s;
        }
      }
    }
  };

  // ---- one K step's copies into slot `slot` (a zero-fill reads nothing: any mapped address will do,
  // aligned to the copy's size: x, 16-byte aligned under X16, else x rounded down to 16 bytes, which
  // stays inside x's allocation since allocations start 16-byte aligned)
  const void* const nowhere =
      X16 ? static_cast<const void*>(x)
          : reinterpret_cast<const void*>(reinterpret_cast<std::uintptr_t>(x) & ~std::uintptr_t(15));
  const auto load_step = [&](int kt, int slot) {
    const std::int64_t k0 = std::int64_t(kt) * kBK;
    unsigned char* const xd = xs + slot * kXSlotBytes;
    if constexpr (X16) {
      const int xch = tid % 8;
#pragma unroll
      for (int i = 0; i < kBM * 8 / kThreads; ++i) {
        const int r = tid / 8 + i * (kThreads / 8);
        const std::int64_t k = k0 + 8 * xch;
        const bool ok = r < rows && k < K;  // K % 8 == 0: a chunk is all in or all out
        cp_async<16>(xd + r * kXRowBytes + 16 * x_chunk(r, xch), ok ? static_cast<const void*>(x + (row0 + r) * K + k) : nowhere, ok ? 16 : 0);
      }
    } else {
      // A warp copies one row's 32 words (k 2 xw, 2 xw + 1), the 16-byte chunks placed as above.
      // Not unrolled: unrolled, its 16 row addresses hoisted out of the K loop took 50 to 90 more
      // registers (sm_90: 208..254, 2 blocks per SM instead of 3); rolled, no more than the X16
      // instances, for a few instructions per copy.
      const int xw = tid % 32;
#pragma unroll 1
      for (int i = 0; i < kBM * 32 / kThreads; ++i) {
        const int r = tid / 32 + i * (kThreads / 32);
        const std::int64_t k = k0 + 2 * xw;
        const bool ok = r < rows && k < K;  // K % 2 == 0: a word is all in or all out
        cp_async<4>(xd + r * kXRowBytes + 16 * x_chunk(r, xw / 4) + 4 * (xw % 4),
                    ok ? static_cast<const void*>(x + (row0 + r) * K + k) : nowhere, ok ? 4 : 0);
      }
    }
    unsigned char* const wd = ws + slot * kWSlotBytes;
    const std::int64_t kb = std::int64_t(kt) * kRowBytes;  // the step's first byte in a stored row
    if constexpr (V16) {
      const int ch = tid % kChunks;
#pragma unroll
      for (int i = 0; i < kWRows; ++i) {
        const int r = tid / kChunks + i * (kThreads / kChunks);
        const bool ok = wsrc[i] != nullptr && kb + 16 * ch < wrow_bytes;  // rows are whole chunks
        cp_async<16>(wd + r * kRowBytes + 16 * w_chunk<F>(r, ch), ok ? static_cast<const void*>(wsrc[i] + kb + 16 * ch) : nowhere,
                     ok ? 16 : 0);
      }
    } else {
      const int r = tid;
#pragma unroll
      for (int wi = 0; wi < kRowBytes / 4; ++wi) {
        const bool ok = wsrc[0] != nullptr && kb + 4 * wi < wrow_bytes;  // rows are whole words
        cp_async<4>(wd + r * kRowBytes + 16 * w_chunk<F>(r, wi / 4) + 4 * (wi % 4), ok ? static_cast<const void*>(wsrc[0] + kb + 4 * wi) : nowhere, ok ? 4 : 0);
      }
    }
  };

  // ---- the pipeline: step kt's copies are group kt; kStages - 1 groups in flight ahead
  float acc[4][4][4] = {};  // [m tile][n tile][C fragment]
  float sc_next[4][kScales] = {};
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nk) load_step(s, s);
    cp_async_commit();
  }
  if constexpr (F != GroupedFormat::Bf16) load_scales(sc_next, 0);

  for (int kt = 0; kt < nk; ++kt) {
    cp_async_wait<kStages - 2>();  // this thread's copies of step kt have landed
    __syncthreads();               // everyone's have; and step kt - 1's slot is no longer read
    {
      const int ahead = kt + kStages - 1;
      if (ahead < nk) load_step(ahead, ahead % kStages);
      cp_async_commit();  // possibly empty: one group per step keeps the count
    }
    [[maybe_unused]] float sc[4][kScales];
#pragma unroll
    for (int j = 0; j < 4; ++j)
#pragma unroll
      for (int h = 0; h < kScales; ++h) sc[j][h] = sc_next[j][h];
    if constexpr (F != GroupedFormat::Bf16) {
      if (kt + 1 < nk) load_scales(sc_next, kt + 1);
    }
    const unsigned char* const xsl = xs + (kt % kStages) * kXSlotBytes;
    const unsigned char* const wsl = ws + (kt % kStages) * kWSlotBytes;

#pragma unroll
    for (int ks = 0; ks < kBK / 16; ++ks) {
      // A: rows 16 i .. 16 i + 15, k 16 ks .. +15. Matrices (rows +0..7, k +0..7), (+8..15, +0..7),
      // (+0..7, +8..15), (+8..15, +8..15) are a0..a3; lane l addresses row l % 16 of chunk l / 16.
      std::uint32_t af[4][4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int r = 16 * i + (lane & 15), ch = 2 * ks + (lane >> 4);
        ldmatrix_x4<false>(af[i], xsl + r * kXRowBytes + 16 * x_chunk(r, ch));
      }
      // B: n tile j = rows warp * 32 + 8 j .. +7 of the weight slot.
      std::uint32_t bf[4][2];
      if constexpr (F == GroupedFormat::Bf16) {
#pragma unroll
        for (int jp = 0; jp < 4; jp += 2) {
          // Matrices (n tile jp, k +0..7), (jp, +8..15), (jp + 1, +0..7), (jp + 1, +8..15).
          const int m = lane >> 3;
          const int r = warp * 32 + 8 * (jp + (m >> 1)) + (lane & 7), ch = 2 * ks + (m & 1);
          std::uint32_t t[4];
          ldmatrix_x4<false>(t, wsl + r * kRowBytes + 16 * w_chunk<F>(r, ch));
          bf[jp][0] = t[0];
          bf[jp][1] = t[1];
          bf[jp + 1][0] = t[2];
          bf[jp + 1][1] = t[3];
        }
      } else if constexpr (F == GroupedFormat::Fp8Block) {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          // Codes k 2c, 2c+1 in word c / 2 of the step's chunk ks (half c % 2); 2c+8, 2c+9 two words on.
          const int r = warp * 32 + 8 * j + g;
          const unsigned char* p = wsl + r * kRowBytes + 16 * w_chunk<F>(r, ks) + 4 * (c >> 1);
          const int shift = 16 * (c & 1);
          // Fine: k 16 ks + 0..7 are the step's 8-k group 2 ks, + 8..15 group 2 ks + 1.
          const float s0 = sc[j][Fine ? 2 * ks : 0], s1 = sc[j][Fine ? 2 * ks + 1 : 0];
          bf[j][0] = fp8_pair(*reinterpret_cast<const std::uint32_t*>(p) >> shift, s0);
          bf[j][1] = fp8_pair(*reinterpret_cast<const std::uint32_t*>(p + 8) >> shift, s1);
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          // 32 k = 4 words: k 0..7, 8..15 (step 2h), 16..23, 24..31 (step 2h + 1); byte c of a
          // word holds k 2c (low nibble) and 2c + 1 of its 8.
          const int r = warp * 32 + 8 * j + g;
          const uint4 v = *reinterpret_cast<const uint4*>(wsl + r * kRowBytes + 16 * w_chunk<F>(r, ks >> 1));
          const std::uint32_t w0 = (ks & 1) != 0 ? v.z : v.x, w1 = (ks & 1) != 0 ? v.w : v.y;
          const float s = sc[j][(ks >> 1) % kScales];
          bf[j][0] = int4_pair<ST>((w0 >> (8 * c)) & 0xffu, s);
          bf[j][1] = int4_pair<ST>((w1 >> (8 * c)) & 0xffu, s);
        }
      }
#pragma unroll
      for (int i = 0; i < 4; ++i)
#pragma unroll
        for (int j = 0; j < 4; ++j) mma_bf16_16816(acc[i][j], af[i], bf[j][0], bf[j][1]);
    }
  }
  cp_async_wait<0>();  // only empty groups remain; nothing in flight when the block ends

  // ---- y = bf16(acc) (+ bias): rows 16 i + g (+8), columns warp * 32 + 8 j + 2c (+1)
  const bool pairs = N % 2 == 0;  // 4-byte stores (y is 4-byte aligned, every row start too)
  const bool biased = eparts[0].bias != nullptr;
  const auto bias_at = [&](std::int64_t n) {
    return __bfloat162float(eparts[n / a.part_rows].bias[n % a.part_rows]);
  };
#pragma unroll
  for (int i = 0; i < 4; ++i) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int r = 16 * i + g + 8 * h;
      if (r >= rows) continue;
      __nv_bfloat16* const yrow = y + (row0 + r) * N;
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const std::int64_t col = n0 + warp * 32 + 8 * j + 2 * c;
        float v0 = acc[i][j][2 * h], v1 = acc[i][j][2 * h + 1];
        if (biased) {  // the product rounded to bf16, then the bias added (transformers' two ops)
          if (col < N) v0 = __bfloat162float(__float2bfloat16_rn(v0)) + bias_at(col);
          if (col + 1 < N) v1 = __bfloat162float(__float2bfloat16_rn(v1)) + bias_at(col + 1);
        }
        if (pairs && col < N) {
          *reinterpret_cast<std::uint32_t*>(yrow + col) = pack_bf16x2(v0, v1);
        } else {
          if (col < N) yrow[col] = __float2bfloat16_rn(v0);
          if (col + 1 < N) yrow[col + 1] = __float2bfloat16_rn(v1);
        }
      }
    }
  }
}

// ----------------------------------------------------------------------------------------------
// launcher

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

bool aligned(const void* p, std::size_t bytes) { return reinterpret_cast<std::uintptr_t>(p) % bytes == 0; }

// Bytes of one expert's stored weight and scales.
double expert_bytes(const GroupedWeights& w, std::int64_t N, std::int64_t K) {
  switch (w.format) {
    case GroupedFormat::Int4Group:
      return double(N) * double(K / 2) +
             double(N) * double(ceil_div(K, w.group)) * double(scale_size(w.scale_type));
    case GroupedFormat::Fp8Block:
      return double(N) * double(K) + double(w.parts_per_expert) *
                                         double(ceil_div(w.row_phase + w.part_rows, w.block_rows)) *
                                         double(ceil_div(w.col_phase + K, w.block_cols)) * 4.0;
    case GroupedFormat::Bf16: return double(N) * double(K) * 2.0;
  }
  return 0.0;
}

template <GroupedFormat F, ScaleType ST, bool V16, bool Fine, bool X16>
void launch_as(const Grid& grid, __nv_bfloat16* y, const __nv_bfloat16* x, const std::int32_t* offsets,
               const GroupedWeightPart* parts, const Args& a) {
  launch<grouped_gemm_kernel<F, ST, V16, Fine, X16>>(grid, y, x, offsets, parts, a);
}
// The instance for x's copies: 16 bytes (x16: K % 8 == 0 and x 16-byte aligned) or 4.
// x in 4-byte copies serves K % 8 != 0 only, which INT4 rows and 16-byte weight rows never have:
// those instances are not compiled.
template <GroupedFormat F, ScaleType ST, bool V16, bool Fine = false>
void launch_x(bool x16, const Grid& grid, __nv_bfloat16* y, const __nv_bfloat16* x, const std::int32_t* offsets,
              const GroupedWeightPart* parts, const Args& a) {
  if constexpr (F == GroupedFormat::Int4Group || V16) {
    LT_CHECK(x16, "grouped_gemm: internal: 16-byte weight rows without 16-byte x rows");
    launch_as<F, ST, V16, Fine, true>(grid, y, x, offsets, parts, a);
  } else {
    x16 ? launch_as<F, ST, V16, Fine, true>(grid, y, x, offsets, parts, a)
        : launch_as<F, ST, V16, Fine, false>(grid, y, x, offsets, parts, a);
  }
}

}  // namespace

std::int64_t grouped_gemm_blocks(std::int64_t n, std::int64_t max_rows, std::int64_t N) {
  LT_CHECK(n >= 0 && max_rows >= 0 && N >= 0, "grouped_gemm_blocks: bad shape n=", n, " max_rows=", max_rows, " N=", N);
  return ceil_div(N, kBN) * ((max_rows + n * (kBM - 1)) / kBM);
}

void grouped_gemm(__nv_bfloat16* y, const __nv_bfloat16* x, const std::int32_t* offsets, std::int64_t n,
                  std::int64_t max_rows, std::int64_t N, std::int64_t K, const GroupedWeights& w,
                  cudaStream_t stream) {
  constexpr std::int64_t kMaxInt32 = (std::int64_t(1) << 31) - 1;
  LT_CHECK(n >= 0 && n < (std::int64_t(1) << 24) && max_rows >= 0 && max_rows <= kMaxInt32 && N > 0 &&
               N <= kMaxInt32 && K > 0 && K <= kMaxInt32,
           "grouped_gemm: bad shape n=", n, " max_rows=", max_rows, " N=", N, " K=", K);
  LT_CHECK(K % 2 == 0, "grouped_gemm: K=", K, " is not a multiple of 2 (x rows are read 4 bytes at a time)");
  LT_CHECK(w.parts_per_expert >= 1 && w.part_rows >= 1 && w.parts_per_expert * w.part_rows == N,
           "grouped_gemm: ", w.parts_per_expert, " parts of ", w.part_rows, " rows do not make N=", N);
  switch (w.format) {
    case GroupedFormat::Int4Group:
      LT_CHECK(w.group >= 32 && w.group % 32 == 0, "grouped_gemm: INT4 groups of ", w.group,
               " are not supported (a multiple of 32)");
      LT_CHECK(w.scale_type == ScaleType::BF16 || w.scale_type == ScaleType::F16 || w.scale_type == ScaleType::F32 ||
                   w.scale_type == ScaleType::E8M0,
               "grouped_gemm: unknown INT4 scale type");
      LT_CHECK(K % 8 == 0, "grouped_gemm: K=", K, " is not a multiple of 8 (INT4 rows are whole 32-bit words of 8 nibbles)");
      break;
    case GroupedFormat::Fp8Block:
      LT_CHECK(K % 4 == 0, "grouped_gemm: K=", K,
               " is not a multiple of 4 (FP8 rows of K one-byte codes are read 4 bytes at a time)");
      LT_CHECK(w.block_rows >= 1 && w.block_cols >= 8 && w.block_cols % 8 == 0 && w.block_cols <= kMaxInt32 &&
                   w.row_phase >= 0 && w.row_phase < w.block_rows && w.col_phase >= 0 &&
                   w.col_phase < w.block_cols && w.col_phase % 8 == 0,
               "grouped_gemm: FP8 blocks [", w.block_rows, ", ", w.block_cols, "] with phase (", w.row_phase, ", ",
               w.col_phase, ") are not supported (block_cols and col_phase multiples of 8)");
      break;
    case GroupedFormat::Bf16: break;
    default: LT_FAIL("grouped_gemm: unknown weight format ", static_cast<int>(w.format));
  }
  if (n == 0 || max_rows == 0) return;  // no rows: nothing to write
  LT_CHECK(y != nullptr && x != nullptr && offsets != nullptr && w.parts != nullptr,
           "grouped_gemm: null pointer argument");
  LT_CHECK(aligned(x, K % 8 == 0 ? 16 : 4), "grouped_gemm: x must be ", K % 8 == 0 ? 16 : 4,
           "-byte aligned (16 when K % 8 == 0: its rows are read in 16-byte copies)");
  LT_CHECK(aligned(y, N % 2 == 0 ? 4 : 2), "grouped_gemm: y must be ", N % 2 == 0 ? 4 : 2, "-byte aligned");
  const std::int64_t blocks = grouped_gemm_blocks(n, max_rows, N);
  LT_CHECK(blocks <= kMaxInt32, "grouped_gemm: ", blocks, " blocks exceed a grid (n=", n, " max_rows=", max_rows,
           " N=", N, ")");
  int device = 0, major = 0;
  LT_CUDA_CHECK(cudaGetDevice(&device));
  LT_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  LT_CHECK(major >= 8, "grouped_gemm: needs sm_80 or newer (mma.sync bf16, cp.async)");

  const Args a{n, max_rows, N, K, ceil_div(N, kBN), w.parts_per_expert, w.part_rows, w.block_rows, w.block_cols,
               w.row_phase, w.col_phase, w.group};
  Work work;
  work.read = double(n) * (expert_bytes(w, N, K) + double(w.parts_per_expert) * double(sizeof(GroupedWeightPart))) +
              double(n + 1) * 4.0 + double(max_rows) * double(K) * 2.0;
  work.written = double(max_rows) * double(N) * 2.0;
  work.flops = 2.0 * double(max_rows) * double(N) * double(K);
  const auto grid = [&](std::size_t smem) {
    return Grid{dim3(static_cast<unsigned>(blocks)), dim3(kThreads), smem, stream, work};
  };
  using GF = GroupedFormat;
  using S = ScaleType;
  const bool x16 = K % 8 == 0;  // x rows in 16-byte copies (real models' K), else 4-byte
  switch (w.format) {
    case GF::Int4Group: {
      const Grid g = grid(smem_bytes<GF::Int4Group>());
      const bool v16 = K % 32 == 0;  // rows of K / 2 bytes
      if (w.scale_type == S::BF16) {
        v16 ? launch_x<GF::Int4Group, S::BF16, true>(x16, g, y, x, offsets, w.parts, a)
            : launch_x<GF::Int4Group, S::BF16, false>(x16, g, y, x, offsets, w.parts, a);
      } else if (w.scale_type == S::F16) {
        v16 ? launch_x<GF::Int4Group, S::F16, true>(x16, g, y, x, offsets, w.parts, a)
            : launch_x<GF::Int4Group, S::F16, false>(x16, g, y, x, offsets, w.parts, a);
      } else if (w.scale_type == S::E8M0) {
        v16 ? launch_x<GF::Int4Group, S::E8M0, true>(x16, g, y, x, offsets, w.parts, a)
            : launch_x<GF::Int4Group, S::E8M0, false>(x16, g, y, x, offsets, w.parts, a);
      } else {
        v16 ? launch_x<GF::Int4Group, S::F32, true>(x16, g, y, x, offsets, w.parts, a)
            : launch_x<GF::Int4Group, S::F32, false>(x16, g, y, x, offsets, w.parts, a);
      }
      break;
    }
    case GF::Fp8Block: {
      const Grid g = grid(smem_bytes<GF::Fp8Block>());
      const bool v16 = K % 16 == 0;  // rows of K bytes
      if (w.block_cols % kBK == 0 && w.col_phase % kBK == 0) {  // every K step in one block
        v16 ? launch_x<GF::Fp8Block, S::F32, true>(x16, g, y, x, offsets, w.parts, a)
            : launch_x<GF::Fp8Block, S::F32, false>(x16, g, y, x, offsets, w.parts, a);
      } else {  // a scale per 8 k
        v16 ? launch_x<GF::Fp8Block, S::F32, true, true>(x16, g, y, x, offsets, w.parts, a)
            : launch_x<GF::Fp8Block, S::F32, false, true>(x16, g, y, x, offsets, w.parts, a);
      }
      break;
    }
    case GF::Bf16: {
      const Grid g = grid(smem_bytes<GF::Bf16>());
      if (K % 8 == 0) {  // rows of 2K bytes, whole 16-byte chunks
        launch_x<GF::Bf16, S::BF16, true>(x16, g, y, x, offsets, w.parts, a);
      } else {  // K % 2 == 0: whole 4-byte words, and x's copies 4 bytes too
        launch_as<GF::Bf16, S::BF16, false, false, false>(g, y, x, offsets, w.parts, a);
      }
      break;
    }
  }
  LT_CUDA_CHECK_LAUNCH();
}

}  // namespace layertap::kernels
