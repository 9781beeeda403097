// One element of the packed weight formats, decoded the same way on the host and on the device
// (plain C++ without CUDA headers; __host__ __device__ under nvcc). The device dequantization
// kernels (dequant.cu) call these, and a host test checks them against the CPU decoders of
// src/model/quant_formats.cpp over every code, nibble and scale class, so the two paths agree bit
// for bit (NaN codes give NaN; their payload bits may differ).
#pragma once
#include <cstdint>
#include <cstring>

#if defined(__CUDACC__)
#define LT_HD __host__ __device__
#else
#define LT_HD
#endif

namespace layertap::kernels {

// The type of Int4Group scales as stored: compressed-tensors INT4 writes bf16 (f16 and f32
// accepted); MXFP4 (OCP MX FP4, GPT-OSS's experts) writes E8M0, one uint8 exponent per group of 32,
// its FP4 e2m1 codes packed in the bytes of INT4 words (element c: byte c / 2, low nibble first).
enum class ScaleType : std::int32_t { BF16 = 0, F16 = 1, F32 = 2, E8M0 = 3 };

// Bytes of one stored scale.
LT_HD constexpr int scale_size(ScaleType t) { return t == ScaleType::F32 ? 4 : t == ScaleType::E8M0 ? 1 : 2; }

LT_HD inline float bits_to_float(std::uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
#endif
}

LT_HD inline std::uint32_t float_to_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  std::uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  return u;
#endif
}

// float32 -> bf16 bits, round to nearest even; NaN stays a quiet NaN (core/dtype.hpp's float_to_bf16).
LT_HD inline std::uint16_t bf16_bits_of(float f) {
  std::uint32_t u = float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return std::uint16_t((u >> 16) | 0x40u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return std::uint16_t(u >> 16);
}
LT_HD inline float bf16_value(std::uint16_t b) { return bits_to_float(std::uint32_t(b) << 16); }

// IEEE binary16 <-> float32, round to nearest even (core/dtype.cpp's float_to_fp16 / fp16_to_float).
LT_HD inline std::uint16_t f16_bits_of(float f) {
  const std::uint32_t u = float_to_bits(f);
  const auto sign = std::uint16_t((u >> 16) & 0x8000u);
  const std::uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return std::uint16_t(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));
  if (magnitude >= 0x477ff000u) return std::uint16_t(sign | 0x7c00u);
  if (magnitude >= 0x38800000u) {
    std::uint32_t rebiased = magnitude - 0x38000000u;
    rebiased += 0xfffu + ((rebiased >> 13) & 1u);
    return std::uint16_t(sign | (rebiased >> 13));
  }
  const std::uint32_t exponent = magnitude >> 23;
  if (exponent < 102) return sign;
  const std::uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;
  const std::uint32_t shift = 126 - exponent;
  const std::uint32_t dropped = significand & ((1u << shift) - 1u);
  const std::uint32_t half = 1u << (shift - 1);
  std::uint32_t count = significand >> shift;
  if (dropped > half || (dropped == half && (count & 1u))) ++count;
  return std::uint16_t(sign | count);
}
LT_HD inline float f16_value(std::uint16_t h) {
  const std::uint32_t sign = std::uint32_t(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  std::uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;
  } else {
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400u) == 0);
    bits = sign | std::uint32_t(112 - e) << 23 | ((mant & 0x3ffu) << 13);
  }
  return bits_to_float(bits);
}

// float8_e4m3fn -> float32, exact (core/dtype.hpp's fp8_e4m3fn_to_float).
LT_HD inline float fp8_e4m3fn_value(std::uint32_t code) {
  const std::uint32_t sign = (code & 0x80u) << 24;
  const std::uint32_t exponent = (code >> 3) & 0xfu;
  const std::uint32_t mantissa = code & 0x7u;
  if (exponent == 0xf && mantissa == 0x7) return bits_to_float(sign | 0x7ff00000u);
  if (exponent != 0) return bits_to_float(sign | (exponent + 120u) << 23 | mantissa << 20);
  const float magnitude = float(mantissa) * 0x1p-9f;
  return sign ? -magnitude : magnitude;
}

// E8M0 code s -> 2^(s - 127), exact: built from bits (s = 0 is 2^-127, a float32 subnormal);
// s = 255 is E8M0's NaN.
LT_HD inline float e8m0_value(std::uint32_t s) {
  if (s == 255u) return bits_to_float(0x7fc00000u);
  return bits_to_float(s == 0u ? 0x00400000u : s << 23);
}

// FP4 e2m1 code -> float32, exact: {0, .5, 1, 1.5, 2, 3, 4, 6}, bit 3 the sign (bits 4 and up
// ignored). Its 2 exponent bits and mantissa bit placed at float32's bits 23..24 and 22 read 2^-126
// of the value (exponent 0 as a subnormal), so one exact multiplication by 2^126 gives it.
LT_HD inline float e2m1_value(std::uint32_t code) {
  return bits_to_float((code & 0x8u) << 28 | (code & 0x7u) << 22) * 0x1p126f;
}

// A scale as stored, widened to float32 (exact).
LT_HD inline float scale_value(const void* scales, std::int64_t i, ScaleType t) {
  switch (t) {
    case ScaleType::BF16: return bf16_value(static_cast<const std::uint16_t*>(scales)[i]);
    case ScaleType::F16: return f16_value(static_cast<const std::uint16_t*>(scales)[i]);
    case ScaleType::E8M0: return e8m0_value(static_cast<const std::uint8_t*>(scales)[i]);
    default: return static_cast<const float*>(scales)[i];
  }
}

// An Int4Group element widened to float32. bf16, f16, f32 scales: compressed-tensors' q * scale in
// the scale's dtype (q = nibble - 8). E8M0: MXFP4's e2m1(nibble) * scale, exact (at most 2
// significant bits times a power of two; +-inf past float32's range, scales 2^126 and 2^127).
LT_HD inline float int4_value(std::uint32_t nibble, float scale, ScaleType t) {
  if (t == ScaleType::E8M0) return e2m1_value(nibble) * scale;
  const float product = float(int(nibble) - 8) * scale;
  switch (t) {
    case ScaleType::BF16: return bf16_value(bf16_bits_of(product));
    case ScaleType::F16: return f16_value(f16_bits_of(product));
    default: return product;
  }
}

// The bf16 bits the device holds for an FP8-block element: bf16(float(code) * scale_inv).
LT_HD inline std::uint16_t fp8_block_element(std::uint32_t code, float scale_inv) {
  return bf16_bits_of(fp8_e4m3fn_value(code) * scale_inv);
}

// The bf16 bits the device holds for an INT4-group (or MXFP4: E8M0 scales) element.
LT_HD inline std::uint16_t int4_group_element(std::uint32_t nibble, float scale, ScaleType t) {
  return bf16_bits_of(int4_value(nibble, scale, t));
}

}  // namespace layertap::kernels
