#include "model/linear_reader.hpp"

#include <cstring>

#include "core/error.hpp"
#include "model/packed_weights.hpp"

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
}  // namespace

std::vector<float> LinearReader::read(const std::string& module, int64_t out, int64_t in,
                                      const quant::Window& win) const {
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
  std::vector<float> dst(std::size_t(win.rows) * std::size_t(win.cols));
  quant::dequantize_fp8_block(w.data, s.data, out, in, br, bc, win, dst.data());
  ck_.release(w);
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
  std::vector<float> dst(std::size_t(win.rows) * std::size_t(win.cols));
  quant::dequantize_int4_group(packed.data, scale.data, scale.dtype, out, in, g, win, dst.data());
  ck_.release(packed);
  return dst;
}

}  // namespace layertap
