#include "io/compression.hpp"

#include <hdf5.h>
#include <lz4.h>
#include <zlib.h>
#include <zstd.h>

#include <algorithm>
#include <charconv>
#include <cstring>
#include <mutex>
#include <thread>
#include <type_traits>

#include "core/error.hpp"
#include "io/hdf5.hpp"

namespace layertap::io {

static_assert(std::is_same_v<hid_t, int64_t>, "add_filters takes an hid_t as int64_t");

namespace {

// The largest chunk a filter decodes: HDF5 chunks are below 4 GiB, layertap's about 2 MiB; a
// header declaring more is damaged or hostile, and is refused before anything is allocated.
constexpr std::size_t kMaxDecoded = std::size_t(1) << 30;

void put_be32(std::byte* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = std::byte(v >> (24 - 8 * i));
}
void put_be64(std::byte* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = std::byte(v >> (56 - 8 * i));
}
uint32_t get_be32(const std::byte* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v = (v << 8) | uint32_t(p[i]);
  return v;
}
uint64_t get_be64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | uint64_t(p[i]);
  return v;
}

// --- LZ4, in the format of the HDF5 LZ4 filter (32004) --------------------------------------------
// [8: decoded size, big-endian][4: block size, big-endian] then per block
// [4: stored size, big-endian][stored bytes]; a block whose stored size equals its decoded size is
// raw (LZ4 did not shrink it). layertap writes one block per chunk.

std::size_t lz4_encode(const std::byte* in, std::size_t n, std::vector<std::byte>& out) {
  LT_CHECK(n > 0 && n <= std::size_t(LZ4_MAX_INPUT_SIZE), "lz4: chunk of ", n, " bytes is outside 1..",
           LZ4_MAX_INPUT_SIZE);
  out.resize(16 + std::size_t(LZ4_compressBound(int(n))));
  put_be64(out.data(), n);
  put_be32(out.data() + 8, uint32_t(n));
  int stored = LZ4_compress_default(reinterpret_cast<const char*>(in), reinterpret_cast<char*>(out.data() + 16),
                                    int(n), int(out.size() - 16));
  if (stored <= 0 || std::size_t(stored) >= n) {  // incompressible: store the block raw
    stored = int(n);
    std::memcpy(out.data() + 16, in, n);
  }
  put_be32(out.data() + 12, uint32_t(stored));
  out.resize(16 + std::size_t(stored));
  return out.size();
}

// Decodes into exactly `expected` bytes; throws saying what is wrong. The header's declared size is
// checked against `expected` before `out` is sized, and every block decodes into its own bytes of
// `out` and no more (LZ4_decompress_safe fails a block that would write past its capacity).
void lz4_decode(const std::byte* in, std::size_t size, std::size_t expected, std::vector<std::byte>& out) {
  LT_CHECK(size >= 12, "lz4: the stored chunk of ", size, " bytes is shorter than the filter's 12-byte header");
  const uint64_t total = get_be64(in);
  uint64_t block = get_be32(in + 8);
  LT_CHECK(total == expected, "lz4: the header declares ", total, " decoded bytes, the chunk holds ", expected);
  LT_CHECK(total == 0 || block > 0, "lz4: the header declares blocks of 0 bytes");
  block = std::min<uint64_t>(block, total);
  out.resize(std::size_t(total));
  std::size_t pos = 12, done = 0;
  for (int64_t b = 0; done < total; ++b) {
    const std::size_t this_block = std::size_t(std::min<uint64_t>(block, total - done));
    LT_CHECK(size - pos >= 4, "lz4: the chunk ends before block ", b, " (", done, " of ", total,
             " bytes decoded: short)");
    const std::size_t stored = get_be32(in + pos);
    pos += 4;
    LT_CHECK(stored <= size - pos, "lz4: block ", b, " declares ", stored, " stored bytes, ", size - pos,
             " remain in the chunk");
    if (stored == this_block) {
      std::memcpy(out.data() + done, in + pos, stored);
    } else {
      const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(in + pos),
                                          reinterpret_cast<char*>(out.data() + done), int(stored), int(this_block));
      LT_CHECK(got >= 0, "lz4: block ", b, " is malformed or decodes to more than its ", this_block, " bytes");
      LT_CHECK(std::size_t(got) == this_block, "lz4: block ", b, " decodes to ", got, " of its ", this_block,
               " bytes (short)");
    }
    pos += stored;
    done += this_block;
  }
}

// The decoded size an LZ4 chunk declares (HDF5's own reads through the registered filter, which
// knows no chunk size): at most kMaxDecoded.
std::size_t lz4_declared(const std::byte* in, std::size_t size) {
  LT_CHECK(size >= 12, "lz4: the stored chunk of ", size, " bytes is shorter than the filter's 12-byte header");
  const uint64_t total = get_be64(in);
  LT_CHECK(total <= kMaxDecoded, "lz4: the header declares ", total, " decoded bytes, more than ", kMaxDecoded);
  return std::size_t(total);
}

// --- Zstandard, in the format of the HDF5 Zstandard filter (32015): one frame -----------------------

std::size_t zstd_encode(const std::byte* in, std::size_t n, int level, std::vector<std::byte>& out) {
  thread_local struct Ctx {
    ZSTD_CCtx* c = ZSTD_createCCtx();
    ~Ctx() { ZSTD_freeCCtx(c); }
  } ctx;
  LT_CHECK(ctx.c != nullptr, "zstd: cannot create a compression context");
  out.resize(ZSTD_compressBound(n));
  const std::size_t stored = ZSTD_compressCCtx(ctx.c, out.data(), out.size(), in, n, level);
  LT_CHECK(!ZSTD_isError(stored), "zstd: ", ZSTD_getErrorName(stored));
  out.resize(stored);
  return stored;
}

// One frame that fills the chunk. A frame declaring its size (as ZSTD_compress writes it) is checked
// against `expected` before `out` is sized; any frame decodes into `expected` bytes at most
// (ZSTD_decompressDCtx fails one that would write more) and must fill them.
void zstd_decode(const std::byte* in, std::size_t size, std::size_t expected, std::vector<std::byte>& out) {
  const unsigned long long declared = ZSTD_getFrameContentSize(in, size);
  LT_CHECK(declared != ZSTD_CONTENTSIZE_ERROR, "zstd: the stored chunk of ", size, " bytes is not a zstd frame");
  LT_CHECK(declared == ZSTD_CONTENTSIZE_UNKNOWN || declared == expected, "zstd: the frame declares ", declared,
           " decoded bytes, the chunk holds ", expected);
  const std::size_t frame = ZSTD_findFrameCompressedSize(in, size);
  LT_CHECK(!ZSTD_isError(frame), "zstd: the frame is truncated or malformed (", ZSTD_getErrorName(frame), ")");
  LT_CHECK(frame == size, "zstd: ", size - frame, " bytes follow the frame (layertap reads one frame per chunk)");
  thread_local struct Ctx {
    ZSTD_DCtx* d = ZSTD_createDCtx();
    ~Ctx() { ZSTD_freeDCtx(d); }
  } ctx;
  LT_CHECK(ctx.d != nullptr, "zstd: cannot create a decompression context");
  out.resize(expected);
  const std::size_t got = ZSTD_decompressDCtx(ctx.d, out.data(), out.size(), in, size);
  LT_CHECK(!ZSTD_isError(got), "zstd: the frame is malformed or decodes to more than the chunk's ", expected,
           " bytes (", ZSTD_getErrorName(got), ")");
  LT_CHECK(got == expected, "zstd: the frame decodes to ", got, " of the chunk's ", expected, " bytes (short)");
}

std::size_t zstd_declared(const std::byte* in, std::size_t size) {
  const unsigned long long total = ZSTD_getFrameContentSize(in, size);
  LT_CHECK(total != ZSTD_CONTENTSIZE_ERROR && total != ZSTD_CONTENTSIZE_UNKNOWN,
           "zstd: the frame does not declare its decoded size");
  LT_CHECK(total <= kMaxDecoded, "zstd: the frame declares ", total, " decoded bytes, more than ", kMaxDecoded);
  return std::size_t(total);
}

// --- deflate, as HDF5's built-in filter 1 writes it: one zlib stream ----------------------------------

std::size_t gzip_encode(const std::byte* in, std::size_t n, int level, std::vector<std::byte>& out) {
  uLongf stored = compressBound(uLong(n));
  out.resize(stored);
  const int rc = compress2(reinterpret_cast<Bytef*>(out.data()), &stored, reinterpret_cast<const Bytef*>(in),
                           uLong(n), level);
  LT_CHECK(rc == Z_OK, "deflate: zlib error ", rc);
  out.resize(stored);
  return stored;
}

// One zlib stream (HDF5's deflate filter) inflated into `expected` bytes and no more: a stream that
// would go on (a bomb) stops there and is refused, as is one that ends short.
void gzip_decode(const std::byte* in, std::size_t size, std::size_t expected, std::vector<std::byte>& out) {
  LT_CHECK(size <= std::size_t(UINT32_MAX) && expected <= std::size_t(UINT32_MAX), "deflate: a chunk of ", size,
           " stored and ", expected, " decoded bytes is beyond zlib's 4 GiB");
  z_stream z{};
  LT_CHECK(inflateInit(&z) == Z_OK, "deflate: cannot initialise zlib");
  out.resize(expected);
  z.next_in = reinterpret_cast<Bytef*>(const_cast<std::byte*>(in));
  z.avail_in = uInt(size);
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = uInt(expected);
  const int rc = inflate(&z, Z_FINISH);
  const std::size_t got = expected - z.avail_out;
  const std::string msg = z.msg ? z.msg : "";
  inflateEnd(&z);
  if (rc == Z_STREAM_END) {
    LT_CHECK(got == expected, "deflate: the stream decodes to ", got, " of the chunk's ", expected, " bytes (short)");
    return;
  }
  LT_CHECK(rc != Z_DATA_ERROR && rc != Z_NEED_DICT, "deflate: the stream is malformed (", msg, ")");
  LT_CHECK(got < expected, "deflate: the stream decodes to more than the chunk's ", expected, " bytes");
  LT_FAIL("deflate: the stream is truncated after ", got, " of the chunk's ", expected, " bytes (short)");
}

// --- HDF5 filter callbacks (H5Z_func_t): return the new size, or 0 on failure -------------------------

// Decoding sizes the output from what the chunk declares (HDF5 does not tell a filter the chunk's
// size); layertap's own readers decode with decode_stored_chunk instead, which knows it.
template <void (*Decode)(const std::byte*, std::size_t, std::size_t, std::vector<std::byte>&),
          std::size_t (*Declared)(const std::byte*, std::size_t), typename Encode>
std::size_t run_filter(unsigned flags, std::size_t nbytes, std::size_t* buf_size, void** buf, Encode encode) noexcept {
  try {
    std::vector<std::byte> out;
    const auto* in = static_cast<const std::byte*>(*buf);
    if (flags & H5Z_FLAG_REVERSE) {
      Decode(in, nbytes, Declared(in, nbytes), out);
    } else {
      encode(in, nbytes, out);
    }
    void* next = H5allocate_memory(std::max<std::size_t>(out.size(), 1), false);
    if (next == nullptr) return 0;
    std::memcpy(next, out.data(), out.size());
    H5free_memory(*buf);
    *buf = next;
    *buf_size = std::max<std::size_t>(out.size(), 1);
    return out.size();
  } catch (...) {
    return 0;
  }
}

std::size_t lz4_filter(unsigned flags, std::size_t, const unsigned[], std::size_t nbytes, std::size_t* buf_size,
                       void** buf) {
  return run_filter<lz4_decode, lz4_declared>(flags, nbytes, buf_size, buf, [](const std::byte* in, std::size_t n, auto& out) {
    lz4_encode(in, n, out);
  });
}

std::size_t zstd_filter(unsigned flags, std::size_t cd_nelmts, const unsigned cd_values[], std::size_t nbytes,
                        std::size_t* buf_size, void** buf) {
  int level = cd_nelmts > 0 ? int(cd_values[0]) : 1;
  level = std::clamp(level, ZSTD_minCLevel(), ZSTD_maxCLevel());
  return run_filter<zstd_decode, zstd_declared>(flags, nbytes, buf_size, buf, [level](const std::byte* in, std::size_t n, auto& out) {
    zstd_encode(in, n, level, out);
  });
}

const H5Z_class2_t kLz4Class = {H5Z_CLASS_T_VERS, H5Z_filter_t(kLz4Filter), 1, 1,
                                "lz4 (layertap; the HDF5 LZ4 filter's format)", nullptr, nullptr, lz4_filter};
const H5Z_class2_t kZstdClass = {H5Z_CLASS_T_VERS, H5Z_filter_t(kZstdFilter), 1, 1,
                                 "zstd (layertap; the HDF5 Zstandard filter's format)", nullptr, nullptr, zstd_filter};

int parse_level(std::string_view spec, std::string_view text) {
  int level = 0;
  const auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), level);
  LT_CHECK(ec == std::errc() && ptr == text.data() + text.size(), "compression '", spec,
           "': the level after ':' must be an integer");
  return level;
}

}  // namespace

Compression parse_compression(std::string_view spec) {
  const std::size_t colon = spec.find(':');
  const std::string_view name = spec.substr(0, colon);
  Compression c;
  if (name == "none" && colon == std::string_view::npos) return c;
  if (name == "lz4" && colon == std::string_view::npos) {
    c.codec = Codec::Lz4;
  } else if (name == "zstd") {
    c.codec = Codec::Zstd;
  } else if (name == "gzip") {
    c.codec = Codec::Gzip;
  } else {
    LT_FAIL("unknown compression '", spec, "' (expected none, lz4, zstd, zstd:<level -7..22>, gzip or gzip:<level 1..9>)");
  }
  if (colon != std::string_view::npos) c.level = parse_level(spec, spec.substr(colon + 1));
  return resolved(c);
}

Compression resolved(const Compression& in) {
  Compression c = in;
  switch (c.codec) {
    case Codec::None:
    case Codec::Lz4:
      c.level = 0;
      break;
    case Codec::Zstd:
      if (c.level == 0) c.level = 1;
      LT_CHECK(c.level >= -7 && c.level <= 22, "zstd level ", c.level, " is outside -7..22");
      break;
    case Codec::Gzip:
      if (c.level == 0) c.level = 1;
      LT_CHECK(c.level >= 1 && c.level <= 9, "gzip level ", c.level, " is outside 1..9");
      break;
  }
  LT_CHECK(c.threads >= 0 && c.threads <= 256, "compression threads ", c.threads, " is outside 0..256");
  return c;
}

std::string compression_name(const Compression& in) {
  const Compression c = resolved(in);
  switch (c.codec) {
    case Codec::None: return "none";
    case Codec::Lz4: return "lz4";
    case Codec::Zstd: return cat("zstd:", c.level);
    case Codec::Gzip: return cat("gzip:", c.level);
  }
  return "?";
}

int compression_threads(const Compression& c) {
  if (c.threads > 0) return c.threads;
  return int(std::clamp(std::thread::hardware_concurrency(), 1u, 4u));
}

void register_filters() {
  static std::once_flag once;
  static std::string error;
  std::call_once(once, [] {
    h5::quiet_errors();
    try {
      h5::check(H5Zregister(&kLz4Class), "registering the LZ4 filter (32004)");
      h5::check(H5Zregister(&kZstdClass), "registering the Zstandard filter (32015)");
    } catch (const Error& e) {
      error = e.what();
    }
  });
  LT_CHECK(error.empty(), error);
}

void add_filters(int64_t dcpl, const Compression& in, std::size_t element_size) {
  const Compression c = resolved(in);
  if (!c.enabled()) return;
  register_filters();
  if (element_size > 1) h5::check(H5Pset_shuffle(dcpl), "adding the shuffle filter");
  switch (c.codec) {
    case Codec::Lz4:
      h5::check(H5Pset_filter(dcpl, H5Z_filter_t(kLz4Filter), H5Z_FLAG_MANDATORY, 0, nullptr), "adding the LZ4 filter");
      break;
    case Codec::Zstd: {
      const unsigned level = unsigned(c.level);  // negative levels travel as their two's complement, as in hdf5plugin
      h5::check(H5Pset_filter(dcpl, H5Z_filter_t(kZstdFilter), H5Z_FLAG_MANDATORY, 1, &level),
                "adding the Zstandard filter");
      break;
    }
    case Codec::Gzip:
      h5::check(H5Pset_deflate(dcpl, unsigned(c.level)), "adding the deflate filter");
      break;
    case Codec::None:
      break;
  }
}

void byte_shuffle(const std::byte* in, std::byte* out, std::size_t n, std::size_t s) {
  const std::size_t count = n / s;
  if (s == 2) {
    for (std::size_t i = 0; i < count; ++i) {
      out[i] = in[2 * i];
      out[count + i] = in[2 * i + 1];
    }
  } else if (s == 4) {
    for (std::size_t i = 0; i < count; ++i) {
      out[i] = in[4 * i];
      out[count + i] = in[4 * i + 1];
      out[2 * count + i] = in[4 * i + 2];
      out[3 * count + i] = in[4 * i + 3];
    }
  } else {
    for (std::size_t j = 0; j < s; ++j)
      for (std::size_t i = 0; i < count; ++i) out[j * count + i] = in[i * s + j];
  }
  if (n > count * s) std::memcpy(out + count * s, in + count * s, n - count * s);
}

void byte_unshuffle(const std::byte* in, std::byte* out, std::size_t n, std::size_t s) {
  const std::size_t count = n / s;
  for (std::size_t j = 0; j < s; ++j)
    for (std::size_t i = 0; i < count; ++i) out[i * s + j] = in[j * count + i];
  if (n > count * s) std::memcpy(out + count * s, in + count * s, n - count * s);
}

void encode_chunk(const Compression& c, std::size_t element_size, const std::byte* data, std::size_t n,
                  std::vector<std::byte>& out, std::vector<std::byte>& scratch) {
  const std::byte* src = data;
  if (element_size > 1) {
    scratch.resize(n);
    byte_shuffle(data, scratch.data(), n, element_size);
    src = scratch.data();
  }
  switch (c.codec) {
    case Codec::Lz4: lz4_encode(src, n, out); return;
    case Codec::Zstd: zstd_encode(src, n, c.level == 0 ? 1 : c.level, out); return;
    case Codec::Gzip: gzip_encode(src, n, c.level == 0 ? 1 : c.level, out); return;
    case Codec::None: out.assign(src, src + n); return;
  }
}

std::vector<ChunkFilter> expected_pipeline(const Compression& in, std::size_t element_size) {
  const Compression c = resolved(in);
  std::vector<ChunkFilter> p;
  if (!c.enabled()) return p;
  if (element_size > 1) p.push_back({kShuffleFilter, 0, {unsigned(element_size)}});
  switch (c.codec) {
    case Codec::Lz4: p.push_back({kLz4Filter, H5Z_FLAG_MANDATORY, {}}); break;
    case Codec::Zstd: p.push_back({kZstdFilter, H5Z_FLAG_MANDATORY, {unsigned(c.level)}}); break;
    case Codec::Gzip: p.push_back({kDeflateFilter, 0, {unsigned(c.level)}}); break;
    case Codec::None: break;
  }
  return p;
}

std::string describe_filter(const ChunkFilter& f) {
  const auto level = [&](const char* name) {
    return f.cd_values.empty() ? std::string(name) : cat(name, ":", int(f.cd_values[0]));
  };
  switch (f.id) {
    case kShuffleFilter: return "shuffle";
    case kLz4Filter: return "lz4";
    case kZstdFilter: return level("zstd");
    case kDeflateFilter: return level("deflate");
    default: return cat("filter ", f.id);
  }
}

std::string describe_pipeline(const std::vector<ChunkFilter>& pipeline) {
  std::string s = "[";
  for (std::size_t i = 0; i < pipeline.size(); ++i) s += cat(i ? ", " : "", describe_filter(pipeline[i]));
  return s + "]";
}

std::size_t max_stored_chunk_bytes(std::size_t expected) {
  // LZ4 (n / 255 + 16 per block, plus the filter's headers), zstd (n / 256 + 64 per 128 KiB block)
  // and deflate (n / 1000 + 13) all stay below n + n / 64 + 64 KiB.
  return expected + expected / 64 + (std::size_t(64) << 10);
}

void decode_stored_chunk(const std::vector<ChunkFilter>& pipeline, uint32_t skipped, std::size_t element_size,
                         const std::byte* data, std::size_t size, std::size_t expected, std::vector<std::byte>& out,
                         std::vector<std::byte>& scratch) {
  LT_CHECK(expected <= kMaxChunkBytes, "the layout gives chunks of ", expected, " bytes, more than ", kMaxChunkBytes);
  LT_CHECK(pipeline.size() <= 32, "a pipeline of ", pipeline.size(), " filters");
  LT_CHECK(element_size > 0, "elements of 0 bytes");
  int codecs = 0;
  for (const ChunkFilter& f : pipeline) {
    LT_CHECK(f.id == kShuffleFilter || f.id == kLz4Filter || f.id == kZstdFilter || f.id == kDeflateFilter,
             "filter ", describe_filter(f), " of pipeline ", describe_pipeline(pipeline),
             " is not one layertap reads (shuffle, then lz4, zstd or deflate)");
    if (f.id == kShuffleFilter)
      LT_CHECK(f.cd_values.empty() || f.cd_values[0] == element_size, "the shuffle filter declares elements of ",
               f.cd_values[0], " bytes, the dataset's are ", element_size);
    else
      ++codecs;
  }
  LT_CHECK(codecs <= 1, "pipeline ", describe_pipeline(pipeline), " has more than one codec");
  // Filters decode in reverse order. `cur` is what the next one reads: the stored bytes, then
  // `out` or `scratch` (the two alternate).
  const std::byte* cur = data;
  std::size_t cur_size = size;
  std::vector<std::byte>* bufs[2] = {&out, &scratch};
  int next = 0;
  for (std::size_t k = pipeline.size(); k-- > 0;) {
    if (k < 32 && (skipped >> k) & 1u) continue;
    const ChunkFilter& f = pipeline[k];
    std::vector<std::byte>& dst = *bufs[next];
    if (f.id == kShuffleFilter) {
      LT_CHECK(cur_size == expected, "the shuffled chunk holds ", cur_size, " bytes, the chunk ", expected);
      dst.resize(cur_size);
      if (element_size > 1) byte_unshuffle(cur, dst.data(), cur_size, element_size);
      else if (cur_size > 0) std::memcpy(dst.data(), cur, cur_size);
    } else if (f.id == kLz4Filter) {
      lz4_decode(cur, cur_size, expected, dst);
    } else if (f.id == kZstdFilter) {
      zstd_decode(cur, cur_size, expected, dst);
    } else {
      gzip_decode(cur, cur_size, expected, dst);
    }
    cur = dst.data();
    cur_size = dst.size();
    next ^= 1;
  }
  LT_CHECK(cur_size == expected, "the chunk holds ", cur_size, " bytes after its filters, the layout gives ", expected,
           cur_size < expected ? " (short)" : " (long)");
  if (cur == data) {
    out.assign(data, data + size);
  } else if (cur != out.data()) {
    out.swap(scratch);
  }
}

void decode_chunk(const Compression& c, std::size_t element_size, const std::byte* data, std::size_t size,
                  std::size_t n, std::vector<std::byte>& out) {
  std::vector<std::byte> scratch;
  try {
    decode_stored_chunk(expected_pipeline(c, element_size), 0, element_size, data, size, n, out, scratch);
  } catch (const Error& e) {
    LT_FAIL(compression_name(c), ": chunk of ", size, " bytes does not decode to ", n, " bytes: ", e.what());
  }
}

}  // namespace layertap::io
