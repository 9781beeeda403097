// Stored chunks of a damaged or hostile shard (io/compression decode_stored_chunk, io/shard_reader):
// the decoders refuse lz4, zstd and deflate chunks that decode short, decode long, or declare
// another size (a 32 KB chunk declaring 1 GiB), quickly and without allocating the declared size;
// ShardReader names the shard, the dataset and the chunk, and refuses a layout declaring huge
// chunks before reading.
#include <gtest/gtest.h>
#include <lz4.h>
#include <zlib.h>
#include <zstd.h>

#include <chrono>
#include <functional>

#include "core/error.hpp"
#include "io/compression.hpp"
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
using Bytes = std::vector<std::byte>;

constexpr auto error_of = test::error_of<Error>;  // a layertap::Error, nothing else

Bytes pattern(std::size_t n) {
  Bytes v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = std::byte((i * 7 + i / 300) & 0xff);
  return v;
}

void put_be(Bytes& out, uint64_t v, int bytes) {
  for (int i = bytes - 1; i >= 0; --i) out.push_back(std::byte(v >> (8 * i)));
}

// --- frames ----------------------------------------------------------------------------------------

// The HDF5 LZ4 filter's format: [8: decoded size][4: block size] then [4: stored][bytes] per block.
Bytes lz4_frame(uint64_t declared, uint32_t block, const Bytes& payload) {
  Bytes body(std::size_t(LZ4_compressBound(int(payload.size()))));
  const int n = LZ4_compress_default(reinterpret_cast<const char*>(payload.data()), reinterpret_cast<char*>(body.data()),
                                     int(payload.size()), int(body.size()));
  Bytes out;
  put_be(out, declared, 8);
  put_be(out, block, 4);
  put_be(out, uint64_t(n), 4);
  out.insert(out.end(), body.begin(), body.begin() + n);
  return out;
}

Bytes zstd_frame(const Bytes& payload, bool with_size) {
  ZSTD_CCtx* c = ZSTD_createCCtx();
  ZSTD_CCtx_setParameter(c, ZSTD_c_contentSizeFlag, with_size ? 1 : 0);
  Bytes out(ZSTD_compressBound(payload.size()));
  const std::size_t n = ZSTD_compress2(c, out.data(), out.size(), payload.data(), payload.size());
  ZSTD_freeCCtx(c);
  EXPECT_FALSE(ZSTD_isError(n));
  out.resize(n);
  return out;
}

// A zstd frame of RLE blocks, 128 KiB each, `total` bytes of zeros in `total / 128 KiB` 4-byte
// blocks: 1 GiB in 32 KB. `declare` writes the size into the frame header (single segment), else a
// 128 KiB window and no size.
Bytes zstd_rle_bomb(uint64_t total, bool declare) {
  Bytes out;
  for (int b : {0x28, 0xB5, 0x2F, 0xFD}) out.push_back(std::byte(b));  // magic, little-endian
  if (declare) {
    out.push_back(std::byte(0xE0));  // 8-byte content size, single segment
    for (int i = 0; i < 8; ++i) out.push_back(std::byte(total >> (8 * i)));
  } else {
    out.push_back(std::byte(0x00));     // no content size, window descriptor follows
    out.push_back(std::byte(7 << 3));   // window 2^(10+7) = 128 KiB
  }
  const uint32_t block = 128 << 10;
  const uint64_t blocks = total / block;
  for (uint64_t b = 0; b < blocks; ++b) {
    const uint32_t header = (b + 1 == blocks ? 1u : 0u) | (1u << 1) | (block << 3);  // RLE block
    for (int i = 0; i < 3; ++i) out.push_back(std::byte(header >> (8 * i)));
    out.push_back(std::byte(0));
  }
  return out;
}

Bytes deflate_frame(const Bytes& payload) {
  uLongf n = compressBound(uLong(payload.size()));
  Bytes out(n);
  EXPECT_EQ(compress2(reinterpret_cast<Bytef*>(out.data()), &n, reinterpret_cast<const Bytef*>(payload.data()),
                      uLong(payload.size()), 1),
            Z_OK);
  out.resize(n);
  return out;
}

// `total` zeros deflated from a small buffer (never holding `total` bytes): 256 MiB in ~256 KB.
Bytes deflate_bomb(uint64_t total) {
  z_stream z{};
  EXPECT_EQ(deflateInit(&z, 9), Z_OK);
  const Bytes zeros(1 << 20);
  Bytes out(1 << 16), all;
  for (uint64_t done = 0; done < total; done += zeros.size()) {
    z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(zeros.data()));
    z.avail_in = uInt(zeros.size());
    const int flush = done + zeros.size() >= total ? Z_FINISH : Z_NO_FLUSH;
    do {
      z.next_out = reinterpret_cast<Bytef*>(out.data());
      z.avail_out = uInt(out.size());
      deflate(&z, flush);
      all.insert(all.end(), out.begin(), out.begin() + long(out.size() - z.avail_out));
    } while (z.avail_out == 0);
  }
  deflateEnd(&z);
  return all;
}

ChunkFilter filter(int id, std::vector<unsigned> cd = {}) { return {id, 0, std::move(cd)}; }

// --- the decoders: one row per hostile chunk --------------------------------------------------------

constexpr std::size_t kChunk = std::size_t(2) << 20;  // what the layout gives: a 2 MiB chunk
constexpr uint64_t kGiB = uint64_t(1) << 30;

struct DecodeRow {
  const char* name;
  std::vector<ChunkFilter> pipeline;
  std::function<Bytes()> stored;
  const char* expected_error;  // a part of the message
};

std::vector<DecodeRow> decode_rows() {
  const std::vector<ChunkFilter> lz4{filter(kShuffleFilter, {2}), filter(kLz4Filter)};
  const std::vector<ChunkFilter> zstd{filter(kShuffleFilter, {2}), filter(kZstdFilter, {1})};
  const std::vector<ChunkFilter> gzip{filter(kShuffleFilter, {2}), filter(kDeflateFilter, {1})};
  return {
      {"lz4 declaring 1 GiB (32 KB)", lz4, [] { return lz4_frame(kGiB, uint32_t(kGiB), pattern(32 << 10)); },
       "declares 1073741824 decoded bytes, the chunk holds 2097152"},
      {"lz4 declaring one byte less", lz4, [] { return lz4_frame(kChunk - 1, uint32_t(kChunk), pattern(kChunk - 1)); },
       "declares 2097151 decoded bytes"},
      {"lz4 block decoding short", lz4, [] { return lz4_frame(kChunk, uint32_t(kChunk), pattern(kChunk - 8)); },
       "(short)"},
      {"lz4 block decoding long", lz4, [] { return lz4_frame(kChunk, uint32_t(kChunk), pattern(kChunk + 64)); },
       "decodes to more than its 2097152 bytes"},
      {"lz4 truncated", lz4,
       [] {
         Bytes f = lz4_frame(kChunk, uint32_t(kChunk), pattern(kChunk));
         f.resize(f.size() / 2);
         return f;
       },
       "remain in the chunk"},
      {"lz4 header only", lz4, [] { return Bytes(7); }, "shorter than the filter's 12-byte header"},
      {"zstd declaring 1 GiB (32 KB)", zstd, [] { return zstd_rle_bomb(kGiB, true); },
       "declares 1073741824 decoded bytes, the chunk holds 2097152"},
      {"zstd bomb without a declared size", zstd, [] { return zstd_rle_bomb(kGiB, false); },
       "decodes to more than the chunk's 2097152 bytes"},
      {"zstd declaring less", zstd, [] { return zstd_frame(pattern(kChunk - 8), true); }, "declares 2097144"},
      {"zstd without size, short", zstd, [] { return zstd_frame(pattern(kChunk - 8), false); }, "(short)"},
      {"zstd without size, long", zstd, [] { return zstd_frame(pattern(kChunk + 64), false); },
       "decodes to more than the chunk's"},
      {"zstd truncated", zstd,
       [] {
         Bytes f = zstd_frame(pattern(kChunk), true);
         f.resize(f.size() - 10);
         return f;
       },
       "truncated or malformed"},
      {"zstd with a second frame", zstd,
       [] {
         Bytes f = zstd_frame(pattern(kChunk), true), g = zstd_frame(pattern(64), true);
         f.insert(f.end(), g.begin(), g.end());
         return f;
       },
       "bytes follow the frame"},
      {"deflate bomb (256 MiB of zeros)", gzip, [] { return deflate_bomb(uint64_t(256) << 20); },
       "decodes to more than the chunk's 2097152 bytes"},
      {"deflate short", gzip, [] { return deflate_frame(pattern(kChunk - 8)); }, "(short)"},
      {"deflate long", gzip, [] { return deflate_frame(pattern(kChunk + 64)); }, "decodes to more than the chunk's"},
      {"deflate truncated", gzip,
       [] {
         Bytes f = deflate_frame(pattern(kChunk));
         f.resize(f.size() / 2);
         return f;
       },
       "truncated after"},
      {"deflate garbage", gzip, [] { return pattern(5000); }, "malformed"},
      {"no codec, short", {}, [] { return pattern(kChunk - 1); }, "(short)"},
      {"no codec, long", {filter(kShuffleFilter, {2})}, [] { return pattern(kChunk + 2); }, "shuffled chunk holds"},
      {"an unknown filter", {filter(kShuffleFilter, {2}), filter(307)}, [] { return pattern(100); },
       "filter 307 of pipeline [shuffle, filter 307] is not one layertap reads"},
      {"two codecs", {filter(kLz4Filter), filter(kZstdFilter)}, [] { return pattern(100); }, "more than one codec"},
      {"a shuffle of another element size", {filter(kShuffleFilter, {4}), filter(kLz4Filter)},
       [] { return lz4_frame(kChunk, uint32_t(kChunk), pattern(kChunk)); }, "declares elements of 4 bytes"},
  };
}

TEST(ChunkDecoding, HostileChunksAreRefusedQuicklyWithoutTheirDeclaredSize) {
  for (const DecodeRow& row : decode_rows()) {
    SCOPED_TRACE(row.name);
    const Bytes stored = row.stored();
    Bytes out, scratch;
    const auto t0 = std::chrono::steady_clock::now();
    const std::string err = error_of(
        [&] { decode_stored_chunk(row.pipeline, 0, 2, stored.data(), stored.size(), kChunk, out, scratch); });
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    EXPECT_NE(err.find(row.expected_error), std::string::npos) << "error: '" << err << "'";
    EXPECT_LT(seconds, 1.0);
    // Nothing beyond the chunk's own size was allocated for it, whatever it declared.
    EXPECT_LE(out.capacity(), kChunk);
    EXPECT_LE(scratch.capacity(), kChunk);
  }
}

TEST(ChunkDecoding, ASizeDeclaredInTheHeaderIsRefusedBeforeAnyAllocation) {
  for (const auto& [pipeline, stored] :
       {std::pair{std::vector<ChunkFilter>{filter(kLz4Filter)}, lz4_frame(kGiB, uint32_t(kGiB), pattern(1000))},
        std::pair{std::vector<ChunkFilter>{filter(kZstdFilter)}, zstd_rle_bomb(kGiB, true)}}) {
    Bytes out, scratch;
    EXPECT_NE(error_of([&] { decode_stored_chunk(pipeline, 0, 1, stored.data(), stored.size(), kChunk, out, scratch); }),
              "");
    EXPECT_EQ(out.capacity(), 0u);
    EXPECT_EQ(scratch.capacity(), 0u);
  }
}

TEST(ChunkDecoding, GoodChunksAndSkippedFiltersDecode) {
  const Bytes data = pattern(kChunk);
  for (const char* spec : {"lz4", "zstd:3", "gzip:2"}) {
    SCOPED_TRACE(spec);
    const Compression c = parse_compression(spec);
    Bytes enc, scratch, out;
    encode_chunk(c, 2, data.data(), data.size(), enc, scratch);
    decode_stored_chunk(expected_pipeline(c, 2), 0, 2, enc.data(), enc.size(), kChunk, out, scratch);
    EXPECT_EQ(out, data);
  }
  // Filter 1 (the codec) marked as not applied: the stored bytes are the shuffled chunk.
  Bytes shuffled(kChunk), out, scratch;
  byte_shuffle(data.data(), shuffled.data(), kChunk, 2);
  decode_stored_chunk(expected_pipeline(parse_compression("lz4"), 2), 0b10, 2, shuffled.data(), shuffled.size(), kChunk,
                      out, scratch);
  EXPECT_EQ(out, data);
  EXPECT_EQ(describe_pipeline(expected_pipeline(parse_compression("zstd:-3"), 2)), "[shuffle, zstd:-3]");
  EXPECT_EQ(describe_pipeline(expected_pipeline(parse_compression("gzip"), 1)), "[deflate:1]");
}

// --- ShardReader: a tampered chunk in a real shard -------------------------------------------------

// Replaces chunk `k` of /hidden_states with `stored` (written raw, as a hostile file would hold it).
void replace_chunk(const fs::path& file, int64_t row, const Bytes& stored) {
  const hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t ds = H5Dopen2(f, "hidden_states", H5P_DEFAULT);
  const hsize_t offset[3] = {hsize_t(row), 0, 0};
  EXPECT_GE(H5Dwrite_chunk(ds, H5P_DEFAULT, 0, offset, stored.size(), stored.data()), 0);
  H5Dclose(ds);
  H5Fclose(f);
}

TEST(ChunkDecoding, ShardReaderNamesTheShardDatasetAndChunk) {
  struct Row {
    const char* compression;
    std::function<Bytes(std::size_t)> chunk;  // from the chunk's decoded size
    const char* expected_error;
  };
  const std::vector<Row> rows = {
      {"lz4", [](std::size_t) { return lz4_frame(kGiB, uint32_t(kGiB), pattern(32 << 10)); }, "declares 1073741824"},
      {"lz4", [](std::size_t n) { return lz4_frame(n, uint32_t(n), pattern(n / 2)); }, "(short)"},
      {"zstd", [](std::size_t) { return zstd_rle_bomb(kGiB, true); }, "declares 1073741824"},
      {"zstd", [](std::size_t n) { return zstd_frame(pattern(n - 2), false); }, "(short)"},
      {"gzip", [](std::size_t n) { return deflate_frame(pattern(n - 2)); }, "(short)"},
      {"gzip", [](std::size_t) { return deflate_bomb(uint64_t(64) << 20); }, "decodes to more than"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.compression);
    TempDir dir;
    OutputMeta meta = test_meta(4, 64, DType::BF16);
    meta.compression = parse_compression(row.compression);
    const int64_t rpc = ShardWriter::chunk_rows(4, 64, DType::BF16);
    const std::size_t chunk_bytes = std::size_t(rpc) * 4 * 64 * 2;
    {
      ShardWriter w(dir.path(), "shard-00000.h5", meta);
      w.append(make_batch({0, 1, 2}, {rpc, rpc, 5}, meta));  // chunks 0, 1 and 2 (the edge)
      w.close();
    }
    const fs::path file = dir.path() / "shard-00000.h5";
    replace_chunk(file, rpc, row.chunk(chunk_bytes));  // chunk 1
    const ShardReader r(file);
    EXPECT_EQ(r.hidden_states(0, rpc).size(), std::size_t(rpc * 4 * 64));  // chunk 0 is sound
    const auto t0 = std::chrono::steady_clock::now();
    const std::string err = error_of([&] { r.hidden_states(rpc - 1, rpc + 1); });
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 1.0);
    for (const std::string& part : {std::string("/hidden_states chunk 1 (rows ") + std::to_string(rpc), file.string(),
                                   std::string(row.expected_error)})
      EXPECT_NE(err.find(part), std::string::npos) << "missing '" << part << "' in '" << err << "'";
    EXPECT_EQ(error_of([&] { r.hidden_states(rpc, rpc + 1); }), err);  // remembered, not decoded again
    EXPECT_EQ(r.hidden_states(2 * rpc, 2 * rpc + 5).size(), std::size_t(5 * 4 * 64));  // the edge chunk reads
  }
}

TEST(ChunkDecoding, ALayoutDeclaringHugeChunksIsRefusedBeforeReading) {
  TempDir dir;
  const fs::path file = dir.path() / "huge.h5";
  {
    h5::Id f = h5::create_file(file);
    const hsize_t dims[3] = {4, 4, 4096}, max[3] = {H5S_UNLIMITED, 4, 4096}, chunk[3] = {32768, 4, 4096};
    h5::Id space(H5Screate_simple(3, dims, max), H5Sclose);
    h5::Id dcpl(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    H5Pset_chunk(dcpl.get(), 3, chunk);
    add_filters(dcpl.get(), parse_compression("lz4"), 4);
    h5::Id ds(H5Dcreate2(f.get(), "hidden_states", H5T_IEEE_F32LE, space.get(), H5P_DEFAULT, dcpl.get(), H5P_DEFAULT),
              H5Dclose);
    ASSERT_GE(ds.get(), 0);
    const OutputMeta meta = test_meta(4, 4096, DType::F32);
    for (const auto& [k, v] : std::vector<std::pair<const char*, int64_t>>{
             {"format_version", 1}, {"num_layers", meta.num_layers}, {"hidden_size", meta.hidden}})
      h5::write_attr(f.get(), k, v);
    h5::write_attr(f.get(), "capture_points", meta.point_specs);
    h5::write_attr(f.get(), "capture_point_ids", meta.point_ids);
    for (const char* k : {"capture_request", "capture_convention", "architecture", "config_sha256",
                          "weights_fingerprint"})
      h5::write_attr(f.get(), k, std::string("x"));
    h5::write_attr(f.get(), "dtype", std::string("float32"));
    h5::write_attr(f.get(), "compression", std::string("lz4"));
  }
  const ShardReader r(file);
  const std::string err = error_of([&] { r.hidden_states(0, 1); });
  EXPECT_NE(err.find("declares chunks of [32768, 4, 4096] x 4 bytes"), std::string::npos) << err;
}

}  // namespace
}  // namespace layertap::io
