// Decoders of the quantized weight formats found in MoE checkpoints (docs/MODELS.md, "Checkpoint
// formats"): DeepSeek FP8 blocks, compressed-tensors INT4 groups and MXFP4, each element-exact to
// the format's reference decoder. They decode a window of a 2-D [out, in] matrix whose rows lie in
// memory as stored (any byte alignment) into float32, row-major [rows, cols].
#pragma once
#include <cstddef>
#include <cstdint>

#include "core/dtype.hpp"

namespace layertap::quant {

// A window of a 2-D matrix: rows [row0, row0 + rows) x columns [col0, col0 + cols).
struct Window {
  int64_t row0 = 0, rows = 0, col0 = 0, cols = 0;
};

// DeepSeek FP8 blocks: `w` float8_e4m3fn [out, in]; `scale_inv` float32
// [ceil(out / block_rows), ceil(in / block_cols)] (edge blocks may be partial).
// value[r][c] = float(w[r][c]) * scale_inv[r / block_rows][c / block_cols], in float32.
void dequantize_fp8_block(const std::byte* w, const std::byte* scale_inv, int64_t out, int64_t in,
                          int64_t block_rows, int64_t block_cols, const Window& win, float* dst);

// compressed-tensors `pack-quantized`, symmetric int4 with groups along the input dim:
// `packed` int32 [out, ceil(in / 8)]: element c of a row sits in word c / 8 at bits 4 * (c % 8),
// stored as q + 8 (q in [-8, 7]); `scale` [out, ceil(in / group)] of `scale_dtype` (bf16, f16 or f32).
// value[r][c] = q * scale[r][c / group], rounded to `scale_dtype` as compressed-tensors computes it.
void dequantize_int4_group(const std::byte* packed, const std::byte* scale, DType scale_dtype, int64_t out,
                           int64_t in, int64_t group, const Window& win, float* dst);

// OCP MX FP4 (MXFP4; GPT-OSS's routed experts), blocks of 32 along the input dim, in % 32 == 0:
// `blocks` uint8 [out, in / 32, 16]: element c of a row is nibble c % 2 (low first) of the row's
// byte c / 2 (the byte order of the int4 words above), an FP4 e2m1 code; `scales` uint8 E8M0
// [out, in / 32]. value[r][c] = e2m1 * 2^(scales[r][c / 32] - 127), exact in float32 (+-inf past
// its range), NaN where the scale is 255. Any window: col0 need not start a block.
void dequantize_mxfp4(const std::byte* blocks, const std::byte* scales, int64_t out, int64_t in, const Window& win,
                      float* dst);

}  // namespace layertap::quant
