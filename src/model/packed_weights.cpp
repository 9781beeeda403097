#include "model/packed_weights.hpp"

#include <cstring>

#include "core/error.hpp"

namespace layertap {

namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

void check_shape(const TensorInfo& t, DType dtype, const std::vector<int64_t>& shape, const std::string& why) {
  LT_CHECK(t.dtype == dtype, "tensor '", t.name, "' in '", t.file, "' has dtype ", dtype_name(t.dtype), ", ", why,
           " needs ", dtype_name(dtype));
  LT_CHECK(t.shape == shape, "tensor '", t.name, "' in '", t.file, "' has shape ", shape_str(t.shape), ", ", why,
           " needs ", shape_str(shape));
}

void check_window(const quant::Window& w, int64_t out, int64_t in, const std::string& module) {
  LT_CHECK(w.row0 >= 0 && w.col0 >= 0 && w.rows >= 0 && w.cols >= 0 && w.row0 + w.rows <= out &&
               w.col0 + w.cols <= in,
           "packed window rows [", w.row0, ", +", w.rows, ") x columns [", w.col0, ", +", w.cols, ") is outside ",
           module, " [", out, ", ", in, "]");
}

// Rows [r0, r0 + rows) x bytes [b0, b0 + width) of a row-major matrix of `row_bytes`-byte rows.
std::vector<std::byte> copy_window(const std::byte* base, int64_t row_bytes, int64_t r0, int64_t rows, int64_t b0,
                                   int64_t width) {
  std::vector<std::byte> out(std::size_t(rows * width));
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data() + r * width, base + (r0 + r) * row_bytes + b0, std::size_t(width));
  return out;
}

}  // namespace

std::optional<PackedLinear::Format> packed_format(const Checkpoint& ckpt, const QuantConfig& quant,
                                                  const std::string& module) {
  if (quant.int4_packed(module)) return PackedLinear::Format::Int4Group;
  const std::string name = module + ".weight";
  if (quant.method == QuantConfig::Method::Fp8Block && ckpt.has(name) && ckpt.info(name).dtype == DType::F8_E4M3)
    return PackedLinear::Format::Fp8Block;
  return std::nullopt;
}

int64_t packed_linear_bytes(PackedLinear::Format format, const QuantConfig& q, DType scale_dtype,
                            const quant::Window& w) {
  if (format == PackedLinear::Format::Fp8Block) {
    const int64_t rp = w.row0 % q.block_rows, cp = w.col0 % q.block_cols;
    return w.rows * w.cols + 4 * ceil_div(rp + w.rows, q.block_rows) * ceil_div(cp + w.cols, q.block_cols);
  }
  return w.rows * ceil_div(w.cols, 8) * 4 + w.rows * ceil_div(w.cols, q.group_size) * int64_t(dtype_size(scale_dtype));
}

PackedLinear read_packed_linear(const Checkpoint& ckpt, const QuantConfig& q, const std::string& module, int64_t out,
                                int64_t in, const quant::Window& win) {
  const std::optional<PackedLinear::Format> format = packed_format(ckpt, q, module);
  LT_CHECK(format.has_value(), "module '", module, "' is not stored packed (FP8 blocks or INT4 groups)");
  check_window(win, out, in, module);
  PackedLinear p;
  p.format = *format;
  p.rows = win.rows;
  p.cols = win.cols;
  if (p.format == PackedLinear::Format::Fp8Block) {
    const int64_t br = q.block_rows, bc = q.block_cols;
    const TensorInfo& w = ckpt.info(module + ".weight");
    check_shape(w, DType::F8_E4M3, {out, in}, "the config");
    const TensorInfo& s = ckpt.info(module + ".weight_scale_inv");
    const int64_t grid_cols = ceil_div(in, bc);
    check_shape(s, DType::F32, {ceil_div(out, br), grid_cols}, cat("fp8 blocks of [", br, ", ", bc, "]"));
    p.block_rows = br;
    p.block_cols = bc;
    p.row_phase = win.row0 % br;
    p.col_phase = win.col0 % bc;
    p.scale_rows = ceil_div(p.row_phase + win.rows, br);
    p.scale_cols = ceil_div(p.col_phase + win.cols, bc);
    p.scale_dtype = DType::F32;
    p.data = copy_window(w.data, in, win.row0, win.rows, win.col0, win.cols);
    p.scales = copy_window(s.data, grid_cols * 4, win.row0 / br, p.scale_rows, (win.col0 / bc) * 4, p.scale_cols * 4);
    return p;
  }
  const int64_t g = q.group_size;
  LT_CHECK(win.col0 % g == 0 && win.col0 % 8 == 0, "module '", module, "': a packed INT4 window must start on a group ",
           "and word boundary, not at column ", win.col0, " (groups of ", g, ")");
  const TensorInfo& packed = ckpt.info(module + ".weight_packed");
  const int64_t words = ceil_div(in, 8);
  check_shape(packed, DType::I32, {out, words}, cat("int4 packing of [", out, ", ", in, "]"));
  const TensorInfo& scale = ckpt.info(module + ".weight_scale");
  const int64_t groups = ceil_div(in, g);
  LT_CHECK(scale.dtype == DType::BF16 || scale.dtype == DType::F16 || scale.dtype == DType::F32, "tensor '",
           scale.name, "' has dtype ", dtype_name(scale.dtype), ", int4 scales must be bfloat16, float16 or float32");
  check_shape(scale, scale.dtype, {out, groups}, cat("int4 groups of ", g, " over [", out, ", ", in, "]"));
  const int64_t ssize = int64_t(dtype_size(scale.dtype));
  p.group = g;
  p.scale_dtype = scale.dtype;
  p.scale_rows = win.rows;
  p.scale_cols = ceil_div(win.cols, g);
  // A window that ends inside the last word (cols % 8 != 0 at the matrix's end) takes that word whole.
  p.data = copy_window(packed.data, words * 4, win.row0, win.rows, (win.col0 / 8) * 4, ceil_div(win.cols, 8) * 4);
  p.scales = copy_window(scale.data, groups * ssize, win.row0, win.rows, (win.col0 / g) * ssize, p.scale_cols * ssize);
  return p;
}

}  // namespace layertap
