// Quantized weights kept packed on the device and expanded to bf16 before a product (docs/GPU.md,
// "What runs where"): DeepSeek FP8 blocks, compressed-tensors INT4 groups, and MXFP4 as INT4 groups
// of 32 with E8M0 scales (its bytes are laid out as INT4 words). Each element equals
// float_to_bf16 of what the CPU decoders (src/model/quant_formats.cpp) give, bit for bit: the
// device path and the float32-upload path hold the same bf16 weights. Also the seeded random
// packed weights of the synthetic models. Usable from host C++ (g++) and from .cu files.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include "kernels/quant_element.hpp"

namespace layertap::kernels {

// dst (rows, cols) bf16 = bf16(float(code[r][c]) * scale_inv[(r + row_phase) / block_rows][(c + col_phase) / block_cols])
//   codes      (rows, cols)  float8_e4m3fn bytes of a window of the checkpoint's matrix
//   scale_inv  (ceil((row_phase + rows) / block_rows), ceil((col_phase + cols) / block_cols)) float32,
//              the window's part of the scale grid; row_phase = row0 % block_rows, col_phase likewise
// Launches on `stream`; throws layertap::Error on bad arguments or a failed launch.
void dequantize_fp8_block(__nv_bfloat16* dst, const std::uint8_t* codes, const float* scale_inv, std::int64_t rows,
                          std::int64_t cols, std::int64_t block_rows, std::int64_t block_cols, std::int64_t row_phase,
                          std::int64_t col_phase, cudaStream_t stream);

// dst (rows, cols) bf16 = int4_group_element(nibble[r][c], scale[r][c / group], scale_type)  (quant_element.hpp)
//   words   (rows, ceil(cols / 8))      int32 of 8 nibbles, element c at bits 4 * (c % 8): q + 8, or
//                                       MXFP4's e2m1 codes (E8M0 scales; group 32)
//   scales  (rows, ceil(cols / group))  of `scale_type` (bf16, f16 or f32 bits, or E8M0 bytes)
// The window starts on a group boundary (and so on a word): its columns are [0, cols) of `words`.
void dequantize_int4_group(__nv_bfloat16* dst, const std::uint32_t* words, const void* scales,
                           ScaleType scale_type, std::int64_t rows, std::int64_t cols, std::int64_t group,
                           cudaStream_t stream);

// Seeded random packed weights (synthetic models; pure functions of (seed, i) as fill_uniform_bf16):
// FP8 codes uniform over the finite e4m3 codes with |value| <= 448 (NaN codes 0x7f and 0xff
// never drawn); INT4 words with 8 uniform nibbles; float32 values fma(scale, u, offset).
void fill_random_fp8(std::uint8_t* codes, std::int64_t n, std::uint64_t seed, cudaStream_t stream);
void fill_random_int4(std::uint32_t* words, std::int64_t n, std::uint64_t seed, cudaStream_t stream);
void fill_uniform_f32(float* x, std::int64_t n, std::uint64_t seed, float offset, float scale, cudaStream_t stream);

}  // namespace layertap::kernels
