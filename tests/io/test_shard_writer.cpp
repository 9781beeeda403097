#include <gtest/gtest.h>

#include <cmath>

#include "core/digest.hpp"
#include "core/error.hpp"
#include "io/hdf5.hpp"
#include "io/shard_reader.hpp"
#include "io/shard_writer.hpp"
#include "io_test_util.hpp"

namespace layertap::io {
namespace {

namespace fs = std::filesystem;
using test::make_batch;
using test::TempDir;
using test::test_meta;

// bf16 bit patterns whose float32 value is known exactly.
const std::vector<uint16_t> kKnownBits = {
    0x0000, 0x8000,  // +0, -0
    0x3f80, 0xbf80,  // 1, -1
    0x4049, 0xc2f7,  // 3.140625, -123.5
    0x0001, 0x8001,  // smallest subnormal (2^-133), and negative
    0x007f, 0x0040,  // largest subnormal, a middle subnormal
    0x0080, 0x8080,  // smallest normal (2^-126), and negative
    0x7f7f, 0xff7f,  // largest finite (3.39e38), and negative
    0x7f80, 0xff80,  // +Inf, -Inf
    0x7fc0, 0x3c00,  // quiet NaN, 2^-7
    0x5f80, 0xdf00,  // 2^64, -2^63
    0x0c00, 0x1234,  //
    0xabcd, 0x7f00,  //
};

// Reads the whole /hidden_states with the HDF5 C API as `mem_type`.
template <typename T>
std::vector<T> read_hidden_raw(const fs::path& file, hid_t mem_type, std::size_t n) {
  h5::Id f = h5::open_file_read(file);
  h5::Id ds = h5::open_dataset(f.get(), "hidden_states", file.string());
  std::vector<T> out(n);
  h5::check(H5Dread(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()), "test read");
  return out;
}

TEST(ShardWriter, Bf16BitsRoundTripLosslessly) {
  TempDir dir;
  const int64_t P = 2, H = 6, T = 2;  // 24 values: every known pattern once
  ASSERT_EQ(kKnownBits.size(), std::size_t(P * T * H));
  auto meta = test_meta(P, H, DType::BF16);
  auto batch = make_batch({0}, {T}, meta);
  std::vector<uint16_t> expected(kKnownBits.size());  // [T, P, H] as stored
  for (int64_t p = 0; p < P; ++p)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < H; ++h) {
        const uint16_t bits = kKnownBits[std::size_t((p * T + t) * H + h)];
        std::memcpy(batch.states[p].data() + 2 * (t * H + h), &bits, 2);
        expected[std::size_t((t * P + p) * H + h)] = bits;
      }
  {
    ShardWriter w(dir.path(), "s.h5", meta);
    w.append(batch);
    w.close();
  }
  const auto file = dir.path() / "s.h5";
  h5::Id bf16 = h5::bf16_type();
  EXPECT_EQ(read_hidden_raw<uint16_t>(file, bf16.get(), expected.size()), expected);

  const auto as_float = read_hidden_raw<float>(file, H5T_NATIVE_FLOAT, expected.size());
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const float want = bf16_to_float(expected[i]);
    if (std::isnan(want))
      EXPECT_TRUE(std::isnan(as_float[i])) << "element " << i;
    else
      EXPECT_EQ(std::bit_cast<uint32_t>(as_float[i]), std::bit_cast<uint32_t>(want))
          << "element " << i << ": bf16 0x" << std::hex << expected[i] << " read as "
          << as_float[i] << ", expected " << want;
  }

  ShardReader r(file);
  EXPECT_EQ(r.hidden_dtype(), "bfloat16");
  EXPECT_EQ(r.hidden_shape(), (std::vector<int64_t>{T, P, H}));
}

TEST(ShardWriter, AppendsBatchesAndRecordsMetadata) {
  for (DType dtype : {DType::BF16, DType::F32}) {
    for (int64_t P : {1, 4}) {
      SCOPED_TRACE(cat(dtype_name(dtype), ", ", P, " points"));
      TempDir dir;
      const auto meta = test_meta(P, 64, dtype);
      // Crosses chunk boundaries at unaligned rows (chunk rows: 2 MiB / (P * 64 * elem)).
      std::vector<CapturedBatch> batches = {
          make_batch({0, 1, 2}, {5, 1, 3000}, meta),
          make_batch({3}, {7}, meta),
          make_batch({4, 5}, {4096, 2100}, meta),
      };
      ShardInfo info;
      {
        ShardWriter w(dir.path(), "shard.h5", meta);
        int64_t tokens = 0;
        for (const auto& b : batches) {
          w.append(b);
          tokens += b.num_tokens();
          EXPECT_EQ(w.bytes_written(), tokens * P * 64 * int64_t(dtype_size(dtype)));
        }
        EXPECT_EQ(dir.files(), std::vector<std::string>{"shard.h5.tmp"});
        info = w.close();
      }
      EXPECT_EQ(dir.files(), std::vector<std::string>{"shard.h5"});
      const auto file = dir.path() / "shard.h5";
      EXPECT_EQ(info.file, "shard.h5");
      EXPECT_EQ(info.samples, 6);
      EXPECT_EQ(info.tokens, 5 + 1 + 3000 + 7 + 4096 + 2100);
      EXPECT_EQ(info.bytes, int64_t(fs::file_size(file)));
      EXPECT_EQ(info.sha256, sha256_file(file.string()));

      ShardReader r(file);
      EXPECT_EQ(r.format_version(), kFormatVersion);
      const OutputMeta& m = r.meta();
      EXPECT_EQ(m.point_specs, meta.point_specs);
      EXPECT_EQ(m.point_ids, meta.point_ids);
      EXPECT_EQ(m.capture_request, meta.capture_request);
      EXPECT_EQ(m.convention, meta.convention);
      EXPECT_EQ(m.num_layers, meta.num_layers);
      EXPECT_EQ(m.hidden, meta.hidden);
      EXPECT_EQ(m.dtype, dtype);
      EXPECT_EQ(m.architecture, meta.architecture);
      EXPECT_EQ(m.config_sha256, meta.config_sha256);
      EXPECT_EQ(m.weights_fingerprint, meta.weights_fingerprint);
      EXPECT_EQ(r.hidden_dtype(), dtype_name(dtype));
      EXPECT_EQ(r.hidden_shape(), (std::vector<int64_t>{info.tokens, P, 64}));
      test::expect_shard_holds(r, batches);

      // /hidden_states is chunked [rows, P, H] along T.
      h5::Id f = h5::open_file_read(file);
      h5::Id ds = h5::open_dataset(f.get(), "hidden_states", file.string());
      h5::Id dcpl(H5Dget_create_plist(ds.get()), H5Pclose);
      hsize_t chunk[3] = {0, 0, 0};
      ASSERT_EQ(H5Pget_chunk(dcpl.get(), 3, chunk), 3);
      EXPECT_EQ(int64_t(chunk[0]), ShardWriter::chunk_rows(P, 64, dtype));
      EXPECT_EQ(int64_t(chunk[1]), P);
      EXPECT_EQ(int64_t(chunk[2]), 64);
    }
  }
}

// A MoE output's routing record: [T, M, k] int16 rows beside the states, named by the attributes
// routed_layers and routed_top_k, read back row for row; a batch of another width is refused, and
// a record that disagrees with its attributes is a structure problem.
TEST(ShardWriter, RecordsTheRoutingOfAMoeOutput) {
  TempDir dir;
  OutputMeta meta = test_meta(2, 16, DType::BF16);
  meta.routed_layers = {1, 3, 4};
  meta.routed_top_k = 2;
  std::vector<CapturedBatch> batches = {make_batch({0, 1}, {5, 3}, meta), make_batch({2}, {4}, meta)};
  int16_t next = 0;
  for (CapturedBatch& b : batches) {
    b.routed_width = meta.routed_width();
    for (int64_t i = 0; i < b.num_tokens() * b.routed_width; ++i) b.routed_experts.push_back(int16_t(next++ % 97));
  }
  {
    ShardWriter w(dir.path(), "shard.h5", meta);
    CapturedBatch narrow = batches[1];
    narrow.routed_width = 4;
    narrow.routed_experts.resize(std::size_t(narrow.num_tokens() * 4));
    EXPECT_THROW(w.append(narrow), Error);  // validated before anything is written
    for (const auto& b : batches) w.append(b);
    w.close();
  }
  const fs::path file = dir.path() / "shard.h5";
  {
    ShardReader r(file);
    EXPECT_TRUE(r.has_routing());
    EXPECT_EQ(r.meta().routed_layers, meta.routed_layers);
    EXPECT_EQ(r.meta().routed_top_k, 2);
    EXPECT_TRUE(r.structure_problems().empty());
    std::vector<int16_t> all = batches[0].routed_experts;
    all.insert(all.end(), batches[1].routed_experts.begin(), batches[1].routed_experts.end());
    EXPECT_EQ(r.routed_experts(0, 12), all);
    EXPECT_EQ(r.routed_experts(5, 8), std::vector<int16_t>(all.begin() + 5 * 6, all.begin() + 8 * 6));
  }
  {
    h5::Id f(H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT), H5Fclose);
    ASSERT_GE(H5Adelete(f.get(), "routed_layers"), 0);
    h5::write_attr(f.get(), "routed_layers", std::vector<int64_t>{1, 3});
  }
  const ShardReader r(file);
  const std::vector<std::string> problems = r.structure_problems();
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].find("/routed_experts has shape [12, 3, 2], expected [T, layers, top-k] = [12, 2, 2]"),
            std::string::npos)
      << problems[0];
}

TEST(ShardWriter, ChunkRowsTargetTwoMiB) {
  EXPECT_EQ(ShardWriter::chunk_rows(4, 4096, DType::BF16), 64);  // Llama-8B, eagle3: 2 MiB
  EXPECT_EQ(ShardWriter::chunk_rows(4, 4096, DType::F32), 32);
  EXPECT_EQ(ShardWriter::chunk_rows(3, 7168, DType::BF16), 48);  // DeepSeek-V3 width
  EXPECT_EQ(ShardWriter::chunk_rows(1, 1, DType::BF16), 65536);  // capped
  EXPECT_EQ(ShardWriter::chunk_rows(8, 1 << 20, DType::F32), 1);  // rows over 2 MiB: one row
}

TEST(ShardWriter, RejectsMismatchedBatchesAndStaysUsable) {
  TempDir dir;
  const auto meta = test_meta(2, 8, DType::BF16);
  ShardWriter w(dir.path(), "s.h5", meta);
  const auto expect_error = [&](const CapturedBatch& b, const std::string& part) {
    try {
      w.append(b);
      ADD_FAILURE() << "no error, expected one mentioning '" << part << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
    }
  };
  expect_error(make_batch({0}, {3}, test_meta(2, 16, DType::BF16)),
               "hidden size 16, writer expects 8");
  expect_error(make_batch({0}, {3}, test_meta(3, 8, DType::BF16)),
               "3 capture points, writer expects 2");
  expect_error(make_batch({0}, {3}, test_meta(2, 8, DType::F32)),
               "dtype float32, writer expects bfloat16");
  auto truncated = make_batch({0}, {3}, meta);
  truncated.states[1].resize(truncated.states[1].size() - 2);
  expect_error(truncated, "point 1 holds");
  auto negative = make_batch({-1}, {3}, meta);
  expect_error(negative, "dataset index -1");

  const auto good = make_batch({0}, {3}, meta);
  w.append(good);
  const ShardInfo info = w.close();
  EXPECT_EQ(info.samples, 1);
  test::expect_shard_holds(ShardReader(dir.path() / "s.h5"), {good});
  EXPECT_THROW(w.close(), Error);
  EXPECT_THROW(w.append(good), Error);
}

TEST(ShardWriter, DestroyedWithoutCloseRemovesTempFile) {
  TempDir dir;
  const auto meta = test_meta(2, 8, DType::BF16);
  {
    ShardWriter w(dir.path(), "s.h5", meta);
    w.append(make_batch({0}, {3}, meta));
    EXPECT_EQ(dir.files(), std::vector<std::string>{"s.h5.tmp"});
  }
  EXPECT_TRUE(dir.files().empty());
}

TEST(ShardWriter, CreateFailureNamesTheFile) {
  TempDir dir;
  const auto meta = test_meta(2, 8, DType::BF16);
  fs::create_directory(dir.path() / "s.h5.tmp");  // the temp name is taken by a directory
  try {
    ShardWriter w(dir.path(), "s.h5", meta);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("s.h5.tmp"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("HDF5 error"), std::string::npos) << e.what();
  }
  EXPECT_THROW(ShardWriter(dir.path() / "no-such-dir", "s.h5", meta), Error);
}

TEST(ShardWriter, RejectsInconsistentMeta) {
  TempDir dir;
  auto meta = test_meta(2, 8, DType::BF16);
  meta.point_specs.pop_back();
  EXPECT_THROW(ShardWriter(dir.path(), "a.h5", meta), Error);
  meta = test_meta(2, 8, DType::BF16);
  meta.point_ids[1] = 10;  // L + 2
  EXPECT_THROW(ShardWriter(dir.path(), "b.h5", meta), Error);
  meta = test_meta(2, 8, DType::F16);
  EXPECT_THROW(ShardWriter(dir.path(), "c.h5", meta), Error);
  EXPECT_TRUE(dir.files().empty());
}

}  // namespace
}  // namespace layertap::io
