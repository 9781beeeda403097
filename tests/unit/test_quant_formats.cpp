// The quantized-weight decoders against the reference vectors of tools/make_quant_vectors.py
// (tests/fixtures/quant/): torch's float8_e4m3fn conversion, FP8 blocks dequantized in torch, and
// int4 matrices packed and decompressed by compressed-tensors itself. Equality is bit for bit.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "model/quant_formats.hpp"
#include "model/safetensors.hpp"

namespace layertap::quant {
namespace {

const std::string kQuantDir = std::string(LAYERTAP_FIXTURES) + "/quant/";

std::vector<int64_t> read_i64(const Checkpoint& ck, const std::string& name) {
  const TensorInfo& t = ck.info(name);
  EXPECT_EQ(t.dtype, DType::I64) << name;
  EXPECT_EQ(t.shape.size(), 1u) << name;
  std::vector<int64_t> v(std::size_t(t.shape.at(0)));
  std::memcpy(v.data(), ck.read_bytes(name).data(), v.size() * sizeof(int64_t));
  return v;
}

// Rows [row0, row0 + rows) x columns [col0, col0 + cols) of a row-major [.., in] matrix.
std::vector<float> crop(const std::vector<float>& full, int64_t in, const Window& w) {
  std::vector<float> part;
  for (int64_t r = w.row0; r < w.row0 + w.rows; ++r) {
    for (int64_t c = w.col0; c < w.col0 + w.cols; ++c) part.push_back(full[std::size_t(r * in + c)]);
  }
  return part;
}

// Bit equality (so -0 differs from +0 and NaN payloads count), reporting the first difference.
void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  std::size_t differ = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    if (std::bit_cast<uint32_t>(got[i]) != std::bit_cast<uint32_t>(want[i]) && differ++ == 0) {
      ADD_FAILURE() << what << ": element " << i << " is " << got[i] << ", the reference gives " << want[i];
    }
  }
  EXPECT_EQ(differ, 0u) << what;
}

std::string describe(const Window& w) {
  return "window rows " + std::to_string(w.row0) + "+" + std::to_string(w.rows) + " cols " + std::to_string(w.col0) +
         "+" + std::to_string(w.cols);
}

// Windows of an [out, in] matrix cut into [block_rows, block_cols] blocks (or groups: block_rows 1).
std::vector<Window> test_windows(int64_t out, int64_t in, int64_t block_rows, int64_t block_cols) {
  const int64_t r0 = block_rows / 2 + 1, c0 = block_cols / 2 + 1;  // mid-block; odd, so mid-word for int4
  return {
      {0, out, 0, in},                         // everything
      {r0, out - r0 - 1, c0, in - c0 - 1},     // starts mid-block, ends one short of both edges
      {out - 1, 1, 0, in},                     // the last row, in the partial edge block
      {0, out, in - 1, 1},                     // the last column
      {out / 2, 1, c0, 1},                     // one element
      {block_rows - 1, 2, block_cols - 1, 2},  // 2 x 2 across a block corner
  };
}

// A copy of `n` bytes at an odd address, to show the decoders need no alignment.
struct Misaligned {
  Misaligned(const std::byte* src, std::size_t n) : storage(n + 3) { std::memcpy(storage.data() + 3, src, n); }
  const std::byte* data() const { return storage.data() + 3; }
  std::vector<std::byte> storage;
};

// ---- float8_e4m3fn ----

TEST(QuantFormats, EveryFp8CodeDecodesAsTorchDoes) {
  const Checkpoint ck({kQuantDir + "fp8_codes.safetensors"});
  const TensorInfo& codes = ck.info("codes");
  ASSERT_EQ(codes.dtype, DType::F8_E4M3);
  ASSERT_EQ(codes.shape, std::vector<int64_t>{256});
  // read_bytes: the values include torch's NaNs, which Checkpoint::read refuses as weights.
  ASSERT_EQ(ck.info("values").dtype, DType::F32);
  std::vector<float> torch_values(256);
  std::memcpy(torch_values.data(), ck.read_bytes("values").data(), 256 * sizeof(float));

  const std::vector<std::byte> bytes = ck.read_bytes("codes");
  std::vector<float> ours(256), via_to_float(256);
  for (int i = 0; i < 256; ++i) {
    ASSERT_EQ(std::to_integer<int>(bytes[std::size_t(i)]), i);
    ours[std::size_t(i)] = fp8_e4m3fn_to_float(uint8_t(i));
  }
  to_float(DType::F8_E4M3, bytes.data(), via_to_float.data(), 256);
  expect_same_bits(ours, torch_values, "fp8_e4m3fn_to_float");
  expect_same_bits(via_to_float, torch_values, "to_float(F8_E4M3)");
  for (int i = 0; i < 256; ++i) EXPECT_EQ(std::isnan(ours[std::size_t(i)]), (i & 0x7f) == 0x7f) << i;
  EXPECT_EQ(fp8_e4m3fn_to_float(0x7e), 448.0f);                // largest finite
  EXPECT_EQ(fp8_e4m3fn_to_float(0x01), std::ldexp(1.0f, -9));  // smallest subnormal
  EXPECT_TRUE(std::signbit(fp8_e4m3fn_to_float(0x80)));        // -0
}

// ---- DeepSeek FP8 blocks ----

struct Fp8BlockCase {
  std::string name;
  std::vector<std::byte> stored_weight, stored_scale_inv;  // as read from the fixture
  const std::byte* weight = nullptr;                        // stored_weight's, or a misaligned copy
  const std::byte* scale_inv = nullptr;
  int64_t out = 0, in = 0, block_rows = 0, block_cols = 0;
  std::vector<float> expected;  // [out, in]

  std::vector<float> decode(const Window& w) const {
    std::vector<float> dst(std::size_t(w.rows * w.cols));
    dequantize_fp8_block(weight, scale_inv, out, in, block_rows, block_cols, w, dst.data());
    return dst;
  }
};

Fp8BlockCase load_fp8_block_case(const Checkpoint& ck, const std::string& name) {
  Fp8BlockCase c;
  c.name = name;
  const TensorInfo& w = ck.info(name + ".weight");
  const TensorInfo& s = ck.info(name + ".weight_scale_inv");
  EXPECT_EQ(w.dtype, DType::F8_E4M3);
  EXPECT_EQ(s.dtype, DType::F32);
  c.stored_weight = ck.read_bytes(w.name);
  c.stored_scale_inv = ck.read_bytes(s.name);
  c.weight = c.stored_weight.data();  // a moved vector keeps its buffer
  c.scale_inv = c.stored_scale_inv.data();
  c.out = w.shape.at(0);
  c.in = w.shape.at(1);
  const std::vector<int64_t> block = read_i64(ck, name + ".block_size");
  c.block_rows = block.at(0);
  c.block_cols = block.at(1);
  EXPECT_NE(c.out % c.block_rows, 0) << name << ": the rows should end in a partial block";
  EXPECT_NE(c.in % c.block_cols, 0) << name << ": the columns should end in a partial block";
  EXPECT_EQ(s.shape, (std::vector<int64_t>{(c.out + c.block_rows - 1) / c.block_rows,
                                           (c.in + c.block_cols - 1) / c.block_cols}));
  c.expected = ck.read(name + ".expected", {c.out, c.in});
  return c;
}

TEST(QuantFormats, Fp8BlocksMatchTorchIncludingPartialEdgeBlocks) {
  const Checkpoint ck({kQuantDir + "fp8_block.safetensors"});
  for (const char* name : {"small", "edge128"}) {
    const Fp8BlockCase c = load_fp8_block_case(ck, name);
    for (const Window& w : test_windows(c.out, c.in, c.block_rows, c.block_cols)) {
      expect_same_bits(c.decode(w), crop(c.expected, c.in, w), c.name + " " + describe(w));
    }
  }
}

TEST(QuantFormats, Fp8BlocksNeedNoAlignment) {
  const Checkpoint ck({kQuantDir + "fp8_block.safetensors"});
  Fp8BlockCase c = load_fp8_block_case(ck, "small");
  const std::size_t scale_bytes = ck.info("small.weight_scale_inv").shape.at(0) *
                                  ck.info("small.weight_scale_inv").shape.at(1) * sizeof(float);
  const Misaligned weight(c.weight, std::size_t(c.out * c.in)), scale_inv(c.scale_inv, scale_bytes);
  c.weight = weight.data();
  c.scale_inv = scale_inv.data();
  expect_same_bits(c.decode({0, c.out, 0, c.in}), c.expected, "misaligned fp8 block");
}

// ---- compressed-tensors int4 groups ----

struct Int4Case {
  std::string name;
  std::vector<std::byte> stored_packed, stored_scale;  // as read from the fixture
  const std::byte* packed = nullptr;                    // stored_packed's, or a misaligned copy
  const std::byte* scale = nullptr;
  DType scale_dtype = DType::BF16;
  int64_t out = 0, in = 0, group = 0;
  std::vector<float> expected;  // [out, in], what compressed-tensors decompresses, widened exactly

  std::vector<float> decode(const Window& w) const {
    std::vector<float> dst(std::size_t(w.rows * w.cols));
    dequantize_int4_group(packed, scale, scale_dtype, out, in, group, w, dst.data());
    return dst;
  }
  int64_t packed_row_bytes() const { return (in + 7) / 8 * 4; }
};

Int4Case load_int4_case(const Checkpoint& ck, const std::string& name) {
  Int4Case c;
  c.name = name;
  const std::vector<int64_t> shape = read_i64(ck, name + ".weight_shape");
  c.out = shape.at(0);
  c.in = shape.at(1);
  c.group = read_i64(ck, name + ".group_size").at(0);
  const TensorInfo& packed = ck.info(name + ".weight_packed");
  const TensorInfo& scale = ck.info(name + ".weight_scale");
  EXPECT_EQ(packed.dtype, DType::I32);
  EXPECT_EQ(packed.shape, (std::vector<int64_t>{c.out, (c.in + 7) / 8}));
  EXPECT_EQ(scale.shape, (std::vector<int64_t>{c.out, (c.in + c.group - 1) / c.group}));
  c.stored_packed = ck.read_bytes(packed.name);
  c.stored_scale = ck.read_bytes(scale.name);
  c.packed = c.stored_packed.data();
  c.scale = c.stored_scale.data();
  c.scale_dtype = scale.dtype;
  EXPECT_EQ(ck.info(name + ".weight").dtype, scale.dtype) << "compressed-tensors decompresses to the scale's dtype";
  c.expected = ck.read(name + ".weight", {c.out, c.in});
  return c;
}

const char* const kInt4Cases[] = {"bf16_g32", "f16_g32", "f32_g32", "bf16_g20_in60"};

TEST(QuantFormats, Int4GroupsMatchCompressedTensors) {
  const Checkpoint ck({kQuantDir + "int4_group.safetensors"});
  for (const char* name : kInt4Cases) {
    const Int4Case c = load_int4_case(ck, name);
    // The fixture must hold both ends of the range: nibble 0 (q = -8) and nibble 15 (q = 7).
    int extremes[2] = {0, 0};
    for (int64_t r = 0; r < c.out; ++r) {
      for (int64_t col = 0; col < c.in; ++col) {
        const auto byte = std::to_integer<unsigned>(c.packed[r * c.packed_row_bytes() + col / 2]);
        const unsigned nibble = (byte >> (4 * (col % 2))) & 0xfu;
        extremes[0] += nibble == 0;
        extremes[1] += nibble == 15;
      }
    }
    EXPECT_GT(extremes[0], 0) << name << " has no q = -8";
    EXPECT_GT(extremes[1], 0) << name << " has no q = 7";
    for (const Window& w : test_windows(c.out, c.in, 1, c.group)) {
      expect_same_bits(c.decode(w), crop(c.expected, c.in, w), c.name + " " + describe(w));
    }
  }
}

TEST(QuantFormats, Int4GroupsNeedNoAlignment) {
  const Checkpoint ck({kQuantDir + "int4_group.safetensors"});
  for (const char* name : {"bf16_g32", "f32_g32"}) {
    Int4Case c = load_int4_case(ck, name);
    const std::size_t scale_bytes = std::size_t(c.out * (c.in / c.group)) * dtype_size(c.scale_dtype);
    const Misaligned packed(c.packed, std::size_t(c.out * c.packed_row_bytes())), scale(c.scale, scale_bytes);
    c.packed = packed.data();
    c.scale = scale.data();
    expect_same_bits(c.decode({0, c.out, 0, c.in}), c.expected, std::string("misaligned ") + name);
  }
}

// ---- MXFP4 ----

// The format as written down (OCP MX FP4, transformers' _convert_moe_packed_tensors), element by
// element: blocks [out, in / 32, 16], scales [out, in / 32], in double and narrowed (exact, or
// past float's range an infinity).
float naive_mxfp4(const std::vector<uint8_t>& blocks, const std::vector<uint8_t>& scales, int64_t in, int64_t r,
                  int64_t c) {
  static const double kE2m1[16] = {0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6};
  const int64_t nb = in / 32;
  const uint8_t b = blocks[std::size_t((r * nb + c / 32) * 16 + (c % 32) / 2)];
  const int nibble = c % 2 == 0 ? b & 0xf : b >> 4;
  const int s = scales[std::size_t(r * nb + c / 32)];
  if (s == 255) return std::numeric_limits<float>::quiet_NaN();
  const double v = std::ldexp(kE2m1[nibble], s - 127);
  return std::fabs(v) > double(std::numeric_limits<float>::max()) ? std::copysign(INFINITY, float(kE2m1[nibble]))
                                                                    : float(v);
}

std::vector<float> naive_mxfp4(const std::vector<uint8_t>& blocks, const std::vector<uint8_t>& scales, int64_t out,
                               int64_t in) {
  std::vector<float> v;
  for (int64_t r = 0; r < out; ++r)
    for (int64_t c = 0; c < in; ++c) v.push_back(naive_mxfp4(blocks, scales, in, r, c));
  return v;
}

std::vector<float> decode_mxfp4(const std::byte* blocks, const std::byte* scales, int64_t out, int64_t in,
                                const Window& w) {
  std::vector<float> dst(std::size_t(w.rows * w.cols));
  dequantize_mxfp4(blocks, scales, out, in, w, dst.data());
  return dst;
}

const std::byte* bytes_of(const std::vector<uint8_t>& v) { return reinterpret_cast<const std::byte*>(v.data()); }

TEST(QuantFormats, Mxfp4EveryCodeAndScaleClass) {
  // 8 rows of 2 blocks; each block holds every code in both nibble positions (byte j: low j,
  // high 15 - j). Scale classes 0 (2^-127, subnormal: products down to 2^-128), 1, 126, 127, 128,
  // 253 and 254 (products overflow to +-inf), 255 (NaN), each in two blocks.
  const int64_t out = 8, in = 64;
  std::vector<uint8_t> blocks(std::size_t(out * in / 2)), scales;
  for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i] = uint8_t((i % 16) | (15 - i % 16) << 4);
  const uint8_t kClasses[] = {0, 1, 126, 127, 128, 253, 254, 255};
  for (int64_t i = 0; i < out * in / 32; ++i) scales.push_back(kClasses[i % 8]);
  const std::vector<float> want = naive_mxfp4(blocks, scales, out, in);
  expect_same_bits(decode_mxfp4(bytes_of(blocks), bytes_of(scales), out, in, {0, out, 0, in}), want, "mxfp4 all codes");
  // The formula's corners. Row r holds blocks of scales kClasses[2r], kClasses[2r + 1]; column c
  // of a block is code c / 2 (even c) or 15 - c / 2 (odd c).
  const auto at = [&](int64_t r, int64_t c) { return want[std::size_t(r * in + c)]; };
  EXPECT_EQ(at(0, 2), std::ldexp(1.0f, -128));                // code 1 (0.5) at scale 0
  EXPECT_TRUE(at(0, 16) == 0.0f && std::signbit(at(0, 16)));  // code 8: -0
  EXPECT_EQ(at(0, 32 + 14), std::ldexp(6.0f, -126));           // code 7 at scale 1
  EXPECT_EQ(at(1, 32 + 14), 6.0f);                             // scale 127: 2^0
  EXPECT_EQ(at(2, 32 + 10), std::ldexp(3.0f, 126));            // scale 253, code 5: finite
  EXPECT_EQ(at(2, 32 + 12), INFINITY);                         // scale 253, code 6 (4): 2^128
  EXPECT_EQ(at(3, 6), std::ldexp(1.5f, 127));                  // scale 254, code 3: finite
  EXPECT_EQ(at(3, 7), -INFINITY);                              // scale 254, code 12 (-2)
  EXPECT_TRUE(std::isnan(at(3, 32)));                          // scale 255
}

TEST(QuantFormats, Mxfp4WindowsMatchTheFormula) {
  // Random codes and scales, windows starting mid-block and mid-byte; misaligned input.
  const int64_t out = 9, in = 128;
  std::vector<uint8_t> blocks(std::size_t(out * in / 2)), scales(std::size_t(out * in / 32));
  uint32_t state = 12345;
  const auto next = [&] { return state = state * 1664525u + 1013904223u, uint8_t(state >> 24); };
  for (auto& b : blocks) b = next();
  for (auto& s : scales) s = next();
  const std::vector<float> want = naive_mxfp4(blocks, scales, out, in);
  for (const Window& w : test_windows(out, in, 1, 32)) {
    expect_same_bits(decode_mxfp4(bytes_of(blocks), bytes_of(scales), out, in, w), crop(want, in, w),
                     "mxfp4 " + describe(w));
  }
  const Window middle{3, 4, 40, 50};  // rows 3..6, columns 40..89: mid-block on both ends
  expect_same_bits(decode_mxfp4(bytes_of(blocks), bytes_of(scales), out, in, middle), crop(want, in, middle),
                   "mxfp4 " + describe(middle));
  const Misaligned mb(bytes_of(blocks), blocks.size()), ms(bytes_of(scales), scales.size());
  expect_same_bits(decode_mxfp4(mb.data(), ms.data(), out, in, {0, out, 0, in}), want, "misaligned mxfp4");
}

// ---- argument checks ----

TEST(QuantFormats, RejectsWindowsOutsideTheMatrixAndEmptyBlocks) {
  const std::vector<std::byte> zeros(256);
  float dst[64];
  const auto fp8 = [&](const Window& w, int64_t block_rows = 2, int64_t block_cols = 2) {
    dequantize_fp8_block(zeros.data(), zeros.data(), 4, 6, block_rows, block_cols, w, dst);
  };
  const auto int4 = [&](const Window& w, int64_t group = 2, DType scale_dtype = DType::BF16) {
    dequantize_int4_group(zeros.data(), zeros.data(), scale_dtype, 4, 6, group, w, dst);
  };
  EXPECT_NO_THROW(fp8({0, 4, 0, 6}));
  EXPECT_NO_THROW(int4({0, 4, 0, 6}));
  EXPECT_NO_THROW(int4({4, 0, 6, 0}));  // empty, at the far corner
  constexpr int64_t kHuge = std::numeric_limits<int64_t>::max();
  for (const Window& bad : std::vector<Window>{{-1, 1, 0, 1}, {0, 5, 0, 1}, {3, 2, 0, 1}, {0, 1, 6, 1},
                                               {0, 1, 1, 6}, {0, -1, 0, 1}, {0, 1, 0, -1}, {1, kHuge, 0, 1},
                                               {0, 1, kHuge, 1}}) {
    EXPECT_THROW(fp8(bad), Error) << describe(bad);
    EXPECT_THROW(int4(bad), Error) << describe(bad);
  }
  try {
    int4({3, 2, 0, 1});
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("not inside the [4, 6] matrix"), std::string::npos) << e.what();
  }
  EXPECT_THROW(fp8({0, 4, 0, 6}, 0, 2), Error);
  EXPECT_THROW(fp8({0, 4, 0, 6}, 2, 0), Error);
  EXPECT_THROW(fp8({0, 4, 0, 6}, -2, 2), Error);
  EXPECT_THROW(int4({0, 4, 0, 6}, 0), Error);
  EXPECT_THROW(int4({0, 4, 0, 6}, -32), Error);
  EXPECT_THROW(int4({0, 4, 0, 6}, 2, DType::I32), Error);
  const auto mxfp4 = [&](const Window& w, int64_t in = 64) {
    dequantize_mxfp4(zeros.data(), zeros.data(), 2, in, w, dst);
  };
  EXPECT_NO_THROW(mxfp4({1, 1, 0, 64}));  // dst holds 64 floats
  EXPECT_NO_THROW(mxfp4({1, 1, 33, 7}));
  EXPECT_THROW(mxfp4({0, 2, 0, 48}, 48), Error);  // not whole blocks of 32
  EXPECT_THROW(mxfp4({0, 3, 0, 64}), Error);
  EXPECT_THROW(mxfp4({0, 1, 60, 5}), Error);
}

}  // namespace
}  // namespace layertap::quant
