#include "core/dtype.hpp"

#include "core/error.hpp"

namespace layertap {

std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::F32: return 4;
    case DType::F16: return 2;
    case DType::BF16: return 2;
    case DType::I32: return 4;
    case DType::I64: return 8;
    case DType::U8: return 1;
    case DType::F8_E4M3: return 1;
  }
  return 0;
}

std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::F32: return "float32";
    case DType::F16: return "float16";
    case DType::BF16: return "bfloat16";
    case DType::I32: return "int32";
    case DType::I64: return "int64";
    case DType::U8: return "uint8";
    case DType::F8_E4M3: return "float8_e4m3fn";
  }
  return "?";
}

DType dtype_from_safetensors(std::string_view s) {
  if (s == "F32") return DType::F32;
  if (s == "F16") return DType::F16;
  if (s == "BF16") return DType::BF16;
  if (s == "I32") return DType::I32;
  if (s == "I64") return DType::I64;
  if (s == "U8") return DType::U8;
  if (s == "F8_E4M3") return DType::F8_E4M3;
  LT_FAIL("unsupported safetensors dtype '", s, "' (supported: F32, F16, BF16, I32, I64, U8, F8_E4M3)");
}

DType parse_dtype(std::string_view s) {
  if (s == "float32" || s == "fp32") return DType::F32;
  if (s == "float16" || s == "fp16") return DType::F16;
  if (s == "bfloat16" || s == "bf16") return DType::BF16;
  LT_FAIL("unknown dtype '", s, "' (expected bfloat16, float16 or float32)");
}

float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    bits = sign | 0x7f800000u | (mant << 13);  // Inf / NaN
  } else if (exp != 0) {
    bits = sign | ((exp + 112u) << 23) | (mant << 13);  // normal: rebias 15 -> 127
  } else if (mant == 0) {
    bits = sign;  // signed zero
  } else {
    // Subnormal: value = mant * 2^-24; normalise into float32.
    int e = -1;
    do {
      mant <<= 1;
      ++e;
    } while ((mant & 0x400u) == 0);
    bits = sign | uint32_t(112 - e) << 23 | ((mant & 0x3ffu) << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t float_to_fp16(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const auto sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t magnitude = u & 0x7fffffffu;
  if (magnitude > 0x7f800000u) return uint16_t(sign | 0x7e00u | ((magnitude >> 13) & 0x3ffu));  // NaN
  // 65520 is half-way between 65504 (largest half, odd mantissa) and 2^16: it and above become Inf.
  if (magnitude >= 0x477ff000u) return uint16_t(sign | 0x7c00u);
  if (magnitude >= 0x38800000u) {  // normal half (>= 2^-14): rebias 127 -> 15, round off 13 bits
    uint32_t rebiased = magnitude - 0x38000000u;
    rebiased += 0xfffu + ((rebiased >> 13) & 1u);  // a carry into the exponent is the right result
    return uint16_t(sign | (rebiased >> 13));
  }
  // Subnormal half: a count of 2^-24. Below 2^-25 (exponent field < 102) everything rounds to zero.
  const uint32_t exponent = magnitude >> 23;
  if (exponent < 102) return sign;
  const uint32_t significand = (magnitude & 0x7fffffu) | 0x800000u;  // value = significand * 2^(exponent-150)
  const uint32_t shift = 126 - exponent;                             // 14..24 bits to drop
  const uint32_t dropped = significand & ((1u << shift) - 1u);
  const uint32_t half = 1u << (shift - 1);
  uint32_t count = significand >> shift;
  if (dropped > half || (dropped == half && (count & 1u))) ++count;  // 0x400 is the smallest normal
  return uint16_t(sign | count);
}

void to_float(DType t, const void* src, float* dst, std::size_t n) {
  switch (t) {
    case DType::F32:
      if (n != 0) std::memcpy(dst, src, n * sizeof(float));  // dst may be null when n == 0
      return;
    // 16-bit elements may sit at odd addresses inside a mapped file: read them with memcpy.
    case DType::BF16: {
      const auto* s = static_cast<const std::byte*>(src);
      for (std::size_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, s + 2 * i, 2);
        dst[i] = bf16_to_float(v);
      }
      return;
    }
    case DType::F16: {
      const auto* s = static_cast<const std::byte*>(src);
      for (std::size_t i = 0; i < n; ++i) {
        uint16_t v;
        std::memcpy(&v, s + 2 * i, 2);
        dst[i] = fp16_to_float(v);
      }
      return;
    }
    case DType::F8_E4M3: {
      const auto* s = static_cast<const uint8_t*>(src);
      for (std::size_t i = 0; i < n; ++i) dst[i] = fp8_e4m3fn_to_float(s[i]);
      return;
    }
    default:
      LT_FAIL("cannot convert ", dtype_name(t), " to float32");
  }
}

}  // namespace layertap
