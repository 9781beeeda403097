#include "backend/cuda/device_weights.hpp"

#include <cmath>
#include <string>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/random_fill.cuh"

namespace layertap::cuda {

void DeviceWeights::place(Arena& arena, const LocalShape& s) {
  using bf16 = __nv_bfloat16;
  const std::int64_t H = s.hidden, hd = s.head_dim, I = s.inter;
  embed = arena.take<bf16>(s.vocab * H);
  final_norm = arena.take<bf16>(H);
  layers.assign(std::size_t(s.layers), DeviceLayer{});
  for (DeviceLayer& l : layers) {
    l.input_norm = arena.take<bf16>(H);
    l.post_attn_norm = arena.take<bf16>(H);
    if (s.qk_norm) {
      l.q_norm = arena.take<bf16>(hd);
      l.k_norm = arena.take<bf16>(hd);
    }
    l.qkv = {arena.take<bf16>(s.qkv_dim() * H), s.qkv_bias ? arena.take<bf16>(s.qkv_dim()) : nullptr, s.qkv_dim(), H};
    l.o = {arena.take<bf16>(H * s.q_dim()), s.o_bias ? arena.take<bf16>(H) : nullptr, H, s.q_dim()};
    l.gate_up = {arena.take<bf16>(2 * I * H), s.mlp_bias ? arena.take<bf16>(2 * I) : nullptr, 2 * I, H};
    l.down = {arena.take<bf16>(H * I), s.down_bias ? arena.take<bf16>(H) : nullptr, H, I};
  }
}

std::size_t DeviceWeights::bytes(const LocalShape& shape) {
  Arena counter;
  DeviceWeights w;
  w.place(counter, shape);
  return counter.used();
}

DeviceWeights DeviceWeights::allocate(const LocalShape& shape) {
  DeviceWeights w;
  w.memory_ = DeviceMemory(bytes(shape));
  Arena arena(w.memory_.data(), w.memory_.bytes());
  w.place(arena, shape);
  return w;
}

namespace {

// Host float32 tensors converted to bf16 and concatenated, then copied to `dst` in one go.
class Upload {
 public:
  Upload& add(const std::vector<float>& v, std::int64_t expected, const std::string& name) {
    LT_CHECK(std::int64_t(v.size()) == expected, "cuda backend: host tensor ", name, " holds ", v.size(),
             " values, this rank's shape needs ", expected);
    bits_.reserve(bits_.size() + v.size());
    for (const float f : v) bits_.push_back(float_to_bf16(f));
    return *this;
  }
  void to(__nv_bfloat16* dst) const {
    if (bits_.empty()) return;
    LT_CUDA_CHECK(cudaMemcpy(dst, bits_.data(), bits_.size() * sizeof(std::uint16_t), cudaMemcpyHostToDevice));
  }

 private:
  std::vector<std::uint16_t> bits_;
};

void check_bias(const Linear& l, bool expected, const std::string& name) {
  LT_CHECK(l.b.empty() != expected, "cuda backend: ", name, expected ? " lacks the bias" : " has an unexpected bias",
           " this rank's shape implies");
}

}  // namespace

DeviceWeights DeviceWeights::upload(const LocalShape& s, const ModelWeights& host) {
  LT_CHECK(std::int64_t(host.layers.size()) == s.layers, "cuda backend: host weights hold ", host.layers.size(),
           " layers, the config ", s.layers);
  DeviceWeights w = allocate(s);
  const std::int64_t H = s.hidden, hd = s.head_dim, I = s.inter;
  Upload().add(host.embed, s.vocab * H, "embed_tokens").to(w.embed);
  Upload().add(host.final_norm, H, "norm").to(w.final_norm);
  for (std::size_t i = 0; i < host.layers.size(); ++i) {
    const LayerWeights& hl = host.layers[i];
    const DeviceLayer& dl = w.layers[i];
    const std::string p = cat("layers.", i, ".");
    const AttentionWeights& a = std::get<AttentionWeights>(hl.attn);
    const MlpWeights& mlp = std::get<MlpWeights>(hl.ffn);
    LT_CHECK(a.heads == s.heads && a.kv_heads == s.kv_heads, "cuda backend: ", p, "self_attn holds ", a.heads,
             " query and ", a.kv_heads, " kv heads, this rank's shape ", s.heads, " and ", s.kv_heads);
    for (const Linear* l : {&a.q, &a.k, &a.v, &mlp.gate, &mlp.up})
      LT_CHECK(l->in == H, "cuda backend: ", p, " column-parallel weight has ", l->in, " inputs, hidden size ", H);
    LT_CHECK(a.o.out == H && mlp.down.out == H, "cuda backend: ", p, " o/down_proj must have ", H, " outputs");
    Upload().add(hl.input_norm, H, p + "input_layernorm").to(dl.input_norm);
    Upload().add(hl.post_attn_norm, H, p + "post_attention_layernorm").to(dl.post_attn_norm);
    if (s.qk_norm) {
      Upload().add(a.q_norm, hd, p + "self_attn.q_norm").to(dl.q_norm);
      Upload().add(a.k_norm, hd, p + "self_attn.k_norm").to(dl.k_norm);
    }
    Upload()
        .add(a.q.w, s.q_dim() * H, p + "self_attn.q_proj")
        .add(a.k.w, s.kv_heads * hd * H, p + "self_attn.k_proj")
        .add(a.v.w, s.kv_heads * hd * H, p + "self_attn.v_proj")
        .to(dl.qkv.w);
    check_bias(a.q, s.qkv_bias, p + "self_attn.q_proj");
    if (s.qkv_bias) {
      Upload()
          .add(a.q.b, s.q_dim(), p + "self_attn.q_proj.bias")
          .add(a.k.b, s.kv_heads * hd, p + "self_attn.k_proj.bias")
          .add(a.v.b, s.kv_heads * hd, p + "self_attn.v_proj.bias")
          .to(dl.qkv.b);
    }
    Upload().add(a.o.w, H * s.q_dim(), p + "self_attn.o_proj").to(dl.o.w);
    check_bias(a.o, s.o_bias, p + "self_attn.o_proj");
    if (s.o_bias) Upload().add(a.o.b, H, p + "self_attn.o_proj.bias").to(dl.o.b);
    Upload().add(mlp.gate.w, I * H, p + "mlp.gate_proj").add(mlp.up.w, I * H, p + "mlp.up_proj").to(dl.gate_up.w);
    check_bias(mlp.gate, s.mlp_bias, p + "mlp.gate_proj");
    if (s.mlp_bias) {
      Upload()
          .add(mlp.gate.b, I, p + "mlp.gate_proj.bias")
          .add(mlp.up.b, I, p + "mlp.up_proj.bias")
          .to(dl.gate_up.b);
    }
    Upload().add(mlp.down.w, H * I, p + "mlp.down_proj").to(dl.down.w);
    check_bias(mlp.down, s.down_bias, p + "mlp.down_proj");
    if (s.down_bias) Upload().add(mlp.down.b, H, p + "mlp.down_proj.bias").to(dl.down.b);
  }
  return w;
}

DeviceWeights DeviceWeights::random(const LocalShape& s, std::uint64_t seed, cudaStream_t stream) {
  DeviceWeights w = allocate(s);
  std::uint64_t tensor = 0;  // each tensor draws from its own stream of the hash
  const auto fill = [&](__nv_bfloat16* p, std::int64_t n, float offset, float scale) {
    if (p != nullptr) kernels::fill_uniform_bf16(p, n, seed * 0x100000001b3ull + tensor, offset, scale, stream);
    ++tensor;
  };
  // uniform(-a, a) has variance a^2 / 3: a = sqrt(3 / in) keeps a product's output variance.
  const auto linear = [&](const DeviceLinear& l) {
    fill(l.w, l.out * l.in, 0.0f, std::sqrt(3.0f / static_cast<float>(l.in)));
    fill(l.b, l.out, 0.0f, 0.1f);
  };
  const std::int64_t H = s.hidden, hd = s.head_dim;
  fill(w.embed, s.vocab * H, 0.0f, 1.0f);
  fill(w.final_norm, H, 1.0f, 0.1f);
  for (const DeviceLayer& l : w.layers) {
    fill(l.input_norm, H, 1.0f, 0.1f);
    fill(l.post_attn_norm, H, 1.0f, 0.1f);
    fill(l.q_norm, hd, 1.0f, 0.1f);
    fill(l.k_norm, hd, 1.0f, 0.1f);
    linear(l.qkv);
    linear(l.o);
    linear(l.gate_up);
    linear(l.down);
  }
  return w;
}

}  // namespace layertap::cuda
