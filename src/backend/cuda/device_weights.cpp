#include "backend/cuda/device_weights.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <optional>
#include <string>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/dequant.cuh"
#include "kernels/random_fill.cuh"
#include "backend/cuda/load_plan.hpp"
#include "backend/cuda/weight_loader.hpp"
#include "model/packed_weights.hpp"

namespace layertap::cuda {

namespace {

using bf16 = __nv_bfloat16;

std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return (a + b - 1) / b; }

// Records what fills each range `res` hands out (Placement), right after the take.
class Recorder {
 public:
  Recorder(Arena& resident, std::vector<Placement>& out) : res_(resident), out_(out) {}
  // A whole 1-D tensor [n] as bf16.
  bf16* vector(const std::string& tensor, std::int64_t n) {
    bf16* p = res_.take<bf16>(n);
    add(Placement::Fill::Bf16, tensor, true, 1, n, {0, 1, 0, n}, std::size_t(n) * 2);
    return p;
  }
  // A whole 2-D tensor [rows, cols] as bf16, bf16(w) or bf16(w - bf16(w)).
  bf16* matrix(Placement::Fill fill, const std::string& tensor, std::int64_t rows, std::int64_t cols) {
    bf16* p = res_.take<bf16>(rows * cols);
    add(fill, tensor, false, rows, cols, {0, rows, 0, cols}, std::size_t(rows * cols) * 2);
    return p;
  }
  // A 1-D tensor's window [first, first + n) of its [full] as float32.
  float* float32(const std::string& tensor, std::int64_t n, std::int64_t first = 0, std::int64_t full = 0) {
    float* p = res_.take<float>(n);
    add(Placement::Fill::Float32, tensor, true, 1, full > 0 ? full : n, {0, 1, first, n}, std::size_t(n) * 4);
    return p;
  }
  // `bytes` at `at` bytes into the last take.
  void add(Placement::Fill fill, const std::string& tensor, bool vec, std::int64_t out_full, std::int64_t in_full,
           const quant::Window& win, std::size_t bytes, std::size_t at = 0, bool linear = false,
           std::int64_t expert = -1, bool transposed = false) {
    if (bytes > 0)
      out_.push_back(
          {fill, tensor, expert, transposed, vec, linear, out_full, in_full, win, res_.last_offset() + at, bytes});
  }
  Arena& arena() { return res_; }

 private:
  Arena& res_;
  std::vector<Placement>& out_;
};

// Places Linears (resident bf16, or packed bytes resident + bf16 expansion in the layer scratch).
class Placer {
 public:
  Placer(Recorder& resident, Arena& scratch, const LocalShape& s, std::vector<PackedPiece>& pieces)
      : rec_(resident), res_(resident.arena()), scr_(&scratch), s_(s), pieces_(pieces) {}

  // Where the next Linears' expansions go, and the routed expert they belong to (-1: none).
  void expand_into(Arena& scratch, std::int64_t expert) {
    scr_ = &scratch;
    expert_ = expert;
  }

  // A Linear whose rows are the slices `parts` stacked (q/k/v, gate/up), all stored alike.
  DeviceLinear linear(const std::vector<const LinearSlice*>& parts) {
    DeviceLinear l;
    l.in = parts.front()->win.cols;
    for (const LinearSlice* p : parts) l.out += p->win.rows;
    const LinearStorage st = s_.storage(parts.front()->module);
    const bool bias = parts.front()->bias;
    for (const LinearSlice* p : parts) {
      LT_CHECK(s_.storage(p->module).kind == st.kind, "cuda backend: ", p->module, " is stored differently from ",
               parts.front()->module, ", which the device fuses it with");
      LT_CHECK(p->bias == bias, "cuda backend: ", p->module, " and ", parts.front()->module,
               " differ in having a bias, which the device fuses");
    }
    if (st.kind == LinearStorage::Kind::Bf16) {
      l.w = res_.take<bf16>(l.out * l.in);
      std::size_t at = 0;
      for (const LinearSlice* p : parts) {
        const std::size_t bytes = std::size_t(p->win.rows * l.in) * 2;
        // A stacked expert (Llama-4) is its matrix of `module` itself, stored x @ W.
        rec_.add(Placement::Fill::Bf16, p->expert < 0 ? p->module + ".weight" : p->module, false, p->out_full,
                 p->in_full, p->win, bytes, at, true, p->expert, p->transposed);
        at += bytes;
      }
    } else {
      l.packed = true;
      l.w = scr_->take<bf16>(l.out * l.in);
      std::int64_t row = 0;
      for (const LinearSlice* slice : parts) {
        const LinearSlice& p = *slice;
        PackedPiece pc;
        pc.storage = st;
        pc.rows = p.win.rows;
        pc.cols = p.win.cols;
        pc.module = p.module;
        pc.out_full = p.out_full;
        pc.in_full = p.in_full;
        pc.win = p.win;
        pc.block_rows = s_.block_rows;
        pc.block_cols = s_.block_cols;
        pc.group = s_.group;
        if (st.kind == LinearStorage::Kind::Fp8Block) {
          pc.row_phase = p.win.row0 % s_.block_rows;
          pc.col_phase = p.win.col0 % s_.block_cols;
          pc.data_bytes = pc.rows * pc.cols;
          pc.scale_bytes = 4 * ceil_div(pc.row_phase + pc.rows, s_.block_rows) *
                           ceil_div(pc.col_phase + pc.cols, s_.block_cols);
        } else {
          pc.data_bytes = pc.rows * ceil_div(pc.cols, 8) * 4;
          pc.scale_bytes = pc.rows * ceil_div(pc.cols, s_.group) * kernels::scale_size(st.scale);
        }
        pc.stacked = p.expert;
        pc.data = res_.take<std::byte>(pc.data_bytes);
        rec_.add(Placement::Fill::PackedData, p.module, false, p.out_full, p.in_full, p.win, std::size_t(pc.data_bytes),
                 0, true, p.expert);
        pc.scales = res_.take<std::byte>(pc.scale_bytes);
        rec_.add(Placement::Fill::PackedScales, p.module, false, p.out_full, p.in_full, p.win,
                 std::size_t(pc.scale_bytes), 0, true, p.expert);
        pc.dst = l.w != nullptr ? l.w + row * l.in : nullptr;
        pc.expert = expert_;
        row += pc.rows;
        pieces_.push_back(std::move(pc));
      }
    }
    if (bias) {
      // Column-parallel parts keep their rows of the bias; a row-parallel Linear the whole of it
      // (its window's rows are all of them). A stacked expert's bias is its row of `module`_bias
      // [E, out].
      l.b = res_.take<bf16>(l.out);
      l.biased = true;
      std::size_t at = 0;
      for (const LinearSlice* p : parts) {
        const std::size_t bytes = std::size_t(p->win.rows) * 2;
        if (p->expert < 0)
          rec_.add(Placement::Fill::Bf16, p->module + ".bias", true, 1, p->out_full, {0, 1, p->win.row0, p->win.rows},
                   bytes, at);
        else
          rec_.add(Placement::Fill::Bf16, p->module + "_bias", false, s_.experts, p->out_full,
                   {p->expert, 1, p->win.row0, p->win.rows}, bytes, at);
        at += bytes;
      }
    }
    return l;
  }

 private:
  Recorder& rec_;
  Arena& res_;
  Arena* scr_;
  std::int64_t expert_ = -1;
  const LocalShape& s_;
  std::vector<PackedPiece>& pieces_;
};

}  // namespace

void DeviceWeights::place(Arena& res, std::byte* scratch_base, const Sizes& counted, const LocalShape& s) {
  const ModelSlices top = s.model_slices();
  placements_.clear();
  Recorder rec(res, placements_);
  embed = rec.matrix(Placement::Fill::Bf16, top.embed, s.vocab, s.hidden);
  final_norm = rec.vector(top.final_norm.tensor, top.final_norm.size);
  layers.assign(std::size_t(s.layers), DeviceLayer{});
  sizes_ = Sizes{};
  // The scratch: [the layer's part (counted.layer_scratch) | expert_group slots of expert_scratch].
  const std::size_t slots_at = Arena::aligned(counted.layer_scratch);
  const std::size_t slot_bytes = Arena::aligned(counted.expert_scratch);
  for (std::int64_t i = 0; i < s.layers; ++i) {
    const LayerSlices ls = s.layer_slices(i);
    DeviceLayer& l = layers[std::size_t(i)];
    Arena scr = scratch_base != nullptr ? Arena(scratch_base, counted.layer_scratch) : Arena();
    Placer put(rec, scr, s, l.packed);
    const auto vector = [&](const VectorSlice& v) { return rec.vector(v.tensor, v.size); };
    l.input_norm = vector(ls.input_norm);
    l.pre_ffn_norm = vector(ls.pre_ffn_norm);
    if (ls.post_attn_norm) l.post_attn_norm = vector(*ls.post_attn_norm);
    if (ls.post_ffn_norm) l.post_ffn_norm = vector(*ls.post_ffn_norm);
    if (const auto* g = std::get_if<GqaSlices>(&ls.attn)) {
      if (g->q_norm) l.q_norm = vector(*g->q_norm);
      if (g->k_norm) l.k_norm = vector(*g->k_norm);
      if (g->sinks) l.sinks = rec.float32(g->sinks->tensor, g->sinks->size, g->sinks->first, g->sinks->full_size());
      l.qkv = put.linear({&g->q, &g->k, &g->v});
      l.o = put.linear({&g->o});
    } else {
      const MlaSlices& m = std::get<MlaSlices>(ls.attn);
      DeviceMla& a = l.mla;
      if (m.q_a) {
        a.q_a = put.linear({&*m.q_a});
        a.q_a_norm = vector(*m.q_a_norm);
        a.q_b = put.linear({&*m.q_b});
      } else {
        a.q = put.linear({&*m.q});
      }
      a.kv_a = put.linear({&m.kv_a});
      a.kv_a_norm = vector(m.kv_a_norm);
      a.kv_b = put.linear({&m.kv_b});
      a.o = put.linear({&m.o});
    }
    // A gated MLP as two Linears: gate rows then up rows (or interleaved as stored), and down.
    const auto mlp = [&](const MlpSlices& m, DeviceLinear& gate_up, DeviceLinear& down) {
      gate_up = interleaved(m) ? put.linear({&m.gate}) : put.linear({&m.gate, &m.up});
      down = put.linear({&m.down});
    };
    l.moe = std::holds_alternative<MoeSlices>(ls.ffn);
    if (!l.moe) {
      mlp(std::get<MlpSlices>(ls.ffn), l.gate_up, l.down);
    } else {
      const MoeSlices& m = std::get<MoeSlices>(ls.ffn);
      DeviceMoe& e = l.experts;
      const std::string router = m.router.module + ".weight";
      e.router = rec.matrix(Placement::Fill::RouterHigh, router, m.experts, s.hidden);
      if (s.router_lo) e.router_lo = rec.matrix(Placement::Fill::RouterLow, router, m.experts, s.hidden);
      if (m.score_bias) e.score_bias = rec.float32(m.score_bias->tensor, m.experts);
      if (m.router.bias) e.router_bias = rec.float32(m.router.module + ".bias", m.experts);
      e.gate_up.resize(m.routed.size());
      e.down.resize(m.routed.size());
      const std::int64_t group = s.expert_group > 0 ? s.expert_group : std::int64_t(m.routed.size());
      sizes_.expert_group = std::max(sizes_.expert_group, std::min(group, std::int64_t(m.routed.size())));
      for (std::size_t x = 0; x < m.routed.size(); ++x) {
        Arena slot = scratch_base != nullptr && !s.experts_grouped
                         ? Arena(scratch_base + slots_at + std::size_t(std::int64_t(x) % group) * slot_bytes,
                                 counted.expert_scratch)
                         : Arena();
        put.expand_into(slot, std::int64_t(x));
        mlp(m.routed[x], e.gate_up[x], e.down[x]);
        if (!s.experts_grouped) sizes_.expert_scratch = std::max(sizes_.expert_scratch, slot.used());
      }
      put.expand_into(scr, -1);
      if (m.shared) mlp(*m.shared, e.shared_gate_up, e.shared_down);
    }
    if (scr.used() > sizes_.layer_scratch) {
      sizes_.layer_scratch = scr.used();
      sizes_.scratch_layer = i;
    }
  }
  if (sizes_.expert_scratch == 0) sizes_.expert_group = 0;
  sizes_.scratch = sizes_.expert_scratch == 0 ? sizes_.layer_scratch
                                              : Arena::aligned(sizes_.layer_scratch) +
                                                    std::size_t(sizes_.expert_group - 1) *
                                                        Arena::aligned(sizes_.expert_scratch) +
                                                    sizes_.expert_scratch;
  sizes_.resident = res.used();
  sizes_.packed = 0;
  for (const DeviceLayer& l : layers)
    for (const PackedPiece& p : l.packed)
      sizes_.packed += std::size_t(p.data_bytes) + std::size_t(p.scale_bytes);
}

DeviceWeights DeviceWeights::layout(const LocalShape& shape) {
  Arena counter;
  DeviceWeights w;
  w.place(counter, nullptr, Sizes{}, shape);
  return w;
}

DeviceWeights::Sizes DeviceWeights::sizes(const LocalShape& shape) { return layout(shape).sizes_; }

std::size_t DeviceWeights::bytes(const LocalShape& shape) { return sizes(shape).resident; }

DeviceWeights DeviceWeights::allocate(const LocalShape& shape) {
  const Sizes need = sizes(shape);
  DeviceWeights w;
  w.memory_ = DeviceMemory(need.resident);
  w.scratch_ = DeviceMemory(need.scratch);
  // Zeros where no tensor goes (alignment padding), so the block equals the plan's image byte for
  // byte and holds nothing of the memory's previous contents.
  if (need.resident > 0) LT_CUDA_CHECK(cudaMemset(w.memory_.data(), 0, need.resident));
  Arena arena(w.memory_.data(), w.memory_.bytes());
  w.place(arena, w.scratch_.data(), need, shape);
  return w;
}

namespace {
void expand(const PackedPiece& p, cudaStream_t stream) {
  if (p.storage.kind == LinearStorage::Kind::Fp8Block) {
    kernels::dequantize_fp8_block(p.dst, reinterpret_cast<const std::uint8_t*>(p.data),
                                  reinterpret_cast<const float*>(p.scales), p.rows, p.cols, p.block_rows, p.block_cols,
                                  p.row_phase, p.col_phase, stream);
  } else {
    kernels::dequantize_int4_group(p.dst, reinterpret_cast<const std::uint32_t*>(p.data), p.scales, p.storage.scale,
                                   p.rows, p.cols, p.group, stream);
  }
}
}  // namespace

void DeviceWeights::dequantize(std::int64_t layer, cudaStream_t stream) const {
  for (const PackedPiece& p : layers[std::size_t(layer)].packed)
    if (p.expert < 0) expand(p, stream);
}

void DeviceWeights::dequantize_experts(std::int64_t layer, std::int64_t first, std::int64_t last,
                                       cudaStream_t stream) const {
  LT_CHECK(first >= 0 && first <= last && (sizes_.expert_group == 0 || last - first <= sizes_.expert_group),
           "cuda backend: experts ", first, "..", last, " are not one group of at most ", sizes_.expert_group);
  for (const PackedPiece& p : layers[std::size_t(layer)].packed)
    if (p.expert >= first && p.expert < last) expand(p, stream);
}

namespace {

// Host float32 tensors converted to bf16 and concatenated, then copied to `dst` (in the host image) in one go.
class Upload {
 public:
  Upload& add(const std::optional<std::vector<float>>& v, std::int64_t expected, const std::string& name) {
    LT_CHECK(v.has_value(), "cuda backend: host tensor ", name, " is missing, this rank's shape needs it");
    return add(*v, expected, name);
  }
  Upload& add(const std::vector<float>& v, std::int64_t expected, const std::string& name) {
    LT_CHECK(std::int64_t(v.size()) == expected, "cuda backend: host tensor ", name, " holds ", v.size(),
             " values, this rank's shape needs ", expected);
    bits_.reserve(bits_.size() + v.size());
    for (const float f : v) bits_.push_back(float_to_bf16(f));
    return *this;
  }
  void to(void* dst) const {
    if (!bits_.empty()) std::memcpy(dst, bits_.data(), bits_.size() * sizeof(std::uint16_t));
  }

 private:
  std::vector<std::uint16_t> bits_;
};

void check_bias(const Linear& l, bool expected, const std::string& name) {
  LT_CHECK(l.b.empty() != expected, "cuda backend: ", name, expected ? " lacks the bias" : " has an unexpected bias",
           " this rank's shape implies");
}

// `l`, which the rank's shape needs (`name` in the error).
const Linear& needed(const std::optional<Linear>& l, const std::string& name) {
  LT_CHECK(l.has_value(), "cuda backend: host Linear ", name, " is missing, this rank's shape needs it");
  return *l;
}

// A device Linear from host Linears stacked by rows (`names` name them in errors). Packed device
// Linears take only their bias from the host (their weights come from the checkpoint).
void upload_linear(const DeviceLinear& d, const std::vector<const Linear*>& parts,
                   const std::vector<std::string>& names, bool bias) {
  std::int64_t rows = 0;
  for (std::size_t k = 0; k < parts.size(); ++k) {
    LT_CHECK(parts[k]->in == d.in, "cuda backend: ", names[k], " has ", parts[k]->in, " inputs, this rank's shape ",
             d.in);
    rows += parts[k]->out;
    check_bias(*parts[k], bias, names[k]);
  }
  LT_CHECK(rows == d.out, "cuda backend: ", names.front(), " holds ", rows, " rows, this rank's shape ", d.out);
  if (!d.packed) {
    Upload up;
    for (std::size_t k = 0; k < parts.size(); ++k) up.add(parts[k]->w, parts[k]->out * d.in, names[k]);
    up.to(d.w);
  }
  if (bias) {
    Upload up;
    for (std::size_t k = 0; k < parts.size(); ++k) up.add(parts[k]->b, parts[k]->out, names[k] + ".bias");
    up.to(d.b);
  }
}

// Gate and up rows interleaved (gate row i at 2i, up row i at 2i + 1), as GPT-OSS stores them and
// the device keeps them: [2 I, in], bias [2 I].
Linear interleave(const Linear& gate, const Linear& up) {
  Linear l;
  l.out = gate.out + up.out;
  l.in = gate.in;
  l.w.resize(std::size_t(l.out * l.in));
  for (std::int64_t r = 0; r < gate.out; ++r) {
    std::copy_n(gate.w.begin() + r * l.in, l.in, l.w.begin() + 2 * r * l.in);
    std::copy_n(up.w.begin() + r * l.in, l.in, l.w.begin() + (2 * r + 1) * l.in);
  }
  for (std::size_t r = 0; r < gate.b.size() && r < up.b.size(); ++r) {
    l.b.push_back(gate.b[r]);
    l.b.push_back(up.b[r]);
  }
  return l;
}

void upload_mlp(const DeviceLinear& gate_up, const DeviceLinear& down, const MlpWeights& m, const std::string& base,
                bool bias, bool down_bias, bool interleaved = false) {
  if (interleaved) {
    LT_CHECK(m.gate.out == m.up.out && m.gate.b.size() == m.up.b.size(), "cuda backend: ", base,
             "gate_up_proj's gate and up halves differ in shape");
    const Linear both = interleave(m.gate, m.up);
    upload_linear(gate_up, {&both}, {base + "gate_up_proj"}, bias);
  } else {
    upload_linear(gate_up, {&m.gate, &m.up}, {base + "gate_proj", base + "up_proj"}, bias);
  }
  upload_linear(down, {&m.down}, {base + "down_proj"}, down_bias);
}

}  // namespace

DeviceWeights DeviceWeights::upload(const LocalShape& s, const ModelWeights& host, const Checkpoint* ckpt,
                                    const QuantConfig* quant) {
  const std::vector<std::byte> image = reference_image(s, host, ckpt, quant);
  DeviceWeights w = allocate(s);
  if (!image.empty()) LT_CUDA_CHECK(cudaMemcpy(w.memory_.data(), image.data(), image.size(), cudaMemcpyHostToDevice));
  return w;
}

std::vector<std::byte> DeviceWeights::reference_image(const LocalShape& s, const ModelWeights& host,
                                                      const Checkpoint* ckpt, const QuantConfig* quant) {
  LT_CHECK(std::int64_t(host.layers.size()) == s.layers, "cuda backend: host weights hold ", host.layers.size(),
           " layers, the config ", s.layers);
  std::vector<std::byte> image(sizes(s).resident);  // zeros: the alignment padding
  DeviceWeights w;
  Arena arena(image.data(), image.size());
  w.place(arena, nullptr, Sizes{}, s);
  const std::int64_t H = s.hidden;
  Upload().add(host.embed, s.vocab * H, "embed_tokens").to(w.embed);
  Upload().add(host.final_norm, H, "norm").to(w.final_norm);
  for (std::size_t i = 0; i < host.layers.size(); ++i) {
    const LayerWeights& hl = host.layers[i];
    const DeviceLayer& dl = w.layers[i];
    const std::string p = cat("layers.", i, ".");
    Upload().add(hl.input_norm, H, p + "input_layernorm").to(dl.input_norm);
    Upload().add(hl.pre_ffn_norm, H, p + "pre-FFN norm").to(dl.pre_ffn_norm);
    if (dl.post_attn_norm != nullptr) {
      Upload().add(hl.post_attn_norm, H, p + "post_attention_layernorm").to(dl.post_attn_norm);
      Upload().add(hl.post_ffn_norm, H, p + "post_feedforward_layernorm").to(dl.post_ffn_norm);
    }
    if (!s.mla) {
      LT_CHECK(std::holds_alternative<GqaWeights>(hl.attn), "cuda backend: ", p, "self_attn is not GQA");
      const GqaWeights& a = std::get<GqaWeights>(hl.attn);
      LT_CHECK(a.heads == s.heads && a.kv_heads == s.kv_heads, "cuda backend: ", p, "self_attn holds ", a.heads,
               " query and ", a.kv_heads, " kv heads, this rank's shape ", s.heads, " and ", s.kv_heads);
      if (s.qk_norm) {
        Upload().add(a.q_norm, s.head_dim, p + "self_attn.q_norm").to(dl.q_norm);
        Upload().add(a.k_norm, s.head_dim, p + "self_attn.k_norm").to(dl.k_norm);
      }
      if (s.sinks) {
        const std::size_t n = a.sinks ? a.sinks->size() : 0;
        LT_CHECK(std::int64_t(n) == s.heads, "cuda backend: ", p, "self_attn.sinks holds ", n,
                 " values for this rank's ", s.heads, " heads");
        std::memcpy(dl.sinks, a.sinks->data(), n * 4);
      }
      upload_linear(dl.qkv, {&a.q, &a.k, &a.v},
                    {p + "self_attn.q_proj", p + "self_attn.k_proj", p + "self_attn.v_proj"}, s.qkv_bias);
      upload_linear(dl.o, {&a.o}, {p + "self_attn.o_proj"}, s.o_bias);
    } else {
      LT_CHECK(std::holds_alternative<MlaWeights>(hl.attn), "cuda backend: ", p, "self_attn is not MLA");
      const MlaWeights& a = std::get<MlaWeights>(hl.attn);
      LT_CHECK(a.heads == s.heads, "cuda backend: ", p, "self_attn holds ", a.heads, " heads, this rank's shape ",
               s.heads);
      const DeviceMla& d = dl.mla;
      if (s.q_lora > 0) {
        upload_linear(d.q_a, {&needed(a.q_a, p + "self_attn.q_a_proj")}, {p + "self_attn.q_a_proj"}, s.mla_bias);
        Upload().add(a.q_a_norm, s.q_lora, p + "self_attn.q_a_layernorm").to(d.q_a_norm);
        upload_linear(d.q_b, {&needed(a.q_b, p + "self_attn.q_b_proj")}, {p + "self_attn.q_b_proj"}, false);
      } else {
        upload_linear(d.q, {&needed(a.q, p + "self_attn.q_proj")}, {p + "self_attn.q_proj"}, false);
      }
      upload_linear(d.kv_a, {&a.kv_a}, {p + "self_attn.kv_a_proj_with_mqa"}, s.mla_bias);
      Upload().add(a.kv_a_norm, s.kv_lora, p + "self_attn.kv_a_layernorm").to(d.kv_a_norm);
      upload_linear(d.kv_b, {&a.kv_b}, {p + "self_attn.kv_b_proj"}, false);
      upload_linear(d.o, {&a.o}, {p + "self_attn.o_proj"}, s.o_bias);
    }
    if (!dl.moe) {
      LT_CHECK(std::holds_alternative<MlpWeights>(hl.ffn), "cuda backend: ", p, "mlp is not a dense MLP");
      upload_mlp(dl.gate_up, dl.down, std::get<MlpWeights>(hl.ffn), p + "mlp.", s.mlp_bias, s.down_bias);
    } else {
      LT_CHECK(std::holds_alternative<MoeWeights>(hl.ffn), "cuda backend: ", p, "mlp is not a MoE block");
      const MoeWeights& m = std::get<MoeWeights>(hl.ffn);
      const DeviceMoe& d = dl.experts;
      LT_CHECK(m.router.out == s.experts && m.router.in == H, "cuda backend: ", p, "mlp.gate holds [", m.router.out,
               ", ", m.router.in, "], expected [", s.experts, ", ", H, "]");
      LT_CHECK(std::int64_t(m.routed.size()) == s.local_experts && m.first_expert == s.first_expert,
               "cuda backend: ", p, "mlp holds experts ", m.first_expert, "..+", m.routed.size(),
               ", this rank's shape ", s.first_expert, "..+", s.local_experts);
      LT_CHECK(m.shared.has_value() == (s.shared_inter > 0), "cuda backend: ", p, "mlp.shared_experts ",
               m.shared ? "present" : "missing", " against the config");
      // The router as bf16(w), plus bf16(w - bf16(w)) where w is not a bf16 value (see DeviceMoe).
      std::vector<std::uint16_t> hi(m.router.w.size()), lo(m.router.w.size());
      for (std::size_t k = 0; k < hi.size(); ++k) {
        hi[k] = float_to_bf16(m.router.w[k]);
        lo[k] = float_to_bf16(m.router.w[k] - bf16_to_float(hi[k]));
      }
      std::memcpy(static_cast<void*>(d.router), hi.data(), hi.size() * 2);
      if (d.router_lo != nullptr) std::memcpy(static_cast<void*>(d.router_lo), lo.data(), lo.size() * 2);
      if (s.score_bias) {
        const std::size_t n = m.score_bias ? m.score_bias->size() : 0;
        LT_CHECK(std::int64_t(n) == s.experts, "cuda backend: ", p, "mlp.gate.e_score_correction_bias holds ", n,
                 " values for ", s.experts, " experts");
        std::memcpy(d.score_bias, m.score_bias->data(), n * 4);
      }
      if (s.router_bias) {
        LT_CHECK(std::int64_t(m.router.b.size()) == s.experts, "cuda backend: ", p, "mlp.router.bias holds ",
                 m.router.b.size(), " values for ", s.experts, " experts");
        std::memcpy(d.router_bias, m.router.b.data(), m.router.b.size() * 4);
      }
      // GPT-OSS's experts carry biases: gate/up's on every rank, down's where the layout puts it.
      for (std::int64_t x = 0; x < s.local_experts; ++x)
        upload_mlp(d.gate_up[std::size_t(x)], d.down[std::size_t(x)], m.routed[std::size_t(x)],
                   cat(p, "mlp.experts.", s.first_expert + x, "."), d.gate_up[std::size_t(x)].b != nullptr,
                   d.down[std::size_t(x)].b != nullptr, s.experts_interleaved);
      if (s.shared_inter > 0)
        upload_mlp(d.shared_gate_up, d.shared_down, *m.shared, p + "mlp.shared_experts.", false, false);
    }
    // Packed Linears: the checkpoint's bytes of this rank's window.
    for (const PackedPiece& pc : dl.packed) {
      LT_CHECK(ckpt != nullptr && quant != nullptr, "cuda backend: ", pc.module, " is held packed but no checkpoint "
               "was given to read it from");
      const PackedLinear pl = read_packed_linear(*ckpt, *quant, pc.module, pc.out_full, pc.in_full, pc.win, pc.stacked);
      LT_CHECK(std::int64_t(pl.data.size()) == pc.data_bytes && std::int64_t(pl.scales.size()) == pc.scale_bytes,
               "cuda backend: ", pc.module, " reads as ", pl.data.size(), " + ", pl.scales.size(),
               " packed bytes, the device layout expects ", pc.data_bytes, " + ", pc.scale_bytes);
      std::memcpy(pc.data, pl.data.data(), pl.data.size());
      std::memcpy(pc.scales, pl.scales.data(), pl.scales.size());
    }
  }
  return image;
}

namespace {

// Staged chunks copied to the resident block on the current device: one stream per reader thread,
// an event per slot so a slot is refilled only after its copy has left it.
class DeviceTarget final : public LoadTarget {
 public:
  DeviceTarget(std::byte* block, int device, int threads, int slots)
      : block_(block), device_(device), slots_(slots), streams_(std::size_t(threads)),
        events_(std::size_t(threads * slots)), pending_(std::size_t(threads * slots), 0) {}
  std::byte* allocate_slot(std::size_t bytes) override {
    void* p = nullptr;
    LT_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
    return static_cast<std::byte*>(p);
  }
  void free_slot(std::byte* slot) override { (void)cudaFreeHost(slot); }
  void begin_thread(int t) override {
    LT_CUDA_CHECK(cudaSetDevice(device_));
    streams_[std::size_t(t)] = std::make_unique<Stream>();
    for (int k = 0; k < slots_; ++k) events_[std::size_t(t * slots_ + k)] = std::make_unique<Event>();
  }
  void put(int t, int k, std::size_t dst, const std::byte* staged, std::size_t bytes) override {
    const cudaStream_t s = streams_[std::size_t(t)]->get();
    LT_CUDA_CHECK(cudaMemcpyAsync(block_ + dst, staged, bytes, cudaMemcpyHostToDevice, s));
    LT_CUDA_CHECK(cudaEventRecord(events_[std::size_t(t * slots_ + k)]->get(), s));
    pending_[std::size_t(t * slots_ + k)] = 1;
  }
  void put_rows(int t, int k, std::size_t dst, std::size_t pitch, const std::byte* staged, std::size_t width,
                std::size_t rows) override {
    const cudaStream_t s = streams_[std::size_t(t)]->get();
    LT_CUDA_CHECK(cudaMemcpy2DAsync(block_ + dst, pitch, staged, width, width, rows, cudaMemcpyHostToDevice, s));
    LT_CUDA_CHECK(cudaEventRecord(events_[std::size_t(t * slots_ + k)]->get(), s));
    pending_[std::size_t(t * slots_ + k)] = 1;
  }
  void wait(int t, int k) override {
    const std::size_t i = std::size_t(t * slots_ + k);
    if (pending_[i] == 0) return;
    pending_[i] = 0;
    LT_CUDA_CHECK(cudaEventSynchronize(events_[i]->get()));
  }

 private:
  std::byte* block_;
  int device_, slots_;
  std::vector<std::unique_ptr<Stream>> streams_;
  std::vector<std::unique_ptr<Event>> events_;
  std::vector<char> pending_;  // per slot: a copy not yet waited for (each thread touches only its own)
};

}  // namespace

DeviceWeights DeviceWeights::load(const LocalShape& s, const LoadPlan& plan, const LoaderOptions& options,
                                  LoadStats* stats) {
  DeviceWeights w = allocate(s);
  LT_CHECK(plan.resident_bytes == w.sizes_.resident, "cuda backend: the load plan fills ", plan.resident_bytes,
           " bytes, this rank's layout holds ", w.sizes_.resident);
  int device = 0;
  LT_CUDA_CHECK(cudaGetDevice(&device));
  DeviceTarget target(w.memory_.data(), device, options.threads, options.slots_per_thread);
  const LoadStats st = run_load_plan(plan, target, options);
  if (stats != nullptr) *stats = st;
  return w;
}

DeviceWeights DeviceWeights::random(const LocalShape& s, std::uint64_t seed, cudaStream_t stream) {
  DeviceWeights w = allocate(s);
  std::uint64_t tensor = 0;  // each tensor draws from its own stream of the hash
  const auto next_seed = [&] { return seed * 0x100000001b3ull + tensor++; };
  const auto fill = [&](bf16* p, std::int64_t n, float offset, float scale) {
    const std::uint64_t sd = next_seed();
    if (p != nullptr) kernels::fill_uniform_bf16(p, n, sd, offset, scale, stream);
  };
  // E[v^2] of an FP8 code drawn uniformly from the finite ones, and of an INT4 q uniform in [-8, 7].
  double fp8_square = 0;
  for (std::uint32_t c = 0; c < 256; ++c)
    if ((c & 0x7fu) != 0x7fu) fp8_square += double(kernels::fp8_e4m3fn_value(c)) * kernels::fp8_e4m3fn_value(c);
  fp8_square /= 254.0;
  constexpr double kInt4Square = 21.5;
  // uniform(-a, a) has variance a^2 / 3: a = sqrt(3 / in) keeps a product's output variance.
  const auto linear = [&](const DeviceLinear& l) {
    if (!l.packed) fill(l.w, l.out * l.in, 0.0f, std::sqrt(3.0f / static_cast<float>(l.in)));
    fill(l.b, l.out, 0.0f, 0.1f);
  };
  const std::int64_t H = s.hidden;
  fill(w.embed, s.vocab * H, 0.0f, 1.0f);
  fill(w.final_norm, H, 1.0f, 0.1f);
  for (const DeviceLayer& l : w.layers) {
    fill(l.input_norm, H, 1.0f, 0.1f);
    fill(l.pre_ffn_norm, H, 1.0f, 0.1f);
    fill(l.post_attn_norm, H, 1.0f, 0.1f);
    fill(l.post_ffn_norm, H, 1.0f, 0.1f);
    if (!s.mla) {
      fill(l.q_norm, s.head_dim, 1.0f, 0.1f);
      fill(l.k_norm, s.head_dim, 1.0f, 0.1f);
      linear(l.qkv);
      linear(l.o);
    } else {
      for (const DeviceLinear* x : {&l.mla.q, &l.mla.q_a, &l.mla.q_b, &l.mla.kv_a, &l.mla.kv_b, &l.mla.o}) linear(*x);
      fill(l.mla.q_a_norm, s.q_lora, 1.0f, 0.1f);
      fill(l.mla.kv_a_norm, s.kv_lora, 1.0f, 0.1f);
    }
    if (!l.moe) {
      linear(l.gate_up);
      linear(l.down);
    } else {
      const DeviceMoe& e = l.experts;
      fill(e.router, s.experts * H, 0.0f, std::sqrt(3.0f / static_cast<float>(H)));
      if (e.router_lo != nullptr) LT_CUDA_CHECK(cudaMemsetAsync(e.router_lo, 0, std::size_t(s.experts * H) * 2, stream));
      const std::uint64_t sd = next_seed();
      if (e.score_bias != nullptr) kernels::fill_uniform_f32(e.score_bias, s.experts, sd, 0.0f, 0.01f, stream);
      for (std::size_t x = 0; x < e.gate_up.size(); ++x) {
        linear(e.gate_up[x]);
        linear(e.down[x]);
      }
      linear(e.shared_gate_up);
      linear(e.shared_down);
    }
    // Packed pieces: random codes with scales giving each element variance 1 / in of its Linear
    // (the piece's columns), the scales themselves within +-10% of that.
    for (const PackedPiece& pc : l.packed) {
      const double in = double(pc.cols);
      const std::uint64_t data_seed = next_seed(), scale_seed = next_seed();
      if (pc.storage.kind == LinearStorage::Kind::Fp8Block) {
        const float s0 = float(std::sqrt(1.0 / (fp8_square * in)));
        kernels::fill_random_fp8(reinterpret_cast<std::uint8_t*>(pc.data), pc.data_bytes, data_seed, stream);
        kernels::fill_uniform_f32(reinterpret_cast<float*>(pc.scales), pc.scale_bytes / 4, scale_seed, s0, 0.1f * s0,
                                  stream);
      } else if (pc.storage.scale == kernels::ScaleType::E8M0) {
        // MXFP4: uniform e2m1 codes (E[v^2] = 8.5625) under the power of two nearest the variance's scale.
        const int exponent = int(std::lround(std::log2(std::sqrt(1.0 / (8.5625 * in)))));
        kernels::fill_random_int4(reinterpret_cast<std::uint32_t*>(pc.data), pc.data_bytes / 4, data_seed, stream);
        LT_CUDA_CHECK(cudaMemsetAsync(pc.scales, 127 + exponent, std::size_t(pc.scale_bytes), stream));
      } else {
        const float s0 = float(std::sqrt(1.0 / (kInt4Square * in)));
        kernels::fill_random_int4(reinterpret_cast<std::uint32_t*>(pc.data), pc.data_bytes / 4, data_seed, stream);
        LT_CHECK(pc.storage.scale != kernels::ScaleType::F16, "cuda backend: random INT4 weights take bf16 or float32 "
                 "scales");
        if (pc.storage.scale == kernels::ScaleType::BF16)
          kernels::fill_uniform_bf16(reinterpret_cast<bf16*>(pc.scales), pc.scale_bytes / 2, scale_seed, s0,
                                     0.1f * s0, stream);
        else
          kernels::fill_uniform_f32(reinterpret_cast<float*>(pc.scales), pc.scale_bytes / 4, scale_seed, s0,
                                    0.1f * s0, stream);
      }
    }
  }
  return w;
}

}  // namespace layertap::cuda
