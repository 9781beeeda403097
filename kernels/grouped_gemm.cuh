// Grouped expert GEMM over packed weights (issue 34 item 1): one launch multiplies the rows of
// every local expert by that expert's weight, read as the device stores it (INT4 groups, MXFP4 as
// INT4 groups with E8M0 scales, FP8 blocks or bf16) and dequantized in registers, never written
// back as bf16:
//
//   y[r, :] = bf16( sum_k x[r, k] * W_e[:, k] )   for every r in [offsets[e], offsets[e+1]), e in [0, n)
//   (then bf16(y + b_e) where the expert's parts hold a bias, see GroupedWeightPart)
//
//   x        (max_rows, K) bf16, row-major; 4-byte aligned, K % 2 == 0 (rows of 2K bytes: every
//            row 4-byte aligned). K by weight format: bf16 K % 2 == 0, FP8 K % 4 == 0, INT4
//            K % 8 == 0 (below). With K % 8 == 0 and x 16-byte aligned (real models' shapes) x is
//            read in 16-byte copies, otherwise in 4-byte copies (slower; e.g. a down projection
//            sliced for tensor parallelism, K = moe_intermediate_size / tp = 12 or 6)
//   y        (max_rows, N) bf16, row-major; 4-byte aligned (2 when N is odd). Rows outside
//            [offsets[0], offsets[n]) are not written
//   offsets  (n + 1) int32 in DEVICE memory (the routing kernels' counts, prefix-summed; the host
//            never reads them): 0 <= offsets[0] <= ... <= offsets[n] <= max_rows. Offsets that
//            break this are clamped to [0, max_rows] (no access out of bounds; rows unspecified)
//   W_e      (N, K): the rows of its P = w.parts_per_expert parts stacked, part p holding rows
//            [p * part_rows, (p + 1) * part_rows) (gate then up: P = 2, one part per checkpoint
//            module, as DeviceWeights keeps them: each PackedPiece its own data and scales)
//   parts    (n * P) GroupedWeightPart in DEVICE memory, expert-major (expert e's part p at
//            e * P + p), each part (part_rows, K) stored as:
//     Int4Group  data: int32 words (part_rows, K / 8), element k at bits 4 (k % 8) of word k / 8,
//                stored q + 8; scales: (part_rows, ceil(K / group)) of scale_type (bf16, f16, f32;
//                E8M0: MXFP4, data its e2m1 codes, scales 1 byte each, group 32).
//                Element = int4_group_element(nibble, scale, scale_type) (quant_element.hpp).
//                group % 32 == 0 (Kimi-K2.5, GPT-OSS: 32). K % 8 == 0 (a row is whole words).
//     Fp8Block   data: float8_e4m3fn (part_rows, K), K % 4 == 0 (rows of whole 4-byte words, the
//                kernel's smallest copy; 16-byte copies when K % 16 == 0); scales: float32 scale_inv
//                (ceil((row_phase + part_rows) / block_rows), ceil((col_phase + K) / block_cols)),
//                the window's part of the scale grid (as dequant.cuh). Element =
//                fp8_block_element(code, scale_inv[(r + row_phase) / block_rows][(k + col_phase) / block_cols]).
//                block_rows >= 1, 0 <= row_phase < block_rows; block_cols % 8 == 0 and
//                col_phase % 8 == 0, 0 <= col_phase < block_cols (DeepSeek-V3: 128 x 128, phases
//                0; its test fixture: 16 x 8). Blocks and phases of whole 64-column K steps
//                (block_cols % 64 == 0, col_phase % 64 == 0) read one scale per row and step,
//                others one per row and 8 columns (a little slower, the same values).
//     Bf16       data: bf16 (part_rows, K), K % 2 == 0 (K % 8 == 0: 16-byte copies, else 4-byte);
//                scales unused (may be null).
//            Every data pointer 16-byte aligned when its rows are a multiple of 16 bytes long
//            (INT4: K % 32 == 0; FP8: K % 16 == 0; bf16: K % 8 == 0), else 4-byte aligned; the
//            kernel traps on a misaligned one. Weight bytes beyond a row's K are never read.
//
// Each weight value is exactly the bf16 that kernels/dequant.cu writes for it (the decoders of
// quant_element.hpp, bit for bit), products of bf16 values are exact in float32 and summed in
// float32 by mma.sync m16n8k16 (sm_80+), and each output is rounded to bf16 once: the result
// differs from the expansion path (dequantize to bf16, then a bf16 GEMM) only by float32
// summation order.
//
// The grid is sized from the host's bound on rows: tiles of kGroupedTileRows rows of one expert x
// kGroupedTileCols columns; each block finds its expert and row tile from `offsets` on the device
// and returns when it has none, so empty experts cost nothing but an idle block each.
//
// Launches on `stream`; throws layertap::Error on bad arguments or a failed launch, and refuses
// devices below sm_80 (as attention_flash). n == 0 or max_rows == 0 launches nothing.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "kernels/quant_element.hpp"

namespace layertap::kernels {

inline constexpr std::int64_t kGroupedTileRows = 64;   // rows of one expert per block
inline constexpr std::int64_t kGroupedTileCols = 128;  // output columns per block

enum class GroupedFormat : std::int32_t { Bf16 = 0, Fp8Block = 1, Int4Group = 2 };

// One part of one expert's weight: where its stored bytes are (device pointers).
struct GroupedWeightPart {
  const void* data = nullptr;    // FP8 codes, INT4 words or bf16 values, (part_rows, K) as above
  const void* scales = nullptr;  // FP8 scale_inv or INT4 group scales (MXFP4: E8M0); null for bf16
  // (part_rows) bf16 or null: the part's rows' bias (GPT-OSS's experts), added as transformers adds
  // it to a bf16 product: y = bf16(bf16(sum) + bias). All parts of an expert have one, or none.
  const __nv_bfloat16* bias = nullptr;
};

// How every expert's weight of one projection is stored (the same for all n experts).
struct GroupedWeights {
  GroupedFormat format = GroupedFormat::Bf16;
  const GroupedWeightPart* parts = nullptr;  // device array (n * parts_per_expert), expert-major
  std::int64_t parts_per_expert = 1;         // P >= 1
  std::int64_t part_rows = 0;                // rows of each part: N == P * part_rows
  // Fp8Block
  std::int64_t block_rows = 128, block_cols = 128, row_phase = 0, col_phase = 0;
  // Int4Group
  std::int64_t group = 32;
  ScaleType scale_type = ScaleType::BF16;
};

// y (max_rows, N) = per expert e, rows [offsets[e], offsets[e+1]) of x (max_rows, K) times W_e^T.
void grouped_gemm(__nv_bfloat16* y, const __nv_bfloat16* x, const std::int32_t* offsets, std::int64_t n,
                  std::int64_t max_rows, std::int64_t N, std::int64_t K, const GroupedWeights& w,
                  cudaStream_t stream);

// Blocks the launch of grouped_gemm uses for these bounds: ceil(N / kGroupedTileCols) times
// floor((max_rows + n (kGroupedTileRows - 1)) / kGroupedTileRows), the most row tiles n experts of
// max_rows rows in all can need (tiles never cross experts).
std::int64_t grouped_gemm_blocks(std::int64_t n, std::int64_t max_rows, std::int64_t N);

}  // namespace layertap::kernels
