// Quantized Linear weights as the checkpoint stores them, for a backend that keeps them packed
// (the CUDA backend, which expands them to bf16 one layer, or group of experts, at a time: docs/GPU.md, "What runs
// where"). The formats and the rules for which module is packed are LinearReader's
// (src/model/linear_reader.hpp); this reads the bytes of a tensor-parallel window instead of
// decoding it, so the bytes decode to exactly the values LinearReader::read gives.
#pragma once
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "model/quant_config.hpp"
#include "model/quant_formats.hpp"
#include "model/safetensors.hpp"
#include "model/stored_window.hpp"

namespace layertap {

struct PackedLinear {
  enum class Format { Fp8Block, Int4Group, Mxfp4 };
  Format format = Format::Fp8Block;
  int64_t rows = 0, cols = 0;  // the window's shape
  // Fp8Block: data = float8_e4m3fn codes [rows, cols]; scales = float32 [scale_rows, scale_cols],
  // the part of weight_scale_inv that covers the window; the window starts row_phase rows and
  // col_phase columns into its first block.
  int64_t block_rows = 0, block_cols = 0, row_phase = 0, col_phase = 0;
  // Int4Group: data = int32 words [rows, ceil(cols / 8)]; scales = scale_dtype [rows, ceil(cols / group)].
  // The window starts on a group boundary.
  // Mxfp4 (GPT-OSS's stacked experts): data = e2m1 codes, two per byte, low nibble first [rows,
  // cols / 2] (the bytes of Int4Group's words); scales = e8m0 exponents, uint8 [rows, cols / 32];
  // group 32. The window starts on a group boundary.
  int64_t group = 0;
  DType scale_dtype = DType::F32;
  int64_t scale_rows = 0, scale_cols = 0;
  std::vector<std::byte> data, scales;
};

// Where a packed window's bytes are in the checkpoint: the fields of PackedLinear (data and scales
// left empty) and the two stored windows they are read from.
struct PackedLayout {
  PackedLinear shape;
  StoredWindow data, scales;
};

// Throws naming the tensor when module's tensors mix stored forms: a plain weight with an FP8
// weight_scale_inv or INT4 weight_scale/weight_packed beside it, an FP8 weight with INT4 companions,
// an INT4 module that also holds a .weight or weight_scale_inv.
void check_stored_form(const Checkpoint& ckpt, const QuantConfig& quant, const std::string& module);

// How `module` (full tensor-name prefix) is stored: nullopt for plain float weights. Checks the
// stored form first (check_stored_form). expert >= 0: `module` stacks every expert (GPT-OSS), which
// layertap reads only in MXFP4 (`module`_blocks, `module`_scales): anything else is refused.
std::optional<PackedLinear::Format> packed_format(const Checkpoint& ckpt, const QuantConfig& quant,
                                                  const std::string& module, int64_t expert = -1);

// Window `win` of module's [out, in] weight (expert >= 0: of expert `expert`'s), as stored. Throws
// naming the tensor when the module is plain, when its tensors do not have the shapes [out, in]
// implies, when an INT4 weight_shape records another shape, or (INT4, MXFP4) when the window does
// not start on a group boundary that is also a word boundary. packed_layout reads nothing but
// weight_shape's 2 values.
PackedLayout packed_layout(const Checkpoint& ckpt, const QuantConfig& quant, const std::string& module, int64_t out,
                           int64_t in, const quant::Window& win, int64_t expert = -1);
// The rule a format's scales meet: finite and positive, or (MXFP4) any e8m0 code but NaN.
ValueRule packed_scale_rule(PackedLinear::Format f);
// The window's bytes, FP8 codes checked finite and scales by packed_scale_rule.
PackedLinear read_packed_linear(const Checkpoint& ckpt, const QuantConfig& quant, const std::string& module,
                                int64_t out, int64_t in, const quant::Window& win, int64_t expert = -1);

// Throws naming the tensor when module's INT4 `weight_shape` (if present) does not record [out, in].
void check_int4_weight_shape(const Checkpoint& ckpt, const std::string& module, int64_t out, int64_t in);

}  // namespace layertap
