#include "model/stored_window.hpp"

#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"

namespace layertap {

namespace {

std::atomic<std::uint64_t> g_read_calls{0};

// Rows per preadv call of a column window: one iovec for the row's window, one for the gap after it.
constexpr int64_t kRowsPerCall = IOV_MAX / 2;

[[noreturn]] void read_failed(const TensorInfo& t, std::uint64_t at, ssize_t n) {
  LT_CHECK(n == 0, "cannot read weights file '", t.file, "' (tensor '", t.name, "'): ", std::strerror(errno));
  LT_FAIL("weights file '", t.file, "' ends at byte ", at, ", inside tensor '", t.name,
          "' (the file was truncated after its header was read)");
}

// Fills `iov[0, count)` from the file at `offset`, however the kernel splits the transfer.
void preadv_all(const TensorInfo& t, iovec* iov, int count, std::uint64_t offset) {
  while (count > 0) {
    const ssize_t n = ::preadv(t.fd, iov, count, off_t(offset));
    g_read_calls.fetch_add(1, std::memory_order_relaxed);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) read_failed(t, offset, n);
    offset += std::uint64_t(n);
    std::size_t left = std::size_t(n);
    while (count > 0 && left >= iov->iov_len) {
      left -= iov->iov_len;
      ++iov;
      --count;
    }
    if (count > 0 && left > 0) {  // part of iov[0] arrived
      iov->iov_base = static_cast<std::byte*>(iov->iov_base) + left;
      iov->iov_len -= left;
    }
  }
}

}  // namespace

float stored_value(DType d, const std::byte* p, std::size_t i) {
  switch (d) {
    case DType::F32: {
      float f;
      std::memcpy(&f, p + 4 * i, 4);
      return f;
    }
    case DType::BF16: {
      std::uint16_t b;
      std::memcpy(&b, p + 2 * i, 2);
      return bf16_to_float(b);
    }
    case DType::F16: {
      std::uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return fp16_to_float(h);
    }
    case DType::F8_E4M3: return fp8_e4m3fn_to_float(std::uint8_t(p[i]));
    default: LT_FAIL("dtype ", dtype_name(d), " holds no float values");
  }
}

StoredWindow float_window(const TensorInfo& t, int64_t row0, int64_t rows, int64_t col0, int64_t cols) {
  const int64_t esize = int64_t(dtype_size(t.dtype));
  const int64_t width = t.shape.size() == 1 ? t.shape[0] : t.shape.size() == 2 ? t.shape[1] : -1;
  const int64_t height = t.shape.size() == 1 ? 1 : t.shape.size() == 2 ? t.shape[0] : -1;
  LT_CHECK(width >= 0, "tensor '", t.name, "' in '", t.file, "' has shape ", shape_str(t.shape),
           ", a weight window needs 1 or 2 dimensions");
  LT_CHECK(row0 >= 0 && rows >= 0 && row0 + rows <= height && col0 >= 0 && cols >= 0 && col0 + cols <= width,
           "tensor '", t.name, "': window rows [", row0, ", +", rows, ") x columns [", col0, ", +", cols,
           ") is outside ", shape_str(t.shape));
  return {&t, width * esize, row0, rows, col0 * esize, cols * esize};
}

void read_window_rows(const StoredWindow& w, int64_t r0, int64_t rows, std::byte* out) {
  const TensorInfo& t = *w.tensor;
  LT_CHECK(t.fd >= 0, "tensor '", t.name, "': its checkpoint file '", t.file, "' is not open");
  std::uint64_t at = t.offset + std::uint64_t((w.row0 + r0) * w.row_bytes + w.byte0);
  if (rows <= 0 || w.width == 0) return;
  if (rows == 1 || w.width == w.row_bytes) {
    iovec v{out, std::size_t(rows * w.width)};
    preadv_all(t, &v, 1, at);
    return;
  }
  // The span of whole rows: each row's window into `out`, the bytes up to the next row's window
  // (the other ranks' columns) into one scratch buffer that every gap of a call reuses.
  thread_local std::vector<std::byte> gap;
  gap.resize(std::size_t(w.row_bytes - w.width));
  std::vector<iovec> iov;
  for (int64_t r = 0; r < rows; r += kRowsPerCall) {
    const int64_t n = std::min(kRowsPerCall, rows - r);
    iov.clear();
    for (int64_t i = 0; i < n; ++i) {
      iov.push_back({out + (r + i) * w.width, std::size_t(w.width)});
      if (i + 1 < n) iov.push_back({gap.data(), gap.size()});
    }
    preadv_all(t, iov.data(), int(iov.size()), at);
    at += std::uint64_t(n * w.row_bytes);
  }
}

std::vector<float> read_floats(const StoredWindow& w) {
  const int64_t esize = int64_t(dtype_size(w.tensor->dtype)), cols = w.width / esize;
  std::vector<float> out(std::size_t(w.rows * cols));
  // Blocks of about 16 MiB as stored: the raw bytes never take more than that beside the result.
  const int64_t per = std::max<int64_t>(1, (int64_t(16) << 20) / std::max<int64_t>(1, w.width));
  std::vector<std::byte> raw;
  for (int64_t r = 0; r < w.rows; r += per) {
    const int64_t n = std::min(per, w.rows - r);
    raw.resize(std::size_t(n * w.width));
    read_window_rows(w, r, n, raw.data());
    check_window_values(w, r, raw.data(), std::size_t(n * cols), ValueRule::Finite);
    to_float(w.tensor->dtype, raw.data(), out.data() + r * cols, std::size_t(n * cols));
  }
  return out;
}

StoredWindow transposed_expert_window(const TensorInfo& t, int64_t expert, int64_t out_full, int64_t in_full,
                                      int64_t row0, int64_t rows, int64_t col0, int64_t cols) {
  LT_CHECK(t.shape.size() == 3 && t.shape[0] > expert && t.shape[1] == in_full && t.shape[2] == out_full,
           "tensor '", t.name, "' in '", t.file, "' has shape ", shape_str(t.shape), ", expert ", expert,
           "'s stacked weight needs [E > ", expert, ", ", in_full, ", ", out_full, "]");
  LT_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16, "tensor '", t.name, "' in '",
           t.file, "' has dtype ", dtype_name(t.dtype), ", expected float32, float16 or bfloat16");
  const int64_t esize = int64_t(dtype_size(t.dtype));
  return {&t, out_full * esize, expert * in_full + col0, cols, row0 * esize, rows * esize};
}

std::uint64_t window_read_calls() { return g_read_calls.load(); }

// Value `i` of rows [r0, ...) of `w` is `v`, which breaks `rule`: says which and where.
[[noreturn]] static void refuse_window_value(const StoredWindow& w, int64_t r0, std::size_t i, float v, ValueRule rule) {
  const TensorInfo& t = *w.tensor;
  const int64_t esize = int64_t(dtype_size(t.dtype)), cols = w.width / esize;
  const int64_t row = w.row0 + r0 + int64_t(i) / cols, col = w.byte0 / esize + int64_t(i) % cols;
  const std::string at = t.shape.size() == 2 ? cat("[", row, ", ", col, "]")
                         : t.shape.size() == 1 ? cat("[", col, "]")
                                               : cat("flat index ", col);
  if (rule == ValueRule::PositiveScale)
    LT_FAIL("tensor '", t.name, "' in '", t.file, "' holds the scale ", v, " at ", at,
            ": quantization scales must be finite and positive (a damaged or incomplete download?)");
  LT_FAIL("tensor '", t.name, "' in '", t.file, "' holds ", v, " at ", at,
          std::isfinite(v) ? ", beyond bfloat16's range: weights must stay finite in bfloat16 (|w| < 3.3961e38)"
                           : ": weights must be finite (a damaged or incomplete download?)");
}

void check_window_values(const StoredWindow& w, int64_t r0, const std::byte* p, std::size_t n, ValueRule rule) {
  if (rule == ValueRule::None) return;
  const DType d = w.tensor->dtype;
  if (rule == ValueRule::ExponentScale) {
    for (std::size_t i = 0; i < n; ++i)
      if (std::uint8_t(p[i]) == 0xffu) {
        const TensorInfo& t = *w.tensor;
        LT_FAIL("tensor '", t.name, "' in '", t.file, "' holds the e8m0 scale code 255 (NaN) in row ",
                w.row0 + r0 + int64_t(i) / w.width, ", scale ", (w.byte0 + int64_t(i) % w.width),
                " of the row: MXFP4 scales must be finite (a damaged download?)");
      }
    return;
  }
  // The common cases first, one compare per value; the slow loop below finds the culprit.
  if (rule == ValueRule::Finite) {
    bool ok = true;
    if (d == DType::BF16) {
      for (std::size_t i = 0; i < n; ++i) {
        std::uint16_t b;
        std::memcpy(&b, p + 2 * i, 2);
        ok &= (b & 0x7f80u) != 0x7f80u;
      }
    } else if (d == DType::F8_E4M3) {
      for (std::size_t i = 0; i < n; ++i) ok &= (std::uint8_t(p[i]) & 0x7fu) != 0x7fu;
    } else if (d == DType::F32) {
      for (std::size_t i = 0; i < n; ++i) {
        std::uint32_t b;
        std::memcpy(&b, p + 4 * i, 4);
        ok &= (b & 0x7fffffffu) < 0x7f7f8000u;  // from here up, float_to_bf16 (nearest even) gives infinity
      }
    } else {
      ok = false;
    }
    if (ok) return;
  }
  for (std::size_t i = 0; i < n; ++i) {
    const float v = stored_value(d, p, i);
    const bool bad = rule == ValueRule::PositiveScale
                         ? !std::isfinite(v) || !(v > 0.0f)
                         : !std::isfinite(bf16_to_float(float_to_bf16(v))) || !std::isfinite(v);
    if (bad) refuse_window_value(w, r0, i, v, rule);
  }
}

}  // namespace layertap
