// Lossless compression of /hidden_states (docs/FORMAT.md, "Storage options").
//
// layertap compresses whole chunks itself, on worker threads (ChunkPipeline in
// io/shard_writer.cpp), and hands the finished bytes to HDF5 with H5Dwrite_chunk; the dataset
// records the standard HDF5 filter pipeline those bytes follow, so any HDF5 reader with the
// filter decodes them:
//   byte shuffle (HDF5's built-in filter 2; left out for 1-byte elements), then
//   lz4   registered filter 32004 (the "HDF5 LZ4 filter": Debian's hdf5-filter-plugin, PyPI
//         hdf5plugin.LZ4), one block per chunk;
//   zstd  registered filter 32015 (PyPI hdf5plugin.Zstd), one frame per chunk;
//   gzip  HDF5's built-in deflate filter 1 (every HDF5 reader has it; slow to write).
// This process registers its own LZ4 and Zstandard filter implementations with HDF5
// (register_filters()), so layertap writes and reads them without any plugin installed.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace layertap::io {

enum class Codec { None, Lz4, Zstd, Gzip };

struct Compression {
  Codec codec = Codec::None;
  int level = 0;    // zstd: -7..22 (0 means its default, 1); gzip: 1..9 (0 means 1); lz4: unused
  int threads = 0;  // worker threads that encode chunks; 0 = automatic (compression_threads())

  bool enabled() const { return codec != Codec::None; }
  bool operator==(const Compression&) const = default;
};

// "none", "lz4", "zstd", "zstd:<level>", "gzip", "gzip:<level>"; throws naming the accepted forms.
Compression parse_compression(std::string_view spec);
// The canonical spelling parse_compression() accepts back: "none", "lz4", "zstd:1", "gzip:1".
std::string compression_name(const Compression& c);
// The codec with its level filled in (zstd 0 -> 1, gzip 0 -> 1); throws on a level out of range.
Compression resolved(const Compression& c);
// Worker threads for `c`: c.threads if set, else min(4, hardware threads), at least 1.
int compression_threads(const Compression& c);

// HDF5 filter ids.
inline constexpr int kShuffleFilter = 2, kDeflateFilter = 1, kLz4Filter = 32004, kZstdFilter = 32015;

// Registers layertap's LZ4 (32004) and Zstandard (32015) filters with HDF5 in this process, once;
// later calls do nothing. Decoding checks every length against the buffers (hostile files).
void register_filters();

// Adds the filters that describe encode_chunk()'s output to dataset creation property list `dcpl`.
void add_filters(int64_t dcpl, const Compression& c, std::size_t element_size);

// Encodes `n` bytes of `element_size`-byte elements exactly as HDF5's pipeline from add_filters()
// would: byte shuffle (elements wider than 1 byte), then the codec. Thread-safe; no HDF5 calls.
// `scratch` is reused between calls.
void encode_chunk(const Compression& c, std::size_t element_size, const std::byte* data, std::size_t n,
                  std::vector<std::byte>& out, std::vector<std::byte>& scratch);

// The inverse of encode_chunk (tests, benchmarks); `n` is the decoded size. Throws on malformed
// input, as decode_stored_chunk does.
void decode_chunk(const Compression& c, std::size_t element_size, const std::byte* data, std::size_t size,
                  std::size_t n, std::vector<std::byte>& out);

// --- Reading stored chunks of a file that may be damaged or hostile --------------------------------
//
// layertap's readers (ShardReader: inspect, verify, resume) never let HDF5 run a filter pipeline
// on a shard's data: they read each stored chunk raw (H5Dread_chunk) and decode it here, into
// exactly the size the dataset's layout gives every chunk (its chunk dims times the element size;
// edge chunks are full-size chunks in HDF5). The registered filter callbacks above serve writes and
// HDF5's own reads in tests.

// One filter of a dataset's pipeline, as H5Pget_filter2 reports it.
struct ChunkFilter {
  int id = 0;
  unsigned flags = 0;
  std::vector<unsigned> cd_values;
};

// The largest decoded chunk layertap reads (its own are about 2 MiB; HDF5 allows 4 GiB): a layout
// declaring more is damaged or hostile and is refused before anything is allocated for it.
inline constexpr std::size_t kMaxChunkBytes = std::size_t(1) << 30;

// The most bytes a stored chunk of `expected` decoded bytes can take with any codec layertap reads
// (their worst-case expansion plus headers); a chunk index claiming more is damaged.
std::size_t max_stored_chunk_bytes(std::size_t expected);

// Decodes one stored chunk of a dataset whose pipeline is `pipeline` (in write order: shuffle, then
// lz4, zstd or deflate; at most one codec) into exactly `expected` bytes. Bit i of `skipped` marks
// filter i as not applied to this chunk (the filter mask H5Dread_chunk reports). Each codec checks
// the size its header or frame declares against `expected` before anything is allocated (a chunk
// declaring another size, a 1 GiB bomb included, costs nothing), decodes into `expected` bytes and
// no more, and refuses a chunk that decodes short or long; an unknown filter, a shuffle of another
// element size than `element_size` or a chunk whose pipeline leaves another size is refused too.
// Throws layertap::Error saying what is wrong (the caller names the file, dataset and chunk).
// Thread-safe; no HDF5 calls. `scratch` is reused between calls.
void decode_stored_chunk(const std::vector<ChunkFilter>& pipeline, uint32_t skipped, std::size_t element_size,
                         const std::byte* data, std::size_t size, std::size_t expected, std::vector<std::byte>& out,
                         std::vector<std::byte>& scratch);

// The pipeline add_filters() gives `c` for elements of `element_size` bytes, for comparing a shard's
// actual filters with what its manifest and attributes say.
std::vector<ChunkFilter> expected_pipeline(const Compression& c, std::size_t element_size);
// "shuffle", "lz4", "zstd:3", "deflate:1", "filter 307": one filter, with its level where it has one.
std::string describe_filter(const ChunkFilter& f);
// "[shuffle, zstd:1]", "[]"
std::string describe_pipeline(const std::vector<ChunkFilter>& pipeline);

// HDF5's byte shuffle: byte j of element i goes to j * (n / s) + i; a tail of n % s bytes is copied.
void byte_shuffle(const std::byte* in, std::byte* out, std::size_t n, std::size_t element_size);
void byte_unshuffle(const std::byte* in, std::byte* out, std::size_t n, std::size_t element_size);

}  // namespace layertap::io
