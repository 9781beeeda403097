// Storage options (docs/FORMAT.md, "Storage options"): the float8_e4m3fn encoder and per-row
// quantizer with its error statistics, the chunk codecs in their HDF5 filter formats, and shards
// written with every dtype x compression combination read back by ShardReader, by HDF5's own
// filter pipeline, by h5py and h5ls.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "core/digest.hpp"
#include "core/error.hpp"
#include "io/compression.hpp"
#include "io/fp8_storage.hpp"
#include "io/hdf5.hpp"
#include "io/output_writer.hpp"
#include "io/shard_reader.hpp"
#include "io/shard_writer.hpp"
#include "io_test_util.hpp"

namespace layertap::io {
namespace {

namespace fs = std::filesystem;
using test::expect_shard_holds;
using test::make_batch;
using test::TempDir;
using test::test_meta;

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// --- float8_e4m3fn encoder ------------------------------------------------------------------------

float next_up(float x) { return std::nextafter(x, std::numeric_limits<float>::infinity()); }
float next_down(float x) { return std::nextafter(x, -std::numeric_limits<float>::infinity()); }

TEST(Fp8Encoder, EveryCodeAndEveryRoundingBoundary) {
  // Codes 0x00..0x7e are the non-negative finite values, increasing.
  for (int c = 0; c <= 0x7e; ++c) {
    const float v = fp8_e4m3fn_to_float(uint8_t(c));
    EXPECT_EQ(float_to_fp8_e4m3fn(v), c) << "value " << v;
    EXPECT_EQ(float_to_fp8_e4m3fn(-v), c | 0x80) << "value " << -v;
    if (c == 0x7e) break;
    const float w = fp8_e4m3fn_to_float(uint8_t(c + 1));
    ASSERT_LT(v, w);
    const float mid = (v + w) / 2;  // exact in float32
    const int even = (c % 2 == 0) ? c : c + 1;
    EXPECT_EQ(float_to_fp8_e4m3fn(mid), even) << "tie between " << v << " and " << w;
    EXPECT_EQ(float_to_fp8_e4m3fn(next_down(mid)), c) << "just below " << mid;
    EXPECT_EQ(float_to_fp8_e4m3fn(next_up(mid)), c + 1) << "just above " << mid;
  }
}

// The quantizer's vectorized encoder agrees with float_to_fp8_e4m3fn at every boundary: a row
// whose amax is 448 has scale 1, so each value is encoded as is.
TEST(Fp8Encoder, TheRowQuantizerEncodesEveryBoundaryTheSame) {
  for (DType dtype : {DType::F32, DType::BF16}) {
    std::vector<float> row{448.0f};
    for (int c = 0; c < 0x7e; ++c) {
      const float v = fp8_e4m3fn_to_float(uint8_t(c)), w = fp8_e4m3fn_to_float(uint8_t(c + 1)), mid = (v + w) / 2;
      for (float x : {v, mid, next_down(mid), next_up(mid)}) {
        if (dtype == DType::BF16 && bf16_to_float(float_to_bf16(x)) != x) continue;  // not a bf16 value
        row.push_back(x);
        row.push_back(-x);
      }
    }
    std::vector<std::byte> in(row.size() * dtype_size(dtype));
    for (std::size_t i = 0; i < row.size(); ++i) {
      if (dtype == DType::F32) {
        std::memcpy(in.data() + 4 * i, &row[i], 4);
      } else {
        const uint16_t b = float_to_bf16(row[i]);
        std::memcpy(in.data() + 2 * i, &b, 2);
      }
    }
    std::vector<uint8_t> codes(row.size());
    float scale = 0;
    quantize_fp8_rows(dtype, in.data(), 1, 1, int64_t(row.size()), codes.data(), &scale, nullptr);
    ASSERT_EQ(scale, 1.0f);
    for (std::size_t i = 0; i < row.size(); ++i)
      EXPECT_EQ(codes[i], float_to_fp8_e4m3fn(row[i])) << dtype_name(dtype) << " value " << row[i];
  }
}

TEST(Fp8Encoder, SaturatesAndKeepsNaN) {
  EXPECT_EQ(fp8_e4m3fn_to_float(0x7e), 448.0f);
  EXPECT_EQ(float_to_fp8_e4m3fn(448.0f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3fn(464.0f), 0x7e);  // the tie with 480 (not a value) goes to 448, as torch
  EXPECT_EQ(float_to_fp8_e4m3fn(465.0f), 0x7e);  // torch gives NaN here; we saturate
  EXPECT_EQ(float_to_fp8_e4m3fn(1e30f), 0x7e);
  EXPECT_EQ(float_to_fp8_e4m3fn(-1e30f), 0xfe);
  EXPECT_EQ(float_to_fp8_e4m3fn(std::numeric_limits<float>::infinity()), 0x7f);
  EXPECT_EQ(float_to_fp8_e4m3fn(-std::numeric_limits<float>::infinity()), 0xff);
  EXPECT_EQ(float_to_fp8_e4m3fn(std::numeric_limits<float>::quiet_NaN()), 0x7f);
  EXPECT_EQ(float_to_fp8_e4m3fn(0x1p-10f), 0x00);  // half the smallest subnormal: tie to even (0)
  EXPECT_EQ(float_to_fp8_e4m3fn(next_up(0x1p-10f)), 0x01);
  EXPECT_EQ(float_to_fp8_e4m3fn(1e-30f), 0x00);
  EXPECT_EQ(float_to_fp8_e4m3fn(-0.0f), 0x80);
  static_assert(float_to_fp8_e4m3fn(1.0f) == 0x38);  // usable at compile time
}

// Reference per-row quantization, written plainly.
void reference_quantize(const std::vector<float>& row, std::vector<uint8_t>& codes, float& scale) {
  float amax = 0;
  for (float v : row)
    if (std::isfinite(v)) amax = std::max(amax, std::fabs(v));
  scale = amax / 448.0f;
  codes.resize(row.size());
  for (std::size_t i = 0; i < row.size(); ++i)
    codes[i] = !std::isfinite(row[i]) ? uint8_t((std::signbit(row[i]) ? 0x80 : 0) | 0x7f)
               : scale == 0        ? uint8_t(0)
                                   : float_to_fp8_e4m3fn(row[i] / scale);
}

TEST(Fp8Quantizer, MatchesThePlainReferenceAndBoundsTheError) {
  const int64_t rows = 37, P = 3, H = 200;
  std::vector<uint16_t> in(static_cast<std::size_t>(rows * P * H));
  for (std::size_t i = 0; i < in.size(); ++i) {
    // Values spread over 2^-20..2^12 with one large element per row (as real activations have).
    const uint64_t k = test::mix(i);
    const float v = std::ldexp(1.0f + float(k % 1000) / 1000.0f, int(k % 33) - 20) * ((k >> 20) & 1 ? -1.0f : 1.0f);
    in[i] = float_to_bf16(i % std::size_t(H) == 7 ? v * 64 : v);
  }
  for (std::size_t h = 0; h < std::size_t(H); ++h) in[std::size_t(5 * H) + h] = 0;  // row 5 (token 1, point 2): zeros
  std::vector<uint8_t> codes(in.size());
  std::vector<float> scales(static_cast<std::size_t>(rows * P));
  std::vector<Fp8Fidelity> error(static_cast<std::size_t>(P));
  quantize_fp8_rows(DType::BF16, reinterpret_cast<const std::byte*>(in.data()), rows, P, H, codes.data(), scales.data(),
                    &error);
  std::vector<float> out(in.size());
  dequantize_fp8_rows(codes.data(), scales.data(), rows, P, H, out.data());

  std::vector<Fp8Fidelity> want(static_cast<std::size_t>(P));
  for (int64_t r = 0; r < rows * P; ++r) {
    std::vector<float> row(static_cast<std::size_t>(H));
    for (int64_t h = 0; h < H; ++h) row[std::size_t(h)] = bf16_to_float(in[std::size_t(r * H + h)]);
    std::vector<uint8_t> ref;
    float scale = 0;
    reference_quantize(row, ref, scale);
    ASSERT_EQ(scales[std::size_t(r)], scale) << "row " << r;
    double e2 = 0, v2 = 0;
    Fp8Fidelity& w = want[std::size_t(r % P)];
    for (int64_t h = 0; h < H; ++h) {
      ASSERT_EQ(codes[std::size_t(r * H + h)], ref[std::size_t(h)]) << "row " << r << " element " << h;
      const float x = row[std::size_t(h)], y = out[std::size_t(r * H + h)];
      EXPECT_EQ(y, fp8_e4m3fn_to_float(ref[std::size_t(h)]) * scale);
      // Normal-range values keep 3 mantissa bits: relative error at most 2^-4 (plus the scale's rounding).
      if (std::fabs(x) >= scale * 0x1p-6f) {
        EXPECT_LE(std::fabs(y - x), std::fabs(x) * (0x1p-4f + 1e-6f));
      }
      const double d = double(y) - double(x);
      e2 += d * d;
      v2 += double(x) * double(x);
      w.nonzero += x != 0;
      w.flushed += x != 0 && y == 0;
      w.max_abs_error = std::max(w.max_abs_error, std::fabs(d));
    }
    w.rows += 1;
    w.values += H;
    w.sum_sq_error += e2;
    w.sum_sq_value += v2;
    if (v2 > 0) {
      w.sum_row_rel_error += std::sqrt(e2 / v2);
      w.max_row_rel_error = std::max(w.max_row_rel_error, std::sqrt(e2 / v2));
    } else {
      w.zero_rows += 1;
    }
  }
  EXPECT_EQ(scales[5], 0.0f);
  for (int64_t p = 0; p < P; ++p) {
    const Fp8Fidelity &g = error[std::size_t(p)], &w = want[std::size_t(p)];
    EXPECT_EQ(g.rows, w.rows);
    EXPECT_EQ(g.zero_rows, w.zero_rows);
    EXPECT_EQ(g.values, w.values);
    EXPECT_EQ(g.nonzero, w.nonzero);
    EXPECT_EQ(g.flushed, w.flushed);
    EXPECT_GT(g.flushed, 0) << "the test data reaches below the row's smallest step";
    // Rows are summed in float32 (vectorized), totals in double.
    EXPECT_NEAR(g.sum_sq_error, w.sum_sq_error, 1e-5 * w.sum_sq_error);
    EXPECT_NEAR(g.sum_sq_value, w.sum_sq_value, 1e-5 * w.sum_sq_value);
    EXPECT_NEAR(g.sum_row_rel_error, w.sum_row_rel_error, 1e-5 * w.sum_row_rel_error);
    EXPECT_NEAR(g.max_row_rel_error, w.max_row_rel_error, 1e-5 * w.max_row_rel_error);
    EXPECT_DOUBLE_EQ(g.max_abs_error, w.max_abs_error);
    EXPECT_GT(g.rel_rms_error(), 0.0);
    EXPECT_LT(g.rel_rms_error(), 0.04);  // 3 mantissa bits: about 2^-4 / sqrt(3) at worst
  }
  EXPECT_EQ(error[2].zero_rows, 1);
}

TEST(Fp8Quantizer, Float32InputIsMeasuredAgainstItsBf16Rounding) {
  const int64_t H = 64;
  std::vector<float> in(static_cast<std::size_t>(H));
  for (int64_t h = 0; h < H; ++h) in[std::size_t(h)] = std::sin(float(h) * 0.37f) * 3.0f + 1e-3f * float(h);
  std::vector<uint8_t> codes(static_cast<std::size_t>(H));
  float scale = 0;
  std::vector<Fp8Fidelity> e(1);
  quantize_fp8_rows(DType::F32, reinterpret_cast<const std::byte*>(in.data()), 1, 1, H, codes.data(), &scale, &e);
  double e2 = 0;
  for (int64_t h = 0; h < H; ++h) {
    const double d = double(fp8_e4m3fn_to_float(codes[std::size_t(h)]) * scale) -
                     double(bf16_to_float(float_to_bf16(in[std::size_t(h)])));
    e2 += d * d;
  }
  EXPECT_NEAR(e[0].sum_sq_error, e2, 1e-5 * e2);
}

TEST(Fp8Quantizer, NonFiniteValuesBecomeNaNAndLeaveTheScaleAlone) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> in{1.0f, -inf, 2.0f, nan, -4.0f, inf};
  std::vector<uint8_t> codes(in.size());
  float scale = 0;
  std::vector<Fp8Fidelity> e(1);
  quantize_fp8_rows(DType::F32, reinterpret_cast<const std::byte*>(in.data()), 1, 1, int64_t(in.size()), codes.data(),
                    &scale, &e);
  EXPECT_EQ(scale, 4.0f / 448.0f);
  EXPECT_EQ(codes, (std::vector<uint8_t>{float_to_fp8_e4m3fn(112.0f), 0xff, float_to_fp8_e4m3fn(224.0f), 0x7f, 0xfe,
                                         0x7f}));
  EXPECT_EQ(e[0].nonfinite, 3);
  EXPECT_EQ(e[0].sum_sq_error, 0.0);  // 1, 2 and 4 are exact
  EXPECT_TRUE(std::isfinite(e[0].rel_rms_error()));
}

TEST(Fp8Fidelity, JsonRoundTripAndMerge) {
  Fp8Fidelity a, b;
  a.rows = 3, a.values = 30, a.nonzero = 29, a.flushed = 2, a.sum_sq_error = 0.5, a.sum_sq_value = 200,
  a.sum_row_rel_error = 0.09, a.max_row_rel_error = 0.04, a.max_abs_error = 0.3;
  b.rows = 2, b.zero_rows = 1, b.values = 20, b.nonzero = 10, b.sum_sq_error = 0.25, b.sum_sq_value = 100,
  b.sum_row_rel_error = 0.02, b.max_row_rel_error = 0.02, b.max_abs_error = 0.5, b.nonfinite = 1;
  const nlohmann::json j = to_json(a);
  EXPECT_DOUBLE_EQ(j.at("rel_rms_error").get<double>(), std::sqrt(0.5 / 200));
  EXPECT_DOUBLE_EQ(j.at("mean_row_rel_error").get<double>(), 0.03);
  EXPECT_DOUBLE_EQ(j.at("flushed_to_zero_fraction").get<double>(), 2.0 / 29);
  Fp8Fidelity m = fp8_fidelity_from_json(nlohmann::json::parse(j.dump()));
  m.merge(b);
  EXPECT_EQ(m.rows, 5);
  EXPECT_EQ(m.zero_rows, 1);
  EXPECT_EQ(m.nonfinite, 1);
  EXPECT_DOUBLE_EQ(m.rel_rms_error(), std::sqrt(0.75 / 300));
  EXPECT_DOUBLE_EQ(m.mean_row_rel_error(), 0.11 / 4);
  EXPECT_DOUBLE_EQ(m.max_abs_error, 0.5);
  EXPECT_NE(error_of([] { fp8_fidelity_from_json(nlohmann::json{{"rel_rms_error", 0.1}}); }).find("malformed"),
            std::string::npos);
}

// --- chunk codecs ---------------------------------------------------------------------------------

TEST(Compression, ParseAndName) {
  EXPECT_EQ(compression_name(parse_compression("none")), "none");
  EXPECT_EQ(compression_name(parse_compression("lz4")), "lz4");
  EXPECT_EQ(compression_name(parse_compression("zstd")), "zstd:1");
  EXPECT_EQ(compression_name(parse_compression("zstd:-3")), "zstd:-3");
  EXPECT_EQ(compression_name(parse_compression("gzip")), "gzip:1");
  EXPECT_EQ(compression_name(parse_compression("gzip:6")), "gzip:6");
  EXPECT_EQ(parse_compression("zstd:3").level, 3);
  for (const char* bad : {"", "lz5", "lz4:1", "none:0", "zstd:", "zstd:x", "zstd:23", "gzip:0x", "gzip:10", "gzip:-1"})
    EXPECT_NE(error_of([&] { parse_compression(bad); }), "") << bad;
  EXPECT_NE(error_of([] { parse_compression("brotli"); }).find("expected none, lz4, zstd"), std::string::npos);
  EXPECT_EQ(compression_threads(Compression{Codec::Lz4, 0, 3}), 3);
  EXPECT_GE(compression_threads(Compression{Codec::Lz4, 0, 0}), 1);
}

TEST(Compression, ByteShuffleIsHdf5s) {
  std::vector<std::byte> in(23), out(23), back(23);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::byte(i);
  byte_shuffle(in.data(), out.data(), in.size(), 4);  // 5 elements + 3 tail bytes
  EXPECT_EQ(out[0], std::byte(0));
  EXPECT_EQ(out[1], std::byte(4));
  EXPECT_EQ(out[5], std::byte(1));
  EXPECT_EQ(out[20], std::byte(20));  // tail copied
  byte_unshuffle(out.data(), back.data(), out.size(), 4);
  EXPECT_EQ(back, in);
}

std::vector<std::byte> activation_like_bytes(std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i + 1 < n; i += 2) {
    const uint16_t b = float_to_bf16(std::sin(float(i) * 0.01f) * float(1 + test::mix(i) % 7));
    std::memcpy(v.data() + i, &b, 2);
  }
  return v;
}

TEST(Compression, EveryCodecRoundTripsEveryElementSize) {
  for (const char* spec : {"lz4", "zstd", "zstd:-5", "zstd:9", "gzip", "gzip:9"}) {
    const Compression c = parse_compression(spec);
    for (std::size_t elem : {1, 2, 4})
      for (std::size_t n : {std::size_t(4), std::size_t(1000), std::size_t(1) << 20}) {
        const auto in = activation_like_bytes(n);
        std::vector<std::byte> enc, scratch, dec;
        encode_chunk(c, elem, in.data(), n, enc, scratch);
        decode_chunk(c, elem, enc.data(), enc.size(), n, dec);
        EXPECT_EQ(dec, in) << spec << " element size " << elem << " bytes " << n;
        if (n == (std::size_t(1) << 20) && elem == 2) {
          EXPECT_LT(enc.size(), n) << spec;
        }
      }
  }
}

TEST(Compression, IncompressibleLz4BlocksAreStoredRaw) {
  std::vector<std::byte> in(4096);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = std::byte(test::mix(i));
  std::vector<std::byte> enc, scratch, dec;
  encode_chunk(parse_compression("lz4"), 1, in.data(), in.size(), enc, scratch);
  ASSERT_EQ(enc.size(), 16 + in.size());  // header + raw block
  EXPECT_EQ(std::memcmp(enc.data() + 16, in.data(), in.size()), 0);
  decode_chunk(parse_compression("lz4"), 1, enc.data(), enc.size(), in.size(), dec);
  EXPECT_EQ(dec, in);
}

TEST(Compression, DamagedChunksAreRefused) {
  const auto in = activation_like_bytes(1 << 16);
  for (const char* spec : {"lz4", "zstd", "gzip"}) {
    const Compression c = parse_compression(spec);
    std::vector<std::byte> enc, scratch, dec;
    encode_chunk(c, 2, in.data(), in.size(), enc, scratch);
    // Truncated anywhere, or declaring another size: an error, never a crash or a short read.
    for (std::size_t cut : {std::size_t(0), std::size_t(3), std::size_t(11), std::size_t(15), enc.size() / 2,
                            enc.size() - 1})
      EXPECT_NE(error_of([&] { decode_chunk(c, 2, enc.data(), cut, in.size(), dec); }), "") << spec << " cut " << cut;
    EXPECT_NE(error_of([&] { decode_chunk(c, 2, enc.data(), enc.size(), in.size() + 2, dec); }), "") << spec;
  }
  // An LZ4 header that declares 2^40 bytes is refused before anything is allocated.
  std::vector<std::byte> huge(16, std::byte(0));
  huge[3] = std::byte(1);
  huge[11] = std::byte(16);
  EXPECT_NE(error_of([&] { decode_chunk(parse_compression("lz4"), 1, huge.data(), huge.size(), 0, huge); }), "");
}

// Our encoder's chunks, written raw, decode through HDF5's own pipeline (our registered LZ4/zstd
// filters, HDF5's shuffle and deflate); and chunks HDF5's pipeline encodes decode with ours.
TEST(Compression, ChunksMatchHdf5sFilterPipeline) {
  TempDir dir;
  const fs::path path = dir.path() / "pipeline.h5";
  h5::Id file = h5::create_file(path);
  const hsize_t n = 50000, chunk = 50000;
  std::vector<uint16_t> values(n);
  const auto bytes = activation_like_bytes(std::size_t(n) * 2);
  std::memcpy(values.data(), bytes.data(), bytes.size());
  for (const char* spec : {"lz4", "zstd", "zstd:-3", "gzip:4"}) {
    const Compression c = parse_compression(spec);
    h5::Id space(h5::check(H5Screate_simple(1, &n, nullptr), "space"), H5Sclose);
    h5::Id dcpl(h5::check(H5Pcreate(H5P_DATASET_CREATE), "dcpl"), H5Pclose);
    h5::check(H5Pset_chunk(dcpl.get(), 1, &chunk), "chunk");
    add_filters(dcpl.get(), c, 2);
    // 1. HDF5 encodes (H5Dwrite through the pipeline); we decode the raw chunk.
    const std::string a = cat("hdf5_", spec), b = cat("ours_", spec);
    h5::Id da(h5::check(H5Dcreate2(file.get(), a.c_str(), H5T_STD_U16LE, space.get(), H5P_DEFAULT, dcpl.get(),
                                   H5P_DEFAULT),
                        "create"),
              H5Dclose);
    h5::check(H5Dwrite(da.get(), H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()), "write");
    const hsize_t origin[1] = {0};
    hsize_t stored = 0;
    h5::check(H5Dget_chunk_storage_size(da.get(), origin, &stored), "chunk size");
    std::vector<std::byte> raw(stored), dec;
    uint32_t mask = 0;
    h5::check(H5Dread_chunk(da.get(), H5P_DEFAULT, origin, &mask, raw.data()), "read chunk");
    EXPECT_EQ(mask, 0u);
    decode_chunk(c, 2, raw.data(), raw.size(), bytes.size(), dec);
    EXPECT_EQ(dec, bytes) << spec;
    // 2. We encode and write the raw chunk; HDF5 decodes it on H5Dread.
    h5::Id db(h5::check(H5Dcreate2(file.get(), b.c_str(), H5T_STD_U16LE, space.get(), H5P_DEFAULT, dcpl.get(),
                                   H5P_DEFAULT),
                        "create"),
              H5Dclose);
    std::vector<std::byte> enc, scratch;
    encode_chunk(c, 2, bytes.data(), bytes.size(), enc, scratch);
    h5::check(H5Dwrite_chunk(db.get(), H5P_DEFAULT, 0, origin, enc.size(), enc.data()), "write chunk");
    std::vector<uint16_t> back(n);
    h5::check(H5Dread(db.get(), H5T_NATIVE_UINT16, H5S_ALL, H5S_ALL, H5P_DEFAULT, back.data()), "read");
    EXPECT_EQ(back, values) << spec;
  }
}

// --- shards with every storage option -------------------------------------------------------------

struct Option {
  DType dtype;
  const char* compression;
  int threads;
};

std::string option_name(const Option& o) {
  return cat(dtype_name(o.dtype), "/", o.compression, "/", o.threads, " threads");
}

OutputMeta meta_for(const Option& o, int64_t points = 4, int64_t hidden = 40) {
  OutputMeta m = test_meta(points, hidden, o.dtype);
  m.compression = parse_compression(o.compression);
  m.compression.threads = o.threads;
  return m;
}

// Batches of varied sizes: some end inside a chunk, one spans several chunks.
std::vector<CapturedBatch> batches_for(const OutputMeta& meta, int64_t rows_per_chunk) {
  return {make_batch({0, 1}, {5, 9}, meta), make_batch({2}, {rows_per_chunk * 2 + 3}, meta),
          make_batch({3, 4, 5}, {1, rows_per_chunk - 1, 7}, meta), make_batch({6}, {2}, meta)};
}

ShardInfo write_shard(const fs::path& dir, const std::string& name, const OutputMeta& meta,
                      const std::vector<CapturedBatch>& batches) {
  ShardWriter w(dir, name, meta);
  for (const auto& b : batches) w.append(b);
  return w.close();
}

const std::vector<Option> kOptions = {
    {DType::BF16, "none", 0}, {DType::BF16, "lz4", 2},   {DType::BF16, "zstd", 1}, {DType::BF16, "gzip", 3},
    {DType::F32, "lz4", 1},   {DType::F32, "zstd:3", 2}, {DType::F8_E4M3, "none", 2}, {DType::F8_E4M3, "lz4", 2},
    {DType::F8_E4M3, "zstd", 3}, {DType::F8_E4M3, "gzip:2", 1},
};

TEST(StorageOptions, EveryOptionReadsBackThroughShardReader) {
  for (const Option& o : kOptions) {
    SCOPED_TRACE(option_name(o));
    TempDir dir;
    const OutputMeta meta = meta_for(o);
    const int64_t rpc = ShardWriter::chunk_rows(4, 40, o.dtype);
    const auto batches = batches_for(meta, rpc);
    const ShardInfo info = write_shard(dir.path(), "shard-00000.h5", meta, batches);
    const ShardReader r(dir.path() / "shard-00000.h5");
    expect_shard_holds(r, batches);
    EXPECT_EQ(r.meta().dtype, o.dtype);
    EXPECT_EQ(compression_name(r.meta().compression), compression_name(meta.compression));
    EXPECT_EQ(r.hidden_dtype(), dtype_name(o.dtype));
    const std::vector<std::string> codec = {std::string(o.compression).substr(0, 4) == "gzip" ? "deflate"
                                                                                               : std::string(o.compression).substr(0, std::string(o.compression).find(':'))};
    std::vector<std::string> filters;
    if (meta.compression.enabled()) {
      if (o.dtype != DType::F8_E4M3) filters.push_back("shuffle");
      filters.push_back(codec[0]);
    }
    EXPECT_EQ(r.hidden_filters(), filters);
    if (o.dtype == DType::F8_E4M3) {
      ASSERT_EQ(info.fp8.size(), 4u);
      const auto stored = r.fp8_fidelity();
      ASSERT_EQ(stored.size(), 4u);
      for (std::size_t p = 0; p < 4; ++p) {
        EXPECT_EQ(stored[p].rows, info.fp8[p].rows);
        EXPECT_EQ(stored[p].rows, r.num_tokens());
        EXPECT_EQ(stored[p].sum_sq_error, info.fp8[p].sum_sq_error);
        EXPECT_EQ(stored[p].max_row_rel_error, info.fp8[p].max_row_rel_error);
        EXPECT_GT(stored[p].sum_sq_value, 0);
      }
    } else {
      EXPECT_TRUE(info.fp8.empty());
      EXPECT_TRUE(r.fp8_fidelity().empty());
    }
  }
}

TEST(StorageOptions, SameInputSameThreadsSameBytes) {
  // Chunks reach the file at points fixed by the input, whatever the workers' speed, and no
  // dataset records a modification time.
  for (const char* spec : {"lz4", "zstd", "none"})
    for (DType dtype : {DType::BF16, DType::F8_E4M3})
      for (int threads : {1, 3}) {
        if (std::string(spec) == "none" && dtype == DType::BF16) continue;
        TempDir dir;
        const OutputMeta meta = meta_for({dtype, spec, threads});
        const auto batches = batches_for(meta, ShardWriter::chunk_rows(4, 40, dtype));
        const std::string a = write_shard(dir.path(), "a.h5", meta, batches).sha256;
        const std::string b = write_shard(dir.path(), "b.h5", meta, batches).sha256;
        EXPECT_EQ(a, b) << spec << " " << dtype_name(dtype) << " " << threads << " threads";
      }
}

TEST(StorageOptions, CompressedShardsAreSmaller) {
  TempDir dir;
  // Activation-like bf16 states (smooth, few exponents) rather than the random bit patterns.
  OutputMeta plain = meta_for({DType::BF16, "none", 0}, 2, 512);
  OutputMeta packed = meta_for({DType::BF16, "zstd", 2}, 2, 512);
  CapturedBatch b = make_batch({0}, {3000}, plain);
  for (auto& st : b.states) {
    const auto v = activation_like_bytes(st.size());
    st.assign(v.begin(), v.end());
  }
  const ShardInfo a = write_shard(dir.path(), "plain.h5", plain, {b});
  const ShardInfo z = write_shard(dir.path(), "packed.h5", packed, {b});
  EXPECT_LT(double(z.bytes), 0.9 * double(a.bytes)) << a.bytes << " vs " << z.bytes;
  expect_shard_holds(ShardReader(dir.path() / "packed.h5"), {b});
}

TEST(StorageOptions, WrongBatchDtypeAndBadOptionsAreRefused) {
  TempDir dir;
  const OutputMeta meta = meta_for({DType::F8_E4M3, "lz4", 1});
  EXPECT_EQ(meta.batch_dtype(), DType::BF16);
  OutputMeta f32 = meta;
  f32.dtype = DType::F32;
  const CapturedBatch wrong = make_batch({0}, {3}, f32);  // float32 states for a float8 writer
  ShardWriter w(dir.path(), "s.h5", meta);
  EXPECT_NE(error_of([&] { w.append(wrong); }).find("dtype float32, writer expects bfloat16"), std::string::npos);
  OutputMeta bad = meta;
  bad.dtype = DType::F16;
  EXPECT_NE(error_of([&] { bad.validate(); }).find("float8_e4m3"), std::string::npos);
  bad = meta;
  bad.compression.level = 40;
  bad.compression.codec = Codec::Zstd;
  EXPECT_NE(error_of([&] { bad.validate(); }).find("zstd level 40"), std::string::npos);
  EXPECT_EQ(parse_storage_dtype("float8_e4m3"), DType::F8_E4M3);
  EXPECT_EQ(parse_storage_dtype("fp8"), DType::F8_E4M3);
  EXPECT_EQ(parse_storage_dtype("bf16"), DType::BF16);
  EXPECT_NE(error_of([] { parse_storage_dtype("float16"); }).find("bfloat16, float32 or float8_e4m3"),
            std::string::npos);
}

TEST(StorageOptions, AnAbandonedCompressedShardLeavesNothing) {
  TempDir dir;
  const OutputMeta meta = meta_for({DType::F8_E4M3, "zstd", 3});
  {
    ShardWriter w(dir.path(), "s.h5", meta);
    w.append(make_batch({0}, {5000}, meta));  // several chunks in flight, one partial
  }
  EXPECT_TRUE(dir.files().empty());
}

TEST(StorageOptions, Float8ScalesAndStructureAreChecked) {
  TempDir dir;
  const OutputMeta meta = meta_for({DType::F8_E4M3, "none", 1});
  write_shard(dir.path(), "s.h5", meta, {make_batch({0}, {10}, meta)});
  {
    h5::Id f(h5::check(H5Fopen((dir.path() / "s.h5").c_str(), H5F_ACC_RDWR, H5P_DEFAULT), "open"), H5Fclose);
    h5::check(H5Ldelete(f.get(), "hidden_scales", H5P_DEFAULT), "delete");
  }
  const ShardReader r(dir.path() / "s.h5");
  const auto problems = r.structure_problems();
  ASSERT_FALSE(problems.empty());
  EXPECT_NE(problems[0].find("without /hidden_scales"), std::string::npos) << problems[0];
  EXPECT_NE(error_of([&] { r.hidden_states(0, 2); }).find("hidden_scales"), std::string::npos);
}

TEST(StorageOptions, OutputWriterRotatesFloat8LZ4ShardsAndSumsTheirError) {
  TempDir dir;
  const OutputMeta meta = meta_for({DType::F8_E4M3, "lz4", 2}, 4, 64);
  const int64_t shard_bytes = 4 * 64 * 300;  // 300 tokens of float8 payload
  std::vector<CapturedBatch> batches;
  for (int64_t i = 0; i < 6; ++i) batches.push_back(make_batch({i}, {100 + 37 * i}, meta));
  std::vector<ShardInfo> shards;
  {
    OutputWriter w(dir.path(), "shard", meta, shard_bytes);
    for (const auto& b : batches) w.submit(b);
    shards = w.finish();
  }
  ASSERT_GE(shards.size(), 2u);
  const auto total = fp8_fidelity_of(dir.path(), shards);
  ASSERT_EQ(total.size(), 4u);
  int64_t tokens = 0;
  for (const auto& b : batches) tokens += b.num_tokens();
  EXPECT_EQ(total[0].rows, tokens);
  // From the files alone (as a resume would), the same sums.
  std::vector<ShardInfo> bare = shards;
  for (auto& s : bare) s.fp8.clear();
  const auto again = fp8_fidelity_of(dir.path(), bare);
  for (std::size_t p = 0; p < 4; ++p) EXPECT_EQ(again[p].sum_sq_error, total[p].sum_sq_error);
  std::size_t next = 0;
  for (const auto& s : shards) {
    const ShardReader r(dir.path() / s.file);
    const std::vector<CapturedBatch> held(batches.begin() + long(next), batches.begin() + long(next + std::size_t(s.samples)));
    expect_shard_holds(r, held);
    next += std::size_t(s.samples);
  }
  EXPECT_EQ(next, batches.size());
}

// --- real clients ---------------------------------------------------------------------------------

int run(const std::string& command, std::string& output) {
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return -1;
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  output = out;
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// The h5py recipe of docs/FORMAT.md for every option; values compared with ShardReader's, which
// the tests above tie to the written batches. zstd needs hdf5plugin (PyPI): skipped without it;
// LZ4 needs Debian's hdf5-filter-plugin or hdf5plugin.
constexpr const char* kH5pyScript = R"(
import sys
import h5py
import numpy as np
try:
    import hdf5plugin  # noqa: F401  (registers zstd and lz4 with h5py's HDF5)
except ImportError:
    pass

path, expected_path, T, P, H = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
want = np.fromfile(expected_path, dtype="<f4").reshape(T, P, H)
with h5py.File(path, "r") as f:
    hs = f["hidden_states"]
    if f.attrs["dtype"] == "float8_e4m3fn":
        assert hs.dtype == np.uint8 and hs.attrs["encoding"] == "float8_e4m3fn"
        c = np.arange(256)
        e, m = (c >> 3) & 15, c & 7
        table = np.where(e == 0, m * 2.0**-9, (1 + m / 8) * 2.0 ** (e - 7.0))
        table = (np.where(c & 0x80, -1, 1) * np.where((e == 15) & (m == 7), np.nan, table)).astype(np.float32)
        got = table[hs[...]] * f["hidden_scales"][...][..., None]
    else:
        got = hs[...].astype(np.float32)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), "values differ"
print("h5py OK", f"{path}")
)";

TEST(StorageOptions, H5pyAndH5lsReadEveryOption) {
  std::string out;
  if (run(std::string(LAYERTAP_H5PY_PYTHON) + " -c 'import h5py'", out) != 0)
    GTEST_SKIP() << LAYERTAP_H5PY_PYTHON << " cannot import h5py: " << out;
  // Which filters h5py's HDF5 can load (Debian: LZ4 from hdf5-filter-plugin; zstd only with PyPI's
  // hdf5plugin); options needing a missing one are skipped, deflate is built in.
  const auto available = [&](int filter) {
    return run(cat(LAYERTAP_H5PY_PYTHON, " -c 'import sys, h5py\ntry:\n import hdf5plugin\nexcept ImportError:\n pass\n",
                   "sys.exit(0 if h5py.h5z.filter_avail(", filter, ") else 1)'"),
               out) == 0;
  };
  const bool has_lz4 = available(kLz4Filter), has_zstd = available(kZstdFilter);
  if (!has_lz4) std::fprintf(stderr, "note: h5py cannot load the LZ4 filter (install hdf5-filter-plugin)\n");
  TempDir dir;
  std::ofstream(dir.path() / "check.py") << kH5pyScript;
  int checked = 0;
  for (const Option& o : kOptions) {
    SCOPED_TRACE(option_name(o));
    const OutputMeta meta = meta_for(o);
    if ((meta.compression.codec == Codec::Zstd && !has_zstd) || (meta.compression.codec == Codec::Lz4 && !has_lz4))
      continue;
    const auto batches = batches_for(meta, ShardWriter::chunk_rows(4, 40, o.dtype));
    const std::string name = cat("shard-", checked, ".h5");
    write_shard(dir.path(), name, meta, batches);
    const ShardReader r(dir.path() / name);
    const auto values = r.hidden_states(0, r.num_tokens());
    std::ofstream(dir.path() / "expected.f32", std::ios::binary)
        .write(reinterpret_cast<const char*>(values.data()), std::streamsize(4 * values.size()));
    const std::string cmd = cat(LAYERTAP_H5PY_PYTHON, " ", (dir.path() / "check.py").string(), " ",
                                (dir.path() / name).string(), " ", (dir.path() / "expected.f32").string(), " ",
                                r.num_tokens(), " 4 40");
    EXPECT_EQ(run(cmd, out), 0) << out;
    EXPECT_NE(out.find("h5py OK"), std::string::npos) << out;
    ++checked;
    // h5ls shows the filters; h5dump decodes LZ4 with the Debian plugin and deflate built in.
    if (meta.compression.codec != Codec::None && run("h5ls --version", out) == 0) {
      ASSERT_EQ(run("h5ls -v " + (dir.path() / name).string() + "/hidden_states", out), 0) << out;
      EXPECT_NE(out.find(meta.compression.codec == Codec::Gzip ? "deflate" : "Filter"), std::string::npos) << out;
    }
  }
  EXPECT_GE(checked, 4);
}

}  // namespace
}  // namespace layertap::io
