// A window of a tensor as the checkpoint stores it: where its bytes lie in the file, reading them,
// and the one rule their values must meet. Both backends and the pre-read of
// `extract --dry-run --read-weights` read weights only through here, so they read the same bytes
// and refuse the same values.
//
// Reads are pread calls on the checkpoint's descriptors (nothing is mapped: a file truncated while
// it is read gives an error naming it, not SIGBUS). A column window (the rank's columns of a
// row-parallel o_proj/down_proj) is read as the span of whole rows it lies in, up to 512 rows per
// preadv call, the other ranks' columns landing in a scratch buffer: one call per block of rows,
// not one per row (the node's ranks share the page cache, so the span costs no extra disk reads).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "model/safetensors.hpp"

namespace layertap {

// Rows [row0, row0 + rows) x bytes [byte0, byte0 + width) of a stored tensor viewed as a byte
// matrix with rows of `row_bytes` bytes (a 1-D tensor is one row).
struct StoredWindow {
  const TensorInfo* tensor = nullptr;
  int64_t row_bytes = 0, row0 = 0, rows = 0, byte0 = 0, width = 0;
  int64_t bytes() const { return rows * width; }
  bool contiguous() const { return rows <= 1 || width == row_bytes; }  // one run of bytes in the file
};

// Rows [row0, +rows) x columns [col0, +cols) of a float tensor of shape [out, in] (1-D: [1, in]).
StoredWindow float_window(const TensorInfo& t, int64_t row0, int64_t rows, int64_t col0, int64_t cols);

// Window `win` ([out, in] coordinates) of expert `expert`'s matrix in `t`, a float tensor stacking
// every expert's weight as x @ W ([E, in_full, out_full], Llama-4): the stored rows are the window's
// columns (inputs), the stored columns its rows. Throws naming the tensor when its shape or dtype
// does not fit. Both backends read Llama-4's experts through it (the CPU transposes after reading,
// the CUDA loader on the way).
StoredWindow transposed_expert_window(const TensorInfo& t, int64_t expert, int64_t out_full, int64_t in_full,
                                      int64_t row0, int64_t rows, int64_t col0, int64_t cols);

// Rows [r0, r0 + rows) of window `w` into `out` (rows x w.width bytes). Throws naming the file and
// tensor on a read error or when the file ends early.
void read_window_rows(const StoredWindow& w, int64_t r0, int64_t rows, std::byte* out);

// Value `i` of stored values of dtype `d` at `p` (float32, float16, bfloat16, float8_e4m3fn).
float stored_value(DType d, const std::byte* p, std::size_t i);

// The whole window of a float tensor (float32, float16, bfloat16) as float32 [rows, width / dtype
// size], each value checked with ValueRule::Finite. Reads blocks of about 16 MiB.
std::vector<float> read_floats(const StoredWindow& w);

// pread/preadv calls this process has made for read_window_rows (all threads).
std::uint64_t window_read_calls();

// What a stored value must be, the same for both backends and the pre-read. A hole left by an
// incomplete download reads as zeros, so a zero scale is refused; a zero weight is legal. A float32
// weight must also stay finite when rounded to bfloat16 (|w| < 3.3961e38), as the CUDA backend
// stores it, so that a checkpoint one backend takes the other takes too.
enum class ValueRule : std::uint8_t {
  Finite,         // float weights, norms, biases (float32, float16, bfloat16); FP8 codes (0x7f/0xff are NaN)
  PositiveScale,  // FP8 weight_scale_inv, INT4 weight_scale: finite and > 0
  None,           // INT4 words, MXFP4 codes: every bit pattern decodes
  ExponentScale,  // MXFP4 e8m0 scales (uint8): every code but 0xff, e8m0's NaN
};

// The rule for `w.tensor`'s dtype: checks the `n` values at `p`, which are rows [r0, ...) of window
// `w`. Throws naming the tensor, the file and the [row, column] of the first value that breaks it.
void check_window_values(const StoredWindow& w, int64_t r0, const std::byte* p, std::size_t n, ValueRule rule);

}  // namespace layertap
