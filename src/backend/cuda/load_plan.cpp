#include "backend/cuda/load_plan.hpp"

#include <set>

#include "backend/cuda/device_weights.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

namespace layertap::cuda {

namespace {

const TensorInfo& float_tensor(const Checkpoint& ckpt, const Placement& p) {
  const TensorInfo& t = ckpt.info(p.tensor);
  const std::vector<std::int64_t> shape =
      p.vector ? std::vector<std::int64_t>{p.in_full} : std::vector<std::int64_t>{p.out_full, p.in_full};
  LT_CHECK(t.shape == shape, "tensor '", t.name, "' in '", t.file, "' has shape ", shape_str(t.shape),
           ", the config implies ", shape_str(shape));
  LT_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16, "tensor '", t.name, "' in '",
           t.file, "' has dtype ", dtype_name(t.dtype), ", expected a floating-point type (float32, float16, bfloat16)");
  return t;
}

}  // namespace

LoadPlan plan_load(const LocalShape& shape, const Checkpoint& ckpt, const QuantConfig& quant) {
  const DeviceWeights layout = DeviceWeights::layout(shape);
  LoadPlan plan;
  plan.resident_bytes = layout.sizes().resident;
  std::set<std::string> files;
  for (const Placement& p : layout.placements()) {
    WeightCopy c;
    c.dst = p.offset;
    c.dst_bytes = p.bytes;
    std::size_t out_element = 2;  // bytes per element in the block
    switch (p.fill) {
      case Placement::Fill::Bf16:
      case Placement::Fill::RouterHigh:
      case Placement::Fill::RouterLow:
      case Placement::Fill::Float32: {
        if (p.expert >= 0) {  // a stacked expert's weight, stored x @ W: expert p.expert's [in, out]
          LT_CHECK(p.transposed, "load plan: ", p.tensor, " expert ", p.expert, " is stacked but not stored x @ W");
          const TensorInfo& t = ckpt.info(p.tensor);
          c.src = transposed_expert_window(t, p.expert, p.out_full, p.in_full, p.win.row0, p.win.rows, p.win.col0,
                                           p.win.cols);
          c.transpose = true;
          c.convert = t.dtype == DType::BF16 ? WeightCopy::Convert::AsStored : WeightCopy::Convert::ToBf16;
          (t.dtype == DType::BF16 ? plan.bf16_bytes : plan.converted_bytes) += p.bytes;
          break;
        }
        const TensorInfo& t = float_tensor(ckpt, p);
        // A plain weight's module holds no FP8 or INT4 companions (whatever the config says).
        if (p.fill == Placement::Fill::Bf16 && p.linear)
          check_stored_form(ckpt, quant, p.tensor.substr(0, p.tensor.size() - 7));
        c.src = float_window(t, p.win.row0, p.win.rows, p.win.col0, p.win.cols);
        if (p.fill == Placement::Fill::Bf16) {
          c.convert = t.dtype == DType::BF16 ? WeightCopy::Convert::AsStored : WeightCopy::Convert::ToBf16;
        } else if (p.fill == Placement::Fill::Float32) {
          c.convert = t.dtype == DType::F32 ? WeightCopy::Convert::AsStored : WeightCopy::Convert::ToFloat32;
          out_element = 4;
        } else {
          c.convert = p.fill == Placement::Fill::RouterHigh ? WeightCopy::Convert::RouterHigh
                                                            : WeightCopy::Convert::RouterLow;
          if (p.fill == Placement::Fill::RouterHigh && t.dtype == DType::BF16) c.convert = WeightCopy::Convert::AsStored;
        }
        (c.convert == WeightCopy::Convert::AsStored && t.dtype == DType::BF16 ? plan.bf16_bytes : plan.converted_bytes) +=
            p.bytes;
        LT_CHECK(std::size_t(p.win.rows * p.win.cols) * out_element == p.bytes, "load plan: ", p.tensor, " places ",
                 p.bytes, " bytes for a window of ", p.win.rows, " x ", p.win.cols);
        break;
      }
      case Placement::Fill::PackedData:
      case Placement::Fill::PackedScales: {
        const PackedLayout l = packed_layout(ckpt, quant, p.tensor, p.out_full, p.in_full, p.win, p.expert);
        const bool data = p.fill == Placement::Fill::PackedData;
        c.src = data ? l.data : l.scales;
        c.check = !data ? packed_scale_rule(l.shape.format)
                  : l.shape.format == PackedLinear::Format::Fp8Block ? ValueRule::Finite  // FP8 NaN codes
                                                                     : ValueRule::None;
        LT_CHECK(std::size_t(c.src.bytes()) == p.bytes, "cuda backend: ", p.tensor, " reads as ", c.src.bytes(),
                 data ? " packed" : " scale", " bytes, the device layout expects ", p.bytes);
        (data ? (l.shape.format == PackedLinear::Format::Fp8Block ? plan.fp8_bytes : plan.int4_bytes)
              : plan.scale_bytes) += p.bytes;
        break;
      }
    }
    plan.read_bytes += std::size_t(c.src.bytes());
    files.insert(c.src.tensor->file);
    plan.copies.push_back(c);
  }
  plan.files = files.size();
  return plan;
}

LocalShape checkpoint_shape(const ModelConfig& config, const TpShard& shard, const Checkpoint& ckpt) {
  LocalShape s = LocalShape::of(config, shard, PackedSource::Checkpoint, &ckpt);
  for (std::int64_t i = 0; i < s.layers && !s.router_lo; ++i) {
    if (!s.moe_layer[std::size_t(i)]) continue;
    const std::string name = std::get<MoeSlices>(s.layer_slices(i).ffn).router.module + ".weight";
    if (ckpt.info(name).dtype == DType::BF16) continue;
    for (const float v : ckpt.read(name, {s.experts, s.hidden})) s.router_lo |= bf16_to_float(float_to_bf16(v)) != v;
  }
  return s;
}

}  // namespace layertap::cuda
