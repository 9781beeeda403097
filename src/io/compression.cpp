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

// Returns false on malformed input. `expected` is the decoded size when known, else 0.
bool lz4_decode(const std::byte* in, std::size_t size, std::size_t expected, std::vector<std::byte>& out) {
  if (size < 12) return false;
  const uint64_t total = get_be64(in);
  uint64_t block = get_be32(in + 8);
  if (total > kMaxDecoded || (expected != 0 && total != expected) || (total > 0 && block == 0)) return false;
  block = std::min<uint64_t>(block, total);
  out.resize(std::size_t(total));
  std::size_t pos = 12, done = 0;
  while (done < total) {
    const std::size_t this_block = std::size_t(std::min<uint64_t>(block, total - done));
    if (size - pos < 4) return false;
    const std::size_t stored = get_be32(in + pos);
    pos += 4;
    if (stored > size - pos) return false;
    if (stored == this_block) {
      std::memcpy(out.data() + done, in + pos, stored);
    } else {
      const int got = LZ4_decompress_safe(reinterpret_cast<const char*>(in + pos),
                                          reinterpret_cast<char*>(out.data() + done), int(stored), int(this_block));
      if (got < 0 || std::size_t(got) != this_block) return false;
    }
    pos += stored;
    done += this_block;
  }
  return true;
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

bool zstd_decode(const std::byte* in, std::size_t size, std::size_t expected, std::vector<std::byte>& out) {
  // One frame that fills the buffer and declares its size (as ZSTD_compress writes it).
  const std::size_t frame = ZSTD_findFrameCompressedSize(in, size);
  if (ZSTD_isError(frame) || frame != size) return false;
  const unsigned long long total = ZSTD_getFrameContentSize(in, size);
  if (total == ZSTD_CONTENTSIZE_ERROR || total == ZSTD_CONTENTSIZE_UNKNOWN || total > kMaxDecoded ||
      (expected != 0 && total != expected))
    return false;
  out.resize(std::size_t(total));
  const std::size_t got = ZSTD_decompress(out.data(), out.size(), in, size);
  return !ZSTD_isError(got) && got == total;
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

bool gzip_decode(const std::byte* in, std::size_t size, std::size_t expected, std::vector<std::byte>& out) {
  out.resize(expected);
  uLongf got = uLongf(expected);
  const int rc = uncompress(reinterpret_cast<Bytef*>(out.data()), &got, reinterpret_cast<const Bytef*>(in), uLong(size));
  return rc == Z_OK && got == expected;
}

// --- HDF5 filter callbacks (H5Z_func_t): return the new size, or 0 on failure -------------------------

template <bool (*Decode)(const std::byte*, std::size_t, std::size_t, std::vector<std::byte>&),
          typename Encode>
std::size_t run_filter(unsigned flags, std::size_t nbytes, std::size_t* buf_size, void** buf, Encode encode) noexcept {
  try {
    std::vector<std::byte> out;
    const auto* in = static_cast<const std::byte*>(*buf);
    if (flags & H5Z_FLAG_REVERSE) {
      if (!Decode(in, nbytes, 0, out)) return 0;
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
  return run_filter<lz4_decode>(flags, nbytes, buf_size, buf, [](const std::byte* in, std::size_t n, auto& out) {
    lz4_encode(in, n, out);
  });
}

std::size_t zstd_filter(unsigned flags, std::size_t cd_nelmts, const unsigned cd_values[], std::size_t nbytes,
                        std::size_t* buf_size, void** buf) {
  int level = cd_nelmts > 0 ? int(cd_values[0]) : 1;
  level = std::clamp(level, ZSTD_minCLevel(), ZSTD_maxCLevel());
  return run_filter<zstd_decode>(flags, nbytes, buf_size, buf, [level](const std::byte* in, std::size_t n, auto& out) {
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
  std::memcpy(out + count * s, in + count * s, n - count * s);
}

void byte_unshuffle(const std::byte* in, std::byte* out, std::size_t n, std::size_t s) {
  const std::size_t count = n / s;
  for (std::size_t j = 0; j < s; ++j)
    for (std::size_t i = 0; i < count; ++i) out[i * s + j] = in[j * count + i];
  std::memcpy(out + count * s, in + count * s, n - count * s);
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

void decode_chunk(const Compression& c, std::size_t element_size, const std::byte* data, std::size_t size,
                  std::size_t n, std::vector<std::byte>& out) {
  std::vector<std::byte> decoded;
  bool ok = true;
  switch (c.codec) {
    case Codec::Lz4: ok = lz4_decode(data, size, n, decoded); break;
    case Codec::Zstd: ok = zstd_decode(data, size, n, decoded); break;
    case Codec::Gzip: ok = gzip_decode(data, size, n, decoded); break;
    case Codec::None:
      ok = size == n;
      if (ok) decoded.assign(data, data + size);
      break;
  }
  LT_CHECK(ok, compression_name(c), ": chunk of ", size, " bytes does not decode to ", n, " bytes");
  if (element_size > 1) {
    out.resize(n);
    byte_unshuffle(decoded.data(), out.data(), n, element_size);
  } else {
    out = std::move(decoded);
  }
}

}  // namespace layertap::io
