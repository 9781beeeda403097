#include "model/quant_formats.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.hpp"

// What the reference decoders compute (torch 2.15, compressed-tensors 0.20.0), matched bit for bit:
//
// float8_e4m3fn -> float32: c10::detail::fp8e4m3fn_to_fp32_value (torch/headeronly/util/
//   Float8_e4m3fn.h), an exact bit conversion; NaN codes come out as 0x7ff00000 / 0xfff00000.
//
// DeepSeek FP8 blocks: float32(w) * scale_inv of the element's block, one float32 multiplication
//   (docs/MODELS.md, "Checkpoint formats"; not transformers' CPU path, which stretches the scale
//   grid).
//
// compressed-tensors pack-quantized int4 (compressors/pack_quantized/):
//   - pack_to_int32 (helpers.py): q in [-8, 7] is stored as q + 8; element i of a row goes to bit
//     i * 4 of the row's bit string, so word i / 8 at bits 4 * (i % 8); each row is padded to whole
//     words: weight_packed is int32 [out, ceil(in / 8)]. unpack_from_int32 reads those words as
//     little-endian bytes, low nibble first, and subtracts 8.
//   - weight_shape is int64 [2] = [out, in] (torch.tensor(weight.shape), base.py compress).
//   - Symmetric schemes drop weight_zero_point at compression, so decompression has no zero point.
//   - dequantize (quantization/lifecycle/forward.py) -> forward_helpers._dequantize:
//     q.to(scale.dtype) * scale, in scale.dtype, returned in scale.dtype (transformers then casts
//     it to the model dtype). For bf16/f16 scales q * scale is exact in float32 (at most 4 + 11
//     significant bits), so torch's product is float32(q) * float32(scale) rounded once, to nearest
//     even, to the scale's dtype: bf16(q * s) or f16(q * s); for float32 scales the float32 product.
//   - Groups run along the input dim; the library rejects in % group != 0, so a partial last group
//     never reaches it (here it would simply use the last scale column).
//
// MXFP4 (transformers integrations/mxfp4.py, _convert_moe_packed_tensors): the FP4 lookup table at
//   each byte's low nibble (even column), then high nibble, times ldexp(1, scale - 127): an FP4
//   value (2 significant bits) times a power of two, exact in float32 and in the bf16 it returns
//   unless it overflows. Scale 255 is E8M0's NaN in the OCP MX spec and here (transformers' ldexp
//   would give +-inf, NaN for zeros); the checkpoint value rule is the place to refuse it.

namespace layertap::quant {

static_assert(std::endian::native == std::endian::little,
              "the int32 words of weight_packed are read as little-endian bytes");

namespace {

constexpr std::array<float, 256> make_fp8_table() {
  std::array<float, 256> table{};
  for (int code = 0; code < 256; ++code) table[std::size_t(code)] = fp8_e4m3fn_to_float(uint8_t(code));
  return table;
}
constexpr std::array<float, 256> kFp8ToFloat = make_fp8_table();

void check_window(const Window& win, int64_t out, int64_t in, const char* format) {
  LT_CHECK(out >= 0 && in >= 0, format, ": negative matrix shape [", out, ", ", in, "]");
  LT_CHECK(win.rows >= 0 && win.cols >= 0 && win.row0 >= 0 && win.col0 >= 0 && win.row0 <= out &&
               win.col0 <= in && win.rows <= out - win.row0 && win.cols <= in - win.col0,
           format, ": window rows [", win.row0, ", ", win.row0, " + ", win.rows, ") x columns [", win.col0,
           ", ", win.col0, " + ", win.cols, ") is not inside the [", out, ", ", in, "] matrix");
}

template <typename T>
T load(const std::byte* p) {  // the mapping gives no alignment guarantee
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

// float32(q) * scale rounded to the scale's dtype, widened back to float32 (exact).
float int4_value(int q, float scale, DType scale_dtype) {
  const float product = float(q) * scale;
  switch (scale_dtype) {
    case DType::BF16: return bf16_to_float(float_to_bf16(product));
    case DType::F16: return fp16_to_float(float_to_fp16(product));
    default: return product;
  }
}

float load_scale(const std::byte* p, DType scale_dtype) {
  switch (scale_dtype) {
    case DType::BF16: return bf16_to_float(load<uint16_t>(p));
    case DType::F16: return fp16_to_float(load<uint16_t>(p));
    default: return load<float>(p);
  }
}

// FP4 e2m1 codes: bit 3 the sign, then {0, 0.5, 1, 1.5, 2, 3, 4, 6}.
constexpr std::array<float, 16> kE2m1 = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                         -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
constexpr int64_t kMxBlock = 32;  // elements per E8M0 scale

}  // namespace

void dequantize_fp8_block(const std::byte* w, const std::byte* scale_inv, int64_t out, int64_t in,
                          int64_t block_rows, int64_t block_cols, const Window& win, float* dst) {
  LT_CHECK(block_rows > 0 && block_cols > 0, "fp8 block dequantization: block size [", block_rows, ", ",
           block_cols, "] must be positive");
  check_window(win, out, in, "fp8 block dequantization");
  const int64_t scale_cols = (in + block_cols - 1) / block_cols;
  const int64_t col_end = win.col0 + win.cols;
  for (int64_t r = 0; r < win.rows; ++r) {
    const int64_t row = win.row0 + r;
    const auto* codes = reinterpret_cast<const uint8_t*>(w) + row * in;  // bytes: no alignment needed
    const std::byte* scale_row = scale_inv + (row / block_rows) * scale_cols * int64_t(sizeof(float));
    float* out_row = dst + r * win.cols;
    // One scale per stretch of the row inside one block.
    for (int64_t c = win.col0; c < col_end;) {
      const int64_t block = c / block_cols;
      const int64_t stretch_end = std::min(col_end, (block + 1) * block_cols);
      const float scale = load<float>(scale_row + block * int64_t(sizeof(float)));
      for (; c < stretch_end; ++c) out_row[c - win.col0] = kFp8ToFloat[codes[c]] * scale;
    }
  }
}

void dequantize_int4_group(const std::byte* packed, const std::byte* scale, DType scale_dtype, int64_t out,
                           int64_t in, int64_t group, const Window& win, float* dst) {
  LT_CHECK(group > 0, "int4 group dequantization: group size ", group, " must be positive");
  LT_CHECK(scale_dtype == DType::BF16 || scale_dtype == DType::F16 || scale_dtype == DType::F32,
           "int4 group dequantization: scales must be bfloat16, float16 or float32, not ", dtype_name(scale_dtype));
  check_window(win, out, in, "int4 group dequantization");
  const int64_t row_bytes = (in + 7) / 8 * 4;  // int32 words of 8 nibbles
  const int64_t scale_size = int64_t(dtype_size(scale_dtype));
  const int64_t scale_row_bytes = (in + group - 1) / group * scale_size;
  const int64_t col_end = win.col0 + win.cols;
  for (int64_t r = 0; r < win.rows; ++r) {
    const int64_t row = win.row0 + r;
    const auto* nibbles = reinterpret_cast<const uint8_t*>(packed) + row * row_bytes;
    const std::byte* scale_row = scale + row * scale_row_bytes;
    float* out_row = dst + r * win.cols;
    // Per stretch of the row inside one group: the 16 possible values, then a lookup per element.
    for (int64_t c = win.col0; c < col_end;) {
      const int64_t g = c / group;
      const int64_t stretch_end = std::min(col_end, (g + 1) * group);
      const float s = load_scale(scale_row + g * scale_size, scale_dtype);
      std::array<float, 16> value_of_nibble;
      for (int nibble = 0; nibble < 16; ++nibble) {
        value_of_nibble[std::size_t(nibble)] = int4_value(nibble - 8, s, scale_dtype);
      }
      for (; c < stretch_end; ++c) {  // element c: byte c / 2 of the row, low nibble first
        out_row[c - win.col0] = value_of_nibble[(nibbles[c / 2] >> (4 * (c % 2))) & 0xfu];
      }
    }
  }
}

void dequantize_mxfp4(const std::byte* blocks, const std::byte* scales, int64_t out, int64_t in, const Window& win,
                      float* dst) {
  LT_CHECK(in % kMxBlock == 0, "mxfp4 dequantization: ", in, " input columns are not whole blocks of ", kMxBlock);
  check_window(win, out, in, "mxfp4 dequantization");
  const int64_t row_bytes = in / 2, scale_row_bytes = in / kMxBlock;
  const int64_t col_end = win.col0 + win.cols;
  for (int64_t r = 0; r < win.rows; ++r) {
    const int64_t row = win.row0 + r;
    const auto* codes = reinterpret_cast<const uint8_t*>(blocks) + row * row_bytes;
    const auto* scale_row = reinterpret_cast<const uint8_t*>(scales) + row * scale_row_bytes;
    float* out_row = dst + r * win.cols;
    // Per stretch of the row inside one block: the 16 possible values, then a lookup per element.
    for (int64_t c = win.col0; c < col_end;) {
      const int64_t b = c / kMxBlock;
      const int64_t stretch_end = std::min(col_end, (b + 1) * kMxBlock);
      const int s = scale_row[b];
      std::array<float, 16> value_of_code;
      for (std::size_t code = 0; code < 16; ++code) {
        value_of_code[code] = s == 255 ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(kE2m1[code], s - 127);
      }
      for (; c < stretch_end; ++c) {  // element c: byte c / 2 of the row, low nibble first
        out_row[c - win.col0] = value_of_code[(codes[c / 2] >> (4 * (c % 2))) & 0xfu];
      }
    }
  }
}

}  // namespace layertap::quant
