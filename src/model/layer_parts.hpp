// The parts of one decoder layer, written once for every stage that holds them: the rank layout
// (T = Slices: where each tensor of this rank comes from, model/rank_layout.hpp) and the host's
// float32 weights (T = HostTensors, model/weights.hpp). T names what a stage keeps for a Linear
// (T::Linear) and for a 1-D tensor (T::Vector). A part a family adds is a field here, and every
// walk (for_each_linear, for_each_vector, map_layer) sees it.
#pragma once
#include <cstdint>
#include <optional>
#include <variant>
#include <vector>

namespace layertap {

// Grouped-query attention. Fewer kv heads than ranks: each kv head is replicated on
// size / num_kv_heads ranks (as Megatron and vLLM do).
template <class T>
struct GqaParts {
  std::int64_t heads = 0, kv_heads = 0;  // this rank's
  std::int64_t first_kv_head = 0;        // of the model's kv heads
  typename T::Linear q, k, v, o;         // q: [heads*hd, H], k/v: [kv_heads*hd, H], o: [H, heads*hd]
  std::optional<typename T::Vector> q_norm, k_norm;  // [hd] (Qwen3, GLM-4.5, Gemma-3)
  std::optional<typename T::Vector> sinks;           // [heads] of self_attn.sinks [num_heads] (GPT-OSS)
};

// Multi-head latent attention: heads split (q_b or q_proj and kv_b by head rows, o_proj by head
// columns); the latent projections and their norms replicated.
template <class T>
struct MlaParts {
  std::int64_t heads = 0;                        // this rank's
  std::optional<typename T::Linear> q;           // q_proj [heads*qk, H] when q_lora_rank is 0
  std::optional<typename T::Linear> q_a;         // [q_lora, H], replicated
  std::optional<typename T::Vector> q_a_norm;    // [q_lora]
  std::optional<typename T::Linear> q_b;         // [heads*qk, q_lora]
  typename T::Linear kv_a;                       // kv_a_proj_with_mqa [kv_lora + rope, H], replicated
  typename T::Vector kv_a_norm;                  // [kv_lora]
  typename T::Linear kv_b;                       // [heads*(nope+v), kv_lora]
  typename T::Linear o;                          // [H, heads*v], row-parallel
};

// A gated MLP: gate and up column-parallel, down row-parallel (or all three whole). In the rank
// layout, GPT-OSS's experts store gate and up as one Linear [2I, H] with gate rows at even and up
// rows at odd indices: `gate` is then that Linear's window (2 rows per intermediate index of the
// slice) and `up` is empty (Slices::interleaved); the host splits it into the two.
template <class T>
struct MlpParts {
  typename T::Linear gate, up, down;
};

// A MoE block: the router replicated, this rank's routed experts (whole, or every expert's
// intermediate slice) and the shared experts as one intermediate-sliced MLP.
template <class T>
struct MoeParts {
  typename T::Linear router;                     // [experts, H] (+ bias, GPT-OSS), float32 logits as transformers
  std::optional<typename T::Vector> score_bias;  // e_score_correction_bias [experts]
  std::int64_t experts = 0;                      // the model's routed experts
  std::int64_t first_expert = 0;                 // routed[i] is expert first_expert + i
  std::vector<MlpParts<T>> routed;
  std::optional<MlpParts<T>> shared;
};

template <class T>
struct LayerParts {
  typename T::Vector input_norm, pre_ffn_norm;  // [H] the attention's and the FFN's input norms
  // [H] with sandwich norms (Gemma-3): the attention's and the FFN's outputs normed before their
  // residual adds.
  std::optional<typename T::Vector> post_attn_norm, post_ffn_norm;
  std::variant<GqaParts<T>, MlaParts<T>> attn;
  std::variant<MlpParts<T>, MoeParts<T>> ffn;

  // Every Linear of the layer but the MoE router, in checkpoint order (attention, then the MLP or
  // the experts). An empty `up` (interleaved, Slices only) is skipped.
  template <class F>
  void for_each_linear(F&& f) const;
  // Every 1-D weight of the layer but the MoE router's (the layer's, q/k or latent norms, sinks).
  template <class F>
  void for_each_vector(F&& f) const;
};

// `from` with every part mapped to stage To by `m`, which provides To::Linear linear(const
// From::Linear&), To::Vector vector(const From::Vector&), To::Linear router(const From::Linear&)
// and MlpParts<To> mlp(const MlpParts<From>&) (map_mlp maps its three Linears).
template <class To, class From, class M>
LayerParts<To> map_layer(const LayerParts<From>& from, const M& m);

template <class To, class From, class M>
MlpParts<To> map_mlp(const MlpParts<From>& from, const M& m) {
  return {m.linear(from.gate), m.linear(from.up), m.linear(from.down)};
}

// ---- implementation

namespace layer_parts_detail {
template <class L>
bool empty_linear(const L& l) {
  if constexpr (requires { l.module; })
    return l.module.empty();
  else
    return false;
}
template <class R, class X, class F>
std::optional<R> map_optional(const std::optional<X>& x, F&& f) {
  return x ? std::optional<R>(f(*x)) : std::nullopt;
}
}  // namespace layer_parts_detail

template <class T>
template <class F>
void LayerParts<T>::for_each_linear(F&& f) const {
  using layer_parts_detail::empty_linear;
  if (const auto* g = std::get_if<GqaParts<T>>(&attn)) {
    for (const auto* l : {&g->q, &g->k, &g->v, &g->o}) f(*l);
  } else {
    const MlaParts<T>& m = std::get<MlaParts<T>>(attn);
    for (const auto* l : {&m.q_a, &m.q_b, &m.q})
      if (*l) f(**l);
    for (const auto* l : {&m.kv_a, &m.kv_b, &m.o}) f(*l);
  }
  const auto mlp = [&](const MlpParts<T>& m) {
    f(m.gate);
    if (!empty_linear(m.up)) f(m.up);
    f(m.down);
  };
  if (const auto* d = std::get_if<MlpParts<T>>(&ffn)) {
    mlp(*d);
  } else {
    const MoeParts<T>& e = std::get<MoeParts<T>>(ffn);
    for (const MlpParts<T>& x : e.routed) mlp(x);
    if (e.shared) mlp(*e.shared);
  }
}

template <class T>
template <class F>
void LayerParts<T>::for_each_vector(F&& f) const {
  for (const auto* v : {&input_norm, &pre_ffn_norm}) f(*v);
  for (const auto* v : {&post_attn_norm, &post_ffn_norm})
    if (*v) f(**v);
  if (const auto* g = std::get_if<GqaParts<T>>(&attn)) {
    for (const auto* v : {&g->q_norm, &g->k_norm, &g->sinks})
      if (*v) f(**v);
  } else {
    const MlaParts<T>& m = std::get<MlaParts<T>>(attn);
    if (m.q_a_norm) f(*m.q_a_norm);
    f(m.kv_a_norm);
  }
}

template <class To, class From, class M>
LayerParts<To> map_layer(const LayerParts<From>& from, const M& m) {
  using layer_parts_detail::map_optional;
  using L = typename To::Linear;
  using V = typename To::Vector;
  const auto linear = [&](const typename From::Linear& l) { return m.linear(l); };
  const auto vector = [&](const typename From::Vector& v) { return m.vector(v); };
  LayerParts<To> to;
  to.input_norm = m.vector(from.input_norm);
  to.pre_ffn_norm = m.vector(from.pre_ffn_norm);
  to.post_attn_norm = map_optional<V>(from.post_attn_norm, vector);
  to.post_ffn_norm = map_optional<V>(from.post_ffn_norm, vector);
  if (const auto* g = std::get_if<GqaParts<From>>(&from.attn)) {
    GqaParts<To> a;
    a.heads = g->heads;
    a.kv_heads = g->kv_heads;
    a.first_kv_head = g->first_kv_head;
    a.q = m.linear(g->q);
    a.k = m.linear(g->k);
    a.v = m.linear(g->v);
    a.o = m.linear(g->o);
    a.q_norm = map_optional<V>(g->q_norm, vector);
    a.k_norm = map_optional<V>(g->k_norm, vector);
    a.sinks = map_optional<V>(g->sinks, vector);
    to.attn = std::move(a);
  } else {
    const MlaParts<From>& s = std::get<MlaParts<From>>(from.attn);
    MlaParts<To> a;
    a.heads = s.heads;
    a.q = map_optional<L>(s.q, linear);
    a.q_a = map_optional<L>(s.q_a, linear);
    a.q_a_norm = map_optional<V>(s.q_a_norm, vector);
    a.q_b = map_optional<L>(s.q_b, linear);
    a.kv_a = m.linear(s.kv_a);
    a.kv_a_norm = m.vector(s.kv_a_norm);
    a.kv_b = m.linear(s.kv_b);
    a.o = m.linear(s.o);
    to.attn = std::move(a);
  }
  if (const auto* d = std::get_if<MlpParts<From>>(&from.ffn)) {
    to.ffn = m.mlp(*d);
  } else {
    const MoeParts<From>& s = std::get<MoeParts<From>>(from.ffn);
    MoeParts<To> e;
    e.router = m.router(s.router);
    e.score_bias = map_optional<V>(s.score_bias, vector);
    e.experts = s.experts;
    e.first_expert = s.first_expert;
    e.routed.reserve(s.routed.size());
    for (const MlpParts<From>& x : s.routed) e.routed.push_back(m.mlp(x));
    if (s.shared) e.shared = m.mlp(*s.shared);
    to.ffn = std::move(e);
  }
  return to;
}

}  // namespace layertap
