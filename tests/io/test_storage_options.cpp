// Storage options end to end (docs/FORMAT.md, "Storage options"): shards written with every
// dtype x compression combination through ShardWriter and OutputWriter, read back by ShardReader,
// byte-identical whatever the thread count, their float8 scales and error statistics checked, and
// read by h5py and h5ls. The codecs and the float8 encoder alone: test_compression.cpp and
// test_fp8_storage.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

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
using test::activation_like_bytes;
using test::error_of;
using test::expect_shard_holds;
using test::make_batch;
using test::TempDir;
using test::test_meta;

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
