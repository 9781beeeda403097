#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace layertap {

TEST(Dtype, Bf16RoundsToNearestEven) {
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  // 1 + 2^-8 is exactly half-way between two bf16 values: ties go to the even mantissa (1.0).
  EXPECT_EQ(float_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  // 1 + 3*2^-8 is half-way between 1+2^-7 (odd) and 1+2^-6 (even): rounds up to even.
  EXPECT_EQ(float_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_EQ(float_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(float_to_bf16(std::numeric_limits<float>::infinity()), 0x7f80);
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(std::nanf("")))));
  for (uint32_t b = 0; b < 0x10000; b += 7) {  // every finite bf16 survives a round trip
    const float f = bf16_to_float(uint16_t(b));
    if (std::isfinite(f)) {
      EXPECT_EQ(float_to_bf16(f), b);
    }
  }
}

TEST(Dtype, Fp16DecodesNormalsSubnormalsAndSpecials) {
  EXPECT_EQ(fp16_to_float(0x3c00), 1.0f);
  EXPECT_EQ(fp16_to_float(0xc000), -2.0f);
  EXPECT_EQ(fp16_to_float(0x7bff), 65504.0f);
  EXPECT_EQ(fp16_to_float(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
  EXPECT_EQ(fp16_to_float(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(fp16_to_float(0x0400), std::ldexp(1.0f, -14));  // smallest normal
  EXPECT_TRUE(std::signbit(fp16_to_float(0x8000)));
  EXPECT_TRUE(std::isinf(fp16_to_float(0xfc00)));
  EXPECT_TRUE(std::isnan(fp16_to_float(0x7e00)));
}

TEST(Dtype, ParsesNamesAndRejectsOthers) {
  EXPECT_EQ(parse_dtype("bf16"), DType::BF16);
  EXPECT_EQ(parse_dtype("float32"), DType::F32);
  EXPECT_EQ(dtype_from_safetensors("F16"), DType::F16);
  EXPECT_THROW(dtype_from_safetensors("F8_E5M2"), Error);
  EXPECT_THROW(parse_dtype("int4"), Error);
}

TEST(Dtype, Float8E4M3IsAOneByteSafetensorsType) {
  EXPECT_EQ(dtype_from_safetensors("F8_E4M3"), DType::F8_E4M3);
  EXPECT_EQ(dtype_size(DType::F8_E4M3), 1u);
  EXPECT_EQ(dtype_name(DType::F8_E4M3), "float8_e4m3fn");
  EXPECT_THROW(parse_dtype("float8_e4m3fn"), Error);  // not a type hidden states are stored in
  const uint8_t codes[] = {0x38, 0xb8, 0x7e, 0x01};     // 1, -1, 448, 2^-9
  float values[4];
  to_float(DType::F8_E4M3, codes, values, 4);
  EXPECT_EQ(values[0], 1.0f);
  EXPECT_EQ(values[1], -1.0f);
  EXPECT_EQ(values[2], 448.0f);
  EXPECT_EQ(values[3], std::ldexp(1.0f, -9));
}

TEST(Dtype, Fp16RoundsToNearestEven) {
  for (uint32_t h = 0; h < 0x10000; ++h) {  // every half but NaN survives a round trip, -0 included
    const float f = fp16_to_float(uint16_t(h));
    if (!std::isnan(f)) {
      EXPECT_EQ(float_to_fp16(f), h);
    }
  }
  EXPECT_EQ(float_to_fp16(1.0f + std::ldexp(1.0f, -11)), 0x3c00);      // tie to even: down
  EXPECT_EQ(float_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)), 0x3c02);  // tie to even: up
  EXPECT_EQ(float_to_fp16(65519.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);  // the tie above the largest half overflows
  EXPECT_EQ(float_to_fp16(-1e10f), 0xfc00);
  EXPECT_EQ(float_to_fp16(std::ldexp(1.0f, -25)), 0x0000);  // half the smallest subnormal: to even
  EXPECT_EQ(float_to_fp16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(float_to_fp16(std::ldexp(3.0f, -25)), 0x0002);  // 1.5 subnormal steps: to even
  EXPECT_EQ(float_to_fp16(-std::ldexp(1.0f, -26)), 0x8000);
  EXPECT_EQ(float_to_fp16(std::ldexp(2047.0f, -25)), 0x0400);  // rounds up into the smallest normal
  EXPECT_TRUE(std::isnan(fp16_to_float(float_to_fp16(std::nanf("")))));
}

}  // namespace layertap
