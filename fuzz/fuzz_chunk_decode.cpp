// libFuzzer target: the chunk decoders layertap reads shards with (io/compression.cpp,
// layertap::io::decode_stored_chunk): the HDF5 LZ4 filter's block format, one zstd frame, one zlib
// stream, HDF5's byte shuffle, filter masks. The input is
//   byte 0     bits 0-1 codec (none, lz4, zstd, deflate), bit 2 shuffle, bits 3-4 element size
//              (1, 2, 4, 8 bytes), bit 5 round-trip mode, bits 6-7 the filter mask (filters 0, 1 skipped)
//   bytes 1-3  the chunk's decoded size from its layout (24-bit little-endian, its low 18 bits: < 256 KiB)
//   the rest   the stored chunk (decode mode) or a payload (round-trip mode)
// Decode mode: a layertap::Error is the expected outcome for a bad chunk; a chunk that decodes must
// give exactly the layout's size. Round-trip mode (lz4, zstd, deflate): encode_chunk() then
// decode_stored_chunk() with the pipeline add_filters() declares must give the payload back. Any other exception, a crash, a
// sanitizer report, a wrong size or a round trip that differs is a finding; so is an allocation
// beyond the layout's size (libFuzzer's -rss_limit_mb / -malloc_limit_mb catch a decoder that
// sizes its output from what the chunk declares).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "core/error.hpp"
#include "io/compression.hpp"

namespace {

using layertap::io::ChunkFilter;
using layertap::io::Codec;
using layertap::io::Compression;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const uint8_t mode = data[0];
  const Codec codecs[] = {Codec::None, Codec::Lz4, Codec::Zstd, Codec::Gzip};
  const Codec codec = codecs[mode & 3];
  const bool shuffle = (mode >> 2) & 1;
  const std::size_t element = std::size_t(1) << ((mode >> 3) & 3);
  const bool round_trip = (mode >> 5) & 1;
  const uint32_t skipped = (mode >> 6) & 3;
  const std::size_t expected = (std::size_t(data[1]) | std::size_t(data[2]) << 8 | std::size_t(data[3]) << 16) &
                               ((std::size_t(1) << 18) - 1);
  const auto* body = reinterpret_cast<const std::byte*>(data + 4);
  const std::size_t n = size - 4;
  std::vector<std::byte> out, scratch;

  if (round_trip) {
    // Only codecs go through encode_chunk (the writer stores uncompressed chunks as they are).
    if (n == 0 || codec == Codec::None) return 0;
    Compression c;
    c.codec = codec;
    c.level = codec == Codec::Zstd ? 1 - int(expected % 9) : (codec == Codec::Gzip ? 1 + int(expected % 9) : 0);
    std::vector<std::byte> encoded, enc_scratch;
    layertap::io::encode_chunk(c, element, body, n, encoded, enc_scratch);
    layertap::io::decode_stored_chunk(layertap::io::expected_pipeline(c, element), 0, element, encoded.data(),
                                      encoded.size(), n, out, scratch);  // throws: a finding
    if (out.size() != n) std::abort();
    for (std::size_t i = 0; i < n; ++i)
      if (out[i] != body[i]) std::abort();
    return 0;
  }

  std::vector<ChunkFilter> pipeline;
  if (shuffle) pipeline.push_back({layertap::io::kShuffleFilter, 0, {unsigned(element)}});
  switch (codec) {
    case Codec::Lz4: pipeline.push_back({layertap::io::kLz4Filter, 0, {}}); break;
    case Codec::Zstd: pipeline.push_back({layertap::io::kZstdFilter, 0, {1}}); break;
    case Codec::Gzip: pipeline.push_back({layertap::io::kDeflateFilter, 0, {1}}); break;
    case Codec::None: break;
  }
  try {
    layertap::io::decode_stored_chunk(pipeline, skipped, element, body, n, expected, out, scratch);
    if (out.size() != expected) std::abort();
  } catch (const layertap::Error&) {
    // A refused chunk: the expected outcome.
  }
  if (out.capacity() > expected + 64 || scratch.capacity() > std::max(expected, n) + 64) std::abort();
  return 0;
}
