// Element types found in checkpoints and outputs, and exact conversions between them.
#pragma once
#include <bit>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

namespace layertap {

enum class DType { F32, F16, BF16, I32, I64, U8, F8_E4M3 };

std::size_t dtype_size(DType t);
std::string_view dtype_name(DType t);              // "float32", "float16", "bfloat16", "float8_e4m3fn", ...
DType dtype_from_safetensors(std::string_view s);  // "F32", "F16", "BF16", "F8_E4M3", ...; throws on others
DType parse_dtype(std::string_view s);             // "float32"/"fp32"/"bfloat16"/"bf16"/...

// bf16 is the top half of an IEEE float32: widening is exact.
inline float bf16_to_float(uint16_t b) { return std::bit_cast<float>(uint32_t(b) << 16); }

// Round to nearest even, as PyTorch and CUDA do; NaN stays NaN (quiet).
inline uint16_t float_to_bf16(float f) {
  uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// IEEE binary16 to float32, exact for all values including subnormals, Inf and NaN.
float fp16_to_float(uint16_t h);

// float32 to IEEE binary16, round to nearest even (subnormals included, overflow to Inf), as PyTorch
// and CUDA do; NaN stays NaN (quiet).
uint16_t float_to_fp16(float f);

// float8_e4m3fn (1 sign, 4 exponent bits with bias 7, 3 mantissa bits; subnormals; no Inf) to float32,
// exact. 0x7f and 0xff are NaN, returned with the bits torch gives them (0x7ff00000, sign kept).
constexpr float fp8_e4m3fn_to_float(uint8_t code) {
  const uint32_t sign = uint32_t(code & 0x80u) << 24;
  const uint32_t exponent = (code >> 3) & 0xfu;
  const uint32_t mantissa = code & 0x7u;
  if (exponent == 0xf && mantissa == 0x7) return std::bit_cast<float>(sign | 0x7ff00000u);
  // Normal: rebias the exponent 7 -> 127.
  if (exponent != 0) return std::bit_cast<float>(sign | (exponent + 120u) << 23 | mantissa << 20);
  const float magnitude = float(mantissa) * 0x1p-9f;  // zero or subnormal: mantissa * 2^-9, exact
  return sign ? -magnitude : magnitude;
}

// float32 to float8_e4m3fn, round to nearest even with subnormals, as torch's
// c10::detail::fp8e4m3fn_from_fp32_value for |f| <= 464 (everything it does not turn into NaN).
// Unlike torch it saturates: finite |f| > 464 gives +-448 (the largest code, 0x7e), not NaN.
// NaN and +-Inf give NaN (0x7f, sign kept): the format has no infinity.
constexpr uint8_t float_to_fp8_e4m3fn(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const auto sign = uint8_t((u >> 24) & 0x80u);
  const uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude >= 0x7f800000u) return uint8_t(sign | 0x7fu);  // Inf, NaN
  if (magnitude >= 0x43e00000u) return uint8_t(sign | 0x7eu);  // >= 448: 448 (464 ties to it)
  if (magnitude < 0x3c800000u) {
    // Below 2^-6, the smallest normal: steps of 2^-9. Adding 2^14 (whose float32 ulp is 2^-9)
    // rounds to nearest even there; the count of steps (8 = 2^-6) is the code.
    const float shifted = std::bit_cast<float>(magnitude) + 0x1p14f;
    return uint8_t(sign | (std::bit_cast<uint32_t>(shifted) - 0x46800000u));
  }
  // Normal: rebias 127 -> 7 (adding -120 << 23), round off 20 mantissa bits to nearest even.
  const uint32_t rounded = magnitude + 0xc4000000u + 0x7ffffu + ((magnitude >> 20) & 1u);
  return uint8_t(sign | (rounded >> 20));
}

// Convert `n` elements of type `t` at `src` into float32.
void to_float(DType t, const void* src, float* dst, std::size_t n);

}  // namespace layertap
