#include "model/weights.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/failpoint.hpp"
#include "core/stop_request.hpp"
#include "model/linear_reader.hpp"

namespace layertap {

namespace {

// Slice boundaries a quantized format can be cut at: a column-parallel slice cuts rows, a
// row-parallel slice cuts columns.
class SliceCheck {
 public:
  SliceCheck(const ModelConfig& c, const TpShard& s) : c_(c), s_(s) {}

  void operator()(const LinearSlice& l) const {
    if (l.split == Split::Column) rows(l.module, l.rows());
    if (l.split == Split::Row) cols(l.module, l.cols());
    if (l.split == Split::Row && l.expert >= 0 && c_.quant.method == QuantConfig::Method::Mxfp4)
      LT_CHECK(l.cols() % 32 == 0, "tensor parallel size ", s_.size, " gives ", l.module, " slices of ", l.cols(),
               " input columns, which do not align with its MXFP4 groups of 32 (--moe-split experts keeps "
               "experts whole)");
  }

 private:
  void rows(const std::string& module, int64_t local_rows) const {
    if (c_.quant.method == QuantConfig::Method::Fp8Block)
      LT_CHECK(local_rows % c_.quant.block_rows == 0, "tensor parallel size ", s_.size, " gives ", module,
               " slices of ", local_rows, " rows, which do not align with the FP8 block rows (",
               c_.quant.block_rows, ")");
  }
  void cols(const std::string& module, int64_t local_cols) const {
    if (c_.quant.method == QuantConfig::Method::Fp8Block)
      LT_CHECK(local_cols % c_.quant.block_cols == 0, "tensor parallel size ", s_.size, " gives ", module,
               " slices of ", local_cols, " columns, which do not align with the FP8 block columns (",
               c_.quant.block_cols, ")");
    if (c_.quant.int4_packed(module))
      LT_CHECK(local_cols % c_.quant.group_size == 0, "tensor parallel size ", s_.size, " gives ", module,
               " slices of ", local_cols, " input columns, which do not align with its INT4 groups of ",
               c_.quant.group_size);
  }

  const ModelConfig& c_;
  const TpShard& s_;
};

// Reads this rank's slices (rank_layout.hpp) of one model's tensors as float32: map_layer's mapper
// (model/layer_parts.hpp) from Slices to HostTensors.
class ShardLoader {
 public:
  ShardLoader(const Checkpoint& ck, const QuantConfig& quant) : ck_(ck), reader_(ck, quant) {}

  Linear linear(const LinearSlice& s) const {
    Linear l;
    l.out = s.rows();
    l.in = s.cols();
    l.w = reader_.read(s);
    if (s.bias) {
      // Column-parallel and whole: the window's rows of the bias; row-parallel: all of it. A stacked
      // expert's bias is its row of `module`_bias [E, out].
      std::vector<float> b = s.expert < 0 ? ck_.read(s.module + ".bias", {s.out_full})
                                          : stacked_row(s.module + "_bias", s.expert, s.out_full);
      if (s.split == Split::Row)
        l.b = std::move(b);
      else
        l.b.assign(b.begin() + s.win.row0, b.begin() + s.win.row0 + s.win.rows);
    }
    return l;
  }
  std::vector<float> vector(const VectorSlice& v) const {
    std::vector<float> all = ck_.read(v.tensor, {v.full_size()});
    return {all.begin() + v.first, all.begin() + v.first + v.size};
  }
  // The router in float32 as stored (never quantized: transformers computes its logits in float32).
  Linear router(const LinearSlice& s) const {
    Linear l;
    l.out = s.out_full;
    l.in = s.in_full;
    l.w = ck_.read(s.module + ".weight", {s.out_full, s.in_full});
    if (s.bias) l.b = ck_.read(s.module + ".bias", {s.out_full});
    return l;
  }

  // Interleaved gate/up (GPT-OSS) read as stored, then split: gate the even rows, up the odd.
  MlpWeights mlp(const MlpSlices& m) const {
    if (!interleaved(m)) return map_mlp<HostTensors>(m, *this);
    const Linear both = linear(m.gate);  // [2 I, H]
    MlpWeights w;
    for (int64_t half = 0; half < 2; ++half) {
      Linear& l = half == 0 ? w.gate : w.up;
      l.out = both.out / 2;
      l.in = both.in;
      l.w.resize(std::size_t(l.out * l.in));
      for (int64_t r = 0; r < l.out; ++r)
        std::copy_n(both.w.begin() + (2 * r + half) * l.in, l.in, l.w.begin() + r * l.in);
      if (!both.b.empty())
        for (int64_t r = 0; r < l.out; ++r) l.b.push_back(both.b[std::size_t(2 * r + half)]);
    }
    w.down = linear(m.down);
    return w;
  }

 private:
  // Row `row` of the 2-D float tensor `name` [rows, width].
  std::vector<float> stacked_row(const std::string& name, int64_t row, int64_t width) const {
    const TensorInfo& t = ck_.info(name);
    LT_CHECK(t.shape.size() == 2 && t.shape[0] > row && t.shape[1] == width, "tensor '", name, "' in '", t.file,
             "' has shape ", shape_str(t.shape), ", expected [E > ", row, ", ", width, "]");
    return ck_.read_rows(name, t.shape, row, 1);
  }

  const Checkpoint& ck_;
  const LinearReader reader_;
};

}  // namespace

void check_tp_divisibility(const ModelConfig& c, const TpShard& s) {
  check_tp_counts(c, s);
  if (s.size == 1 || c.quant.method == QuantConfig::Method::None) return;  // nothing is cut
  const SliceCheck check(c, s);
  for (int64_t i = 0; i < c.num_layers; ++i) layer_slices(c, s, i).for_each_linear(check);
}

ModelWeights load_weights(const Checkpoint& ck, const ModelConfig& c, const TpShard& s) {
  check_tp_divisibility(c, s);
  const ShardLoader load(ck, c.quant);
  const ModelSlices top = model_slices(c);
  ModelWeights m;
  m.embed = ck.read(top.embed, {c.vocab_size, c.hidden_size});
  m.final_norm = load.vector(top.final_norm);
  m.layers.resize(std::size_t(c.num_layers));
  for (int64_t i = 0; i < c.num_layers; ++i) {
    failpoint("load-layer");
    stop_point("loading the weights");
    m.layers[std::size_t(i)] = map_layer<HostTensors>(layer_slices(c, s, i), load);
  }
  return m;
}

int64_t host_weight_bytes(const ModelConfig& c, const TpShard& s) {
  check_tp_counts(c, s);
  // Counted in double: a hostile config's total can pass int64 (4096 layers of 256 experts of
  // width 2^20), and below 2^53 elements (every real model) the count is exact.
  double n = double(c.vocab_size) * double(c.hidden_size) + double(c.hidden_size);  // embedding, final norm
  const auto linear = [&](const LinearSlice& l) {
    n += double(l.rows()) * double(l.cols()) + double(l.bias_values());
  };
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const LayerSlices ls = layer_slices(c, s, i);
    ls.for_each_vector([&](const VectorSlice& v) { n += double(v.size); });
    ls.for_each_linear(linear);
    if (const auto* e = std::get_if<MoeSlices>(&ls.ffn)) {
      n += double(e->router.out_full) * double(e->router.in_full) + double(e->router.bias_values());
      if (e->score_bias) n += double(e->score_bias->size);
    }
  }
  const double bytes = n * double(sizeof(float));
  return bytes < 0x1p62 ? int64_t(bytes) : int64_t(1) << 62;
}

}  // namespace layertap
