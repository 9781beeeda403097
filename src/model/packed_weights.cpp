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

// A stored window's bytes, each value checked with `rule`.
std::vector<std::byte> read_checked(const StoredWindow& w, ValueRule rule) {
  std::vector<std::byte> out(std::size_t(w.bytes()));
  read_window_rows(w, 0, w.rows, out.data());
  check_window_values(w, 0, out.data(), out.size() / dtype_size(w.tensor->dtype), rule);
  return out;
}

}  // namespace

void check_stored_form(const Checkpoint& ckpt, const QuantConfig& quant, const std::string& module) {
  const bool int4 = quant.int4_packed(module);
  const bool fp8 = !int4 && ckpt.has(module + ".weight") && ckpt.info(module + ".weight").dtype == DType::F8_E4M3;
  // The config and the checkpoint disagree on the whole module: say which way.
  LT_CHECK(!int4 || ckpt.has(module + ".weight_packed"), "module '", module,
           "' is int4-quantized by the config's quantization_config (not in its ignore list) but '", module,
           ".weight_packed' is missing from the checkpoint",
           ckpt.has(module + ".weight") ? cat(" (it has a ", dtype_name(ckpt.info(module + ".weight").dtype), " .weight)")
                                        : std::string());
  LT_CHECK(int4 || ckpt.has(module + ".weight") || !ckpt.has(module + ".weight_packed"), "module '", module,
           "' is stored int4-packed (weight_packed) but the config's quantization_config (", quant.describe(),
           ") does not quantize it");
  const char* form = int4 ? "is int4-packed (weight_packed + weight_scale)"
                     : fp8 ? "is float8_e4m3fn (weight + weight_scale_inv)"
                           : "is a plain float weight";
  // The companions each form has, and those it must not have.
  const std::pair<const char*, bool> companions[] = {
      {".weight", !int4}, {".weight_scale_inv", fp8}, {".weight_packed", int4}, {".weight_scale", int4}};
  for (const auto& [suffix, wanted] : companions) {
    if (wanted || !ckpt.has(module + suffix)) continue;
    const TensorInfo& t = ckpt.info(module + suffix);
    LT_FAIL("tensor '", t.name, "' in '", t.file, "' does not belong to module '", module, "', which ", form,
            " by its config (", quant.describe(), ") and checkpoint: a damaged or mixed checkpoint");
  }
}

std::optional<PackedLinear::Format> packed_format(const Checkpoint& ckpt, const QuantConfig& quant,
                                                  const std::string& module, int64_t expert) {
  if (expert >= 0) {
    LT_CHECK(!ckpt.has(module), "tensor '", module, "' holds the experts dequantized (as transformers saves them); ",
             "layertap reads GPT-OSS experts as published, in MXFP4 (", module, "_blocks and ", module, "_scales)");
    LT_CHECK(quant.method == QuantConfig::Method::Mxfp4, "'", module, "_blocks' needs a quantization_config with "
             "quant_method mxfp4 (the config has: ", quant.describe(), ")");
    return PackedLinear::Format::Mxfp4;
  }
  check_stored_form(ckpt, quant, module);
  if (quant.int4_packed(module)) return PackedLinear::Format::Int4Group;
  const std::string name = module + ".weight";
  if (quant.method == QuantConfig::Method::Fp8Block && ckpt.has(name) && ckpt.info(name).dtype == DType::F8_E4M3)
    return PackedLinear::Format::Fp8Block;
  return std::nullopt;
}

void check_int4_weight_shape(const Checkpoint& ckpt, const std::string& module, int64_t out, int64_t in) {
  if (!ckpt.has(module + ".weight_shape")) return;
  const TensorInfo& shape = ckpt.info(module + ".weight_shape");
  LT_CHECK((shape.dtype == DType::I64 || shape.dtype == DType::I32) && shape.shape == std::vector<int64_t>{2},
           "tensor '", shape.name, "' in '", shape.file, "' must be an int64 or int32 vector of 2");
  const int64_t esize = int64_t(dtype_size(shape.dtype));
  std::byte bytes[16];
  read_window_rows({&shape, 2 * esize, 0, 1, 0, 2 * esize}, 0, 1, bytes);
  int64_t recorded[2];
  for (int i = 0; i < 2; ++i) {
    if (shape.dtype == DType::I64) {
      std::memcpy(&recorded[i], bytes + 8 * i, 8);
    } else {
      int32_t v;
      std::memcpy(&v, bytes + 4 * i, 4);
      recorded[i] = v;
    }
  }
  LT_CHECK(recorded[0] == out && recorded[1] == in, "tensor '", shape.name, "' records shape [", recorded[0], ", ",
           recorded[1], "], the config implies [", out, ", ", in, "] (in '", shape.file, "')");
}

namespace {

// Expert `expert`'s window of a stacked MXFP4 module: `module`_blocks uint8 [E, out, in/32, 16] and
// `module`_scales uint8 [E, out, in/32], viewed as rows of in/2 and in/32 bytes (row e * out + r).
PackedLayout mxfp4_layout(const Checkpoint& ckpt, const std::string& module, int64_t out, int64_t in,
                          const quant::Window& win, int64_t expert) {
  LT_CHECK(in % 32 == 0 && win.col0 % 32 == 0 && win.cols % 32 == 0, "module '", module, "': MXFP4 needs whole ",
           "groups of 32 inputs; its width ", in, " or the window [", win.col0, ", +", win.cols, ") cuts one");
  const TensorInfo& blocks = ckpt.info(module + "_blocks");
  const int64_t groups = in / 32;
  LT_CHECK(blocks.shape.size() == 4 && blocks.shape[0] > expert, "tensor '", blocks.name, "' in '", blocks.file,
           "' has shape ", shape_str(blocks.shape), ", expert ", expert, "'s MXFP4 blocks need [E > ", expert, ", ",
           out, ", ", groups, ", 16]");
  const int64_t experts = blocks.shape[0];
  check_shape(blocks, DType::U8, {experts, out, groups, 16}, cat("MXFP4 blocks of [", out, ", ", in, "]"));
  const TensorInfo& scales = ckpt.info(module + "_scales");
  check_shape(scales, DType::U8, {experts, out, groups}, cat("MXFP4 scales of [", out, ", ", in, "]"));
  PackedLayout l;
  PackedLinear& p = l.shape;
  p.format = PackedLinear::Format::Mxfp4;
  p.rows = win.rows;
  p.cols = win.cols;
  p.group = 32;
  p.scale_dtype = DType::U8;
  p.scale_rows = win.rows;
  p.scale_cols = win.cols / 32;
  const int64_t row0 = expert * out + win.row0;
  l.data = {&blocks, in / 2, row0, win.rows, win.col0 / 2, win.cols / 2};
  l.scales = {&scales, groups, row0, win.rows, win.col0 / 32, p.scale_cols};
  return l;
}

}  // namespace

PackedLayout packed_layout(const Checkpoint& ckpt, const QuantConfig& q, const std::string& module, int64_t out,
                           int64_t in, const quant::Window& win, int64_t expert) {
  const std::optional<PackedLinear::Format> format = packed_format(ckpt, q, module, expert);
  LT_CHECK(format.has_value(), "module '", module, "' is not stored packed (FP8 blocks or INT4 groups)");
  check_window(win, out, in, module);
  if (*format == PackedLinear::Format::Mxfp4) return mxfp4_layout(ckpt, module, out, in, win, expert);
  PackedLayout l;
  PackedLinear& p = l.shape;
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
    l.data = {&w, in, win.row0, win.rows, win.col0, win.cols};
    l.scales = {&s, grid_cols * 4, win.row0 / br, p.scale_rows, (win.col0 / bc) * 4, p.scale_cols * 4};
    return l;
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
  check_int4_weight_shape(ckpt, module, out, in);
  const int64_t ssize = int64_t(dtype_size(scale.dtype));
  p.group = g;
  p.scale_dtype = scale.dtype;
  p.scale_rows = win.rows;
  p.scale_cols = ceil_div(win.cols, g);
  // A window that ends inside the last word (cols % 8 != 0 at the matrix's end) takes that word whole.
  l.data = {&packed, words * 4, win.row0, win.rows, (win.col0 / 8) * 4, ceil_div(win.cols, 8) * 4};
  l.scales = {&scale, groups * ssize, win.row0, win.rows, (win.col0 / g) * ssize, p.scale_cols * ssize};
  return l;
}

ValueRule packed_scale_rule(PackedLinear::Format f) {
  return f == PackedLinear::Format::Mxfp4 ? ValueRule::ExponentScale : ValueRule::PositiveScale;
}

PackedLinear read_packed_linear(const Checkpoint& ckpt, const QuantConfig& q, const std::string& module, int64_t out,
                                int64_t in, const quant::Window& win, int64_t expert) {
  const PackedLayout l = packed_layout(ckpt, q, module, out, in, win, expert);
  PackedLinear p = l.shape;
  p.data = read_checked(l.data, p.format == PackedLinear::Format::Fp8Block ? ValueRule::Finite : ValueRule::None);
  p.scales = read_checked(l.scales, packed_scale_rule(p.format));
  return p;
}

}  // namespace layertap
