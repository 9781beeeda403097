// The chunk codecs of /hidden_states (io/compression, docs/FORMAT.md "Storage options"): parsing and
// naming --compress, HDF5's byte shuffle, lz4/zstd/gzip round trips at every element size, damaged
// chunks refused, and chunks that HDF5's own filter pipeline encodes and decodes alike.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/compression.hpp"
#include "io/hdf5.hpp"
#include "io_test_util.hpp"

namespace layertap::io {
namespace {

namespace fs = std::filesystem;
using test::activation_like_bytes;
using test::error_of;
using test::TempDir;

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

}  // namespace
}  // namespace layertap::io
