#include "model/linear_reader.hpp"

#include <cstring>

#include "core/error.hpp"
#include "model/packed_weights.hpp"
#include "model/stored_window.hpp"

namespace layertap {

namespace {
int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check_tensor(const TensorInfo& t, const std::vector<DType>& dtypes, const std::vector<int64_t>& shape,
                  const char* why) {
  bool dtype_ok = false;
  std::string names;
  for (DType d : dtypes) {
    dtype_ok |= t.dtype == d;
    names += cat(names.empty() ? "" : " or ", dtype_name(d));
  }
  LT_CHECK(dtype_ok, "tensor '", t.name, "' in '", t.file, "' has dtype ", dtype_name(t.dtype), ", ", why, " needs ",
           names);
  LT_CHECK(t.shape == shape, "tensor '", t.name, "' in '", t.file, "' has shape ", shape_str(t.shape), ", ", why,
           " needs ", shape_str(shape));
}

// Rows [row0, row0 + rows) of the 2-D tensor `t`, whole, as stored; within them, the bytes
// [byte0, byte0 + width) of rows [check0, check0 + checks) are the rank's window and are checked
// with `rule` (as the CUDA loader checks the same window). The decoders index whole rows.
std::vector<std::byte> read_whole_rows(const TensorInfo& t, int64_t row0, int64_t rows, int64_t check0, int64_t checks,
                                       int64_t byte0, int64_t width, ValueRule rule) {
  const int64_t row_bytes = t.shape[1] * int64_t(dtype_size(t.dtype));
  std::vector<std::byte> out(std::size_t(rows * row_bytes));
  read_window_rows({&t, row_bytes, row0, rows, 0, row_bytes}, 0, rows, out.data());
  const StoredWindow mine{&t, row_bytes, row0 + check0, checks, byte0, width};
  for (int64_t r = 0; r < checks; ++r)
    check_window_values(mine, r, out.data() + (check0 + r) * row_bytes + byte0,
                        std::size_t(width) / dtype_size(t.dtype), rule);
  return out;
}
}  // namespace

std::vector<float> LinearReader::read(const std::string& module, int64_t out, int64_t in, const quant::Window& win,
                                      int64_t expert) const {
  if (expert >= 0) return read_mxfp4(module, expert, out, in, win);
  check_stored_form(ck_, quant_, module);
  if (quant_.int4_packed(module)) return read_int4(module, out, in, win);
  const std::string name = module + ".weight";
  if (ck_.has(name) && ck_.info(name).dtype == DType::F8_E4M3) return read_fp8(module, out, in, win);
  return ck_.read_window(name, {out, in}, win.row0, win.rows, win.col0, win.cols);
}

std::vector<float> LinearReader::read_fp8(const std::string& module, int64_t out, int64_t in,
                                          const quant::Window& win) const {
  const TensorInfo& w = ck_.info(module + ".weight");
  LT_CHECK(quant_.method == QuantConfig::Method::Fp8Block, "tensor '", w.name, "' in '", w.file,
           "' is float8_e4m3fn but the config has no fp8 quantization_config with weight_block_size (it has: ",
           quant_.describe(), ")");
  const int64_t br = quant_.block_rows, bc = quant_.block_cols;
  check_tensor(w, {DType::F8_E4M3}, {out, in}, "the config");
  const TensorInfo& s = ck_.info(module + ".weight_scale_inv");
  check_tensor(s, {DType::F32}, {ceil_div(out, br), ceil_div(in, bc)},
               cat("fp8 blocks of [", br, ", ", bc, "] over [", out, ", ", in, "]").c_str());
  // Rows from the window's first block row: the decoder finds a row's scales by row / block_rows.
  const int64_t first = win.row0 - win.row0 % br, end = win.row0 + win.rows;
  const int64_t scale0 = win.col0 / bc;
  const std::vector<std::byte> codes =
      read_whole_rows(w, first, end - first, win.row0 - first, win.rows, win.col0, win.cols, ValueRule::Finite);
  const std::vector<std::byte> scales =
      read_whole_rows(s, first / br, ceil_div(end, br) - first / br, 0, ceil_div(end, br) - first / br, scale0 * 4,
                      (ceil_div(win.col0 + win.cols, bc) - scale0) * 4, ValueRule::PositiveScale);
  std::vector<float> dst(std::size_t(win.rows) * std::size_t(win.cols));
  quant::dequantize_fp8_block(codes.data(), scales.data(), end - first, in, br, bc,
                              {win.row0 - first, win.rows, win.col0, win.cols}, dst.data());
  return dst;
}

std::vector<float> LinearReader::read_int4(const std::string& module, int64_t out, int64_t in,
                                           const quant::Window& win) const {
  const int64_t g = quant_.group_size;
  const TensorInfo& packed = ck_.info(module + ".weight_packed");
  check_tensor(packed, {DType::I32}, {out, ceil_div(in, 8)}, cat("int4 packing of [", out, ", ", in, "]").c_str());
  const TensorInfo& scale = ck_.info(module + ".weight_scale");
  check_tensor(scale, {DType::BF16, DType::F16, DType::F32}, {out, ceil_div(in, g)},
               cat("int4 groups of ", g, " over [", out, ", ", in, "]").c_str());
  check_int4_weight_shape(ck_, module, out, in);
  const int64_t group0 = win.col0 / g, groups = ceil_div(win.col0 + win.cols, g) - group0;
  const std::vector<std::byte> words =
      read_whole_rows(packed, win.row0, win.rows, 0, 0, 0, 0, ValueRule::None);
  const std::vector<std::byte> scales =
      read_whole_rows(scale, win.row0, win.rows, 0, win.rows, group0 * int64_t(dtype_size(scale.dtype)),
                      groups * int64_t(dtype_size(scale.dtype)), ValueRule::PositiveScale);
  std::vector<float> dst(std::size_t(win.rows) * std::size_t(win.cols));
  quant::dequantize_int4_group(words.data(), scales.data(), scale.dtype, win.rows, in, g, {0, win.rows, win.col0, win.cols},
                               dst.data());
  return dst;
}

std::vector<float> LinearReader::read(const LinearSlice& s) const {
  return s.transposed ? read_transposed(s) : read(s.module, s.out_full, s.in_full, s.win, s.expert);
}

std::vector<float> LinearReader::read_transposed(const LinearSlice& s) const {
  const int64_t rows = s.win.rows, cols = s.win.cols;
  const std::vector<float> stored = read_floats(transposed_expert_window(  // [cols, rows]
      ck_.info(s.module), s.expert, s.out_full, s.in_full, s.win.row0, rows, s.win.col0, cols));
  std::vector<float> dst(std::size_t(rows * cols));  // [rows, cols]
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) dst[std::size_t(r * cols + c)] = stored[std::size_t(c * rows + r)];
  return dst;
}

std::vector<float> LinearReader::read_mxfp4(const std::string& module, int64_t expert, int64_t out, int64_t in,
                                            const quant::Window& win) const {
  // The window is itself an MXFP4 matrix [rows, cols] (it starts and ends on groups of 32).
  const PackedLinear p = read_packed_linear(ck_, quant_, module, out, in, win, expert);
  std::vector<float> dst(std::size_t(win.rows) * std::size_t(win.cols));
  quant::dequantize_mxfp4(p.data.data(), p.scales.data(), win.rows, win.cols, {0, win.rows, 0, win.cols}, dst.data());
  return dst;
}

}  // namespace layertap
