// Reads the weight of one Linear module as float32, whatever format the checkpoint stores it in:
// plain float (F32/F16/BF16 `X.weight`), DeepSeek FP8 blocks (`X.weight` float8_e4m3fn +
// `X.weight_scale_inv`), compressed-tensors int4 groups (`X.weight_packed`, `X.weight_scale`,
// `X.weight_shape`) or GPT-OSS's stacked MXFP4 experts (`X_blocks`, `X_scales`). The one place where tensor formats are decoded (docs/MODELS.md, "Checkpoint
// formats").
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "model/quant_config.hpp"
#include "model/quant_formats.hpp"
#include "model/rank_layout.hpp"
#include "model/safetensors.hpp"

namespace layertap {

class LinearReader {
 public:
  LinearReader(const Checkpoint& ckpt, const QuantConfig& quant) : ck_(ckpt), quant_(quant) {}
  LinearReader(const Checkpoint&, QuantConfig&&) = delete;  // it keeps a reference

  // Window `win` of module `module`'s weight, whose full shape is [out, in], as float32
  // [win.rows, win.cols]. `module` is the tensor-name prefix, e.g. "model.layers.0.mlp.down_proj".
  // expert >= 0: `module` stacks every expert (GPT-OSS, MXFP4 only: `module`_blocks and
  // `module`_scales) and the window is of expert `expert`'s [out, in].
  std::vector<float> read(const std::string& module, int64_t out, int64_t in, const quant::Window& win,
                          int64_t expert = -1) const;
  // A rank layout's slice: as above, or (Llama-4's stacked experts, stored x @ W as [E, in, out])
  // the window read transposed.
  std::vector<float> read(const LinearSlice& slice) const;

 private:
  std::vector<float> read_fp8(const std::string& module, int64_t out, int64_t in, const quant::Window& win) const;
  std::vector<float> read_int4(const std::string& module, int64_t out, int64_t in, const quant::Window& win) const;
  std::vector<float> read_mxfp4(const std::string& module, int64_t expert, int64_t out, int64_t in,
                                const quant::Window& win) const;
  std::vector<float> read_transposed(const LinearSlice& slice) const;
  const Checkpoint& ck_;
  const QuantConfig& quant_;
};

}  // namespace layertap
