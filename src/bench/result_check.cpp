#include "bench/result_check.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <thread>

#include "bench/model_catalog.hpp"
#include "bench/projection.hpp"
#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "core/state_compare.hpp"
#include "core/text.hpp"
#include "model/rank_layout.hpp"

namespace layertap {

namespace {

bool finite_bf16(std::uint16_t b) { return (b & 0x7f80u) != 0x7f80u; }  // exponent not all ones

std::string hex16(std::uint16_t v) {
  static const char digits[] = "0123456789abcdef";
  std::string s = "0x";
  for (int shift = 12; shift >= 0; shift -= 4) s += digits[(v >> shift) & 0xf];
  return s;
}

}  // namespace

void check_captured_states(const std::vector<std::vector<std::byte>>& first,
                           const std::vector<std::vector<std::byte>>& second, const std::vector<std::string>& points,
                           std::int64_t T, std::int64_t hidden, const std::string& what) {
  const std::size_t elems = std::size_t(T) * std::size_t(hidden);
  for (const auto* states : {&first, &second})
    LT_CHECK(states->size() == points.size(), "bench: ", what, ": a captured forward returned ", states->size(),
             " states, expected ", points.size());
  for (std::size_t p = 0; p < points.size(); ++p) {
    for (const auto* states : {&first, &second})
      LT_CHECK((*states)[p].size() == elems * sizeof(std::uint16_t), "bench: ", what, ": capture point ", points[p],
               " holds ", (*states)[p].size(), " bytes, expected (", T, ", ", hidden, ") bf16 = ",
               elems * sizeof(std::uint16_t));
    // bf16 has no padding bits: equal bits are equal values, and NaN payloads count as different.
    const auto* a = reinterpret_cast<const std::uint16_t*>(first[p].data());
    const auto* b = reinterpret_cast<const std::uint16_t*>(second[p].data());
    std::size_t bad = 0, first_bad = 0, differ = 0, first_differ = 0;
    for (std::size_t i = 0; i < elems; ++i) {
      if (!finite_bf16(a[i]) && bad++ == 0) first_bad = i;
      if (a[i] != b[i] && differ++ == 0) first_differ = i;
    }
    const auto at = [&](std::size_t i) {
      return cat("token ", i / std::size_t(hidden), ", element ", i % std::size_t(hidden));
    };
    LT_CHECK(bad == 0, "bench: ", what, ": capture point ", points[p], " holds ", bad, " NaN or Inf value(s) of ",
             elems, " (first at ", at(first_bad), ": ", hex16(a[first_bad]), ")");
    LT_CHECK(differ == 0, "bench: ", what, ": two captured forwards of the same batch differ at capture point ",
             points[p], " in ", differ, " of ", elems, " values (first at ", at(first_differ), ": ",
             hex16(a[first_differ]), " then ", hex16(b[first_differ]), ")");
  }
}

std::string check_forward(cuda::CudaBackend& backend, const PackedBatch& batch, const CapturePlan& plan,
                          const std::string& what) {
  const std::vector<std::vector<std::byte>> first = backend.forward(batch, plan, DType::BF16);
  const std::vector<std::vector<std::byte>> second = backend.forward(batch, plan, DType::BF16);
  std::vector<std::string> points;
  // Only the group's writer (TP rank 0) returns states.
  if (backend.shape().tp_rank == 0)
    for (const CapturePoint& p : plan.points) points.push_back(p.spec);
  check_captured_states(first, second, points, batch.num_tokens(), backend.shape().hidden, what);
  if (points.empty()) return "not the writer: no states returned (nothing to check)";
  return cat(points.size(), " points of (", batch.num_tokens(), ", ", backend.shape().hidden,
             ") bf16 finite, bitwise equal in two forwards");
}

namespace {

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1e", v);
  return buf;
}

// splitmix64: each value a pure function of (key, index), so a large tensor fills on many threads.
std::uint64_t mix(std::uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Seeded random tensors, one stream per tensor name (FNV-1a of the name, mixed with the seed).
class RandomSlices {
 public:
  explicit RandomSlices(std::uint64_t seed) : seed_(seed) {}

  // n values offset + scale * u, u uniform in [-1, 1), each rounded to bf16.
  std::vector<float> values(const std::string& name, std::int64_t n, float offset, float scale) const {
    std::uint64_t key = 0xcbf29ce484222325ull;
    for (const char ch : name) key = (key ^ std::uint8_t(ch)) * 0x100000001b3ull;
    key = mix(key ^ mix(seed_));
    std::vector<float> v(static_cast<std::size_t>(n));
    const auto fill = [&](std::int64_t from, std::int64_t to) {
      for (std::int64_t i = from; i < to; ++i) {
        const float u = float(double(mix(key + std::uint64_t(i)) >> 11) * 0x1p-52 - 1.0);
        v[std::size_t(i)] = bf16_to_float(float_to_bf16(offset + scale * u));
      }
    };
    // Large tensors (a routed expert of Kimi-K2.5: 44M values) on every core.
    const std::int64_t threads = n < (std::int64_t(1) << 22) ? 1 : std::max(1u, std::thread::hardware_concurrency());
    std::vector<std::thread> pool;
    for (std::int64_t t = 1; t < threads; ++t) pool.emplace_back(fill, n * t / threads, n * (t + 1) / threads);
    fill(0, n / threads);
    for (std::thread& th : pool) th.join();
    return v;
  }

  // map_layer's mapper (model/layer_parts.hpp) from Slices to HostTensors.
  Linear linear(const LinearSlice& s) const {
    Linear l;
    l.out = s.rows();
    l.in = s.cols();
    l.w = values(s.module, l.out * l.in, 0.0f, std::sqrt(3.0f / float(l.in)));  // variance 1 / in
    if (s.bias) l.b = values(s.module + ".bias", s.bias_values(), 0.0f, 0.1f);
    return l;
  }
  Linear router(const LinearSlice& s) const { return linear(s); }
  // Norm weights (and GPT-OSS's sink logits) 1 +- 0.1; DeepSeek's correction bias, added to
  // sigmoid scores in [0, 1], +-0.01.
  std::vector<float> vector(const VectorSlice& v) const {
    return v.tensor.ends_with(".e_score_correction_bias") ? values(v.tensor, v.size, 0.0f, 0.01f)
                                                            : values(v.tensor, v.size, 1.0f, 0.1f);
  }
  MlpWeights mlp(const MlpSlices& m) const {
    if (!interleaved(m)) return map_mlp<HostTensors>(m, *this);
    // GPT-OSS's interleaved gate/up as the host holds it: two Linears of half its rows each.
    LinearSlice gate = m.gate, up = m.gate;
    gate.win.rows = up.win.rows = m.gate.win.rows / 2;
    up.module += "/up";  // a random stream of its own
    return {linear(gate), linear(up), linear(m.down)};
  }

 private:
  std::uint64_t seed_;
};

// The CPU side of a rank's share whose all-reduces are not run (as ModelledAllReduce on the GPU).
class RankShareComm final : public TpComm {
 public:
  explicit RankShareComm(int size) : size_(size) {}
  int rank() const override { return 0; }
  int size() const override { return size_; }
  void all_reduce_sum(float*, std::size_t) override {}

 private:
  int size_;
};

// Every layer's input, the last layer's output, then final: ids 0..L+1.
CapturePlan every_point(std::int64_t L) {
  std::string request;
  for (std::int64_t k = 0; k <= L; ++k) request += cat(k, ",");
  return resolve_capture(request + "final", L);
}

// k distinct experts of E for each of n tokens, drawn as a router with logits `skew` (zeros when
// empty) plus Gumbel noise would choose them (top-k); weight 1 / k each. (n, k) row-major.
void draw_routing(std::int64_t n, std::int64_t E, std::int64_t k, const std::vector<float>& skew, std::uint64_t seed,
                  std::vector<std::int32_t>& experts, std::vector<float>& weights) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> u(1e-12, 1.0);
  std::vector<double> key(static_cast<std::size_t>(E));
  std::vector<std::int32_t> order(static_cast<std::size_t>(E));
  for (std::int64_t t = 0; t < n; ++t) {
    for (std::int64_t e = 0; e < E; ++e)
      key[std::size_t(e)] = (skew.empty() ? 0.0 : double(skew[std::size_t(e)])) - std::log(-std::log(u(rng)));
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](std::int32_t a, std::int32_t b) { return key[std::size_t(a)] > key[std::size_t(b)]; });
    experts.insert(experts.end(), order.begin(), order.begin() + k);
    weights.insert(weights.end(), std::size_t(k), 1.0f / float(k));
  }
}

}  // namespace

ModelConfig reference_config(const std::string& model) {
  const ModelConfig full = synthetic_model_config(model);
  std::int64_t layers = 2;
  for (std::int64_t i = 0; i < full.num_layers; ++i)
    if (full.is_moe_layer(i)) {
      layers = std::max<std::int64_t>(2, i + 1);
      break;
    }
  ModelConfig c = synthetic_model_config(model, layers);
  c.vocab_size = std::min(c.vocab_size, kReferenceVocab);
  c.quant = QuantConfig{};
  return c;
}

ModelWeights reference_weights(const ModelConfig& c, const TpShard& shard, std::uint64_t seed) {
  check_tp_counts(c, shard);
  const RandomSlices random(seed);
  const ModelSlices top = model_slices(c);
  ModelWeights m;
  m.embed = random.values(top.embed, c.vocab_size * c.hidden_size, 0.0f, 1.0f);
  m.final_norm = random.vector(top.final_norm);
  m.layers.resize(std::size_t(c.num_layers));
  for (std::int64_t i = 0; i < c.num_layers; ++i) {
    m.layers[std::size_t(i)] = map_layer<HostTensors>(layer_slices(c, shard, i), random);
  }
  return m;
}

ReferenceCheck::ReferenceCheck(const ModelConfig& c, int tp, ModelWeights weights, cuda::CudaBackendOptions options,
                               const std::function<void(ModelWeights&)>& cpu_change)
    : config_(c), plan_(every_point(c.num_layers)), gpu_comm_(0, tp), cpu_comm_(std::make_unique<RankShareComm>(tp)) {
  options.max_capture_points = std::int64_t(plan_.points.size());
  options.probe = &probe_;
  options.profile_layers = false;
  gpu_ = std::make_unique<cuda::CudaBackend>(c, weights, gpu_comm_, options);
  if (cpu_change) cpu_change(weights);
  cpu_ = std::make_unique<CpuBackend>(c, std::move(weights), *cpu_comm_);
}

ReferenceError ReferenceCheck::compare(const PackedBatch& batch, std::int64_t slice,
                                       const std::vector<float>& routing_skew, std::uint64_t seed) {
  const std::int64_t T = batch.num_tokens(), H = config_.hidden_size, L = config_.num_layers;
  const std::int64_t S = batch.num_samples();
  LT_CHECK(S > 0 && slice >= 1, "bench: the reference check needs a batch and a slice of at least 1 token");
  // (first row in the batch, tokens): the first sample's first `slice` tokens, and the last's.
  std::vector<std::pair<std::int64_t, std::int64_t>> parts;
  for (const std::int64_t s : S > 1 ? std::vector<std::int64_t>{0, S - 1} : std::vector<std::int64_t>{0}) {
    const std::int64_t begin = batch.offsets[std::size_t(s)], end = batch.offsets[std::size_t(s) + 1];
    parts.emplace_back(begin, std::min(slice, end - begin));
  }
  PackedBatch head;  // the parts as samples of their own
  head.offsets = {0};
  for (const auto& [begin, n] : parts) {
    head.tokens.insert(head.tokens.end(), batch.tokens.begin() + begin, batch.tokens.begin() + begin + n);
    head.offsets.push_back(head.num_tokens());
  }
  const std::int64_t R = head.num_tokens();
  const std::vector<std::vector<std::byte>> want = cpu_->forward(head, plan_, DType::F32);

  probe_.forced_experts.assign(std::size_t(L), {});
  probe_.forced_weights.assign(std::size_t(L), {});
  if (config_.moe) {
    const std::int64_t E = config_.moe->num_experts, k = config_.moe->experts_per_token;
    std::vector<std::int32_t> drawn_experts;
    std::vector<float> drawn_weights;
    draw_routing(T, E, k, routing_skew, seed, drawn_experts, drawn_weights);
    for (std::int64_t i = 0; i < L; ++i) {
      if (!config_.is_moe_layer(i)) continue;
      const cpu::Routing& r = cpu_->routing()[std::size_t(i)];
      std::vector<std::int32_t>& e = probe_.forced_experts[std::size_t(i)] = drawn_experts;
      std::vector<float>& w = probe_.forced_weights[std::size_t(i)] = drawn_weights;
      std::int64_t row = 0;  // in `head`
      for (const auto& [begin, n] : parts) {
        std::copy_n(r.experts.begin() + row * k, n * k, e.begin() + begin * k);
        std::copy_n(r.weights.begin() + row * k, n * k, w.begin() + begin * k);
        row += n;
      }
    }
  }
  const std::vector<std::vector<std::byte>> got = gpu_->forward(batch, plan_, DType::BF16);
  probe_.forced_experts.clear();
  probe_.forced_weights.clear();
  LT_CHECK(got.size() == plan_.points.size() && want.size() == plan_.points.size(), "bench: the reference check's "
           "forwards returned ", got.size(), " and ", want.size(), " states for ", plan_.points.size(), " points");

  ReferenceError worst;
  worst.tokens = R;
  worst.samples = std::int64_t(parts.size());
  double worst_ratio = -1;  // error / bound; NaN once a point's error is NaN
  std::vector<float> rows(std::size_t(R * H));  // the GPU's rows of the parts, in `head`'s order
  for (std::size_t p = 0; p < plan_.points.size(); ++p) {
    LT_CHECK(got[p].size() == std::size_t(T * H) * 2 && want[p].size() == std::size_t(R * H) * 4,
             "bench: the reference check's state at point ", plan_.points[p].spec, " has the wrong size");
    const auto* bits = reinterpret_cast<const std::uint16_t*>(got[p].data());
    for (std::int64_t i = 0; i < T * H; ++i) worst.nonfinite += (bits[i] & 0x7f80u) == 0x7f80u;
    std::size_t at = 0;
    for (const auto& [begin, n] : parts)
      for (std::int64_t i = begin * H; i < (begin + n) * H; ++i) rows[at++] = bf16_to_float(bits[i]);
    const double error = relative_frobenius(rows.data(), H, reinterpret_cast<const float*>(want[p].data()), R, H);
    // The embedding output is one bf16 rounding of the float32 row; the later points carry the
    // bf16 forward's roundings (docs/GPU.md, "Tolerances").
    const double bound = plan_.points[p].id == 0 ? 1.0 / 256.0 + 1e-7 : kBf16ForwardBound;
    if (!std::isnan(worst_ratio) && !(error / bound <= worst_ratio)) {
      worst_ratio = error / bound;
      worst.error = error;
      worst.bound = bound;
      worst.point = plan_.points[p].spec;
    }
  }
  return worst;
}

std::string ReferenceChecks::error_text(const std::string& routing, std::int64_t T) const {
  const auto it = by_config.find({routing, T});
  return it == by_config.end() ? "-" : sci(it->second.error);
}

ReferenceChecks run_reference_checks(const BenchOptions& o, const cuda::CudaBackendOptions& bo, std::ostream& out,
                                     const std::function<void(ModelWeights&)>& cpu_change) {
  ReferenceChecks checks;
  if (o.check_tokens == 0) {
    out << "reference check: none (--check-tokens 0): the figures below are not checked against the CPU backend\n\n";
    return checks;
  }
  const ModelConfig full = synthetic_model_config(o.model);
  const ModelConfig c = reference_config(o.model);
  const TpShard shard{0, o.tp_shard, parse_moe_split(o.moe_split)};
  std::int64_t moe_layers = 0;
  for (std::int64_t i = 0; i < c.num_layers; ++i) moe_layers += c.is_moe_layer(i);
  const std::string layers = cat(c.num_layers, " layers", c.moe ? cat(" (", c.num_layers - moe_layers, " dense, ",
                                                                      moe_layers, " MoE)") : std::string());
  // float32 weights, and while they are uploaded their bf16 image: 1.5 times the float32 bytes.
  const std::int64_t need = host_weight_bytes(c, shard) / 2 * 3, host = host_memory_bytes();
  LT_CHECK(need <= host / 4 * 3, "bench: the reference check of ", o.model, " (rank 0 of ", o.tp_shard, ", ", layers,
           ") needs ", human_bytes(need), " of host memory for its weights, this host has ", human_bytes(host),
           "; raise --tp-shard, or time without the check (--check-tokens 0)");
  const auto t0 = BenchClock::now();
  ReferenceCheck check(c, o.tp_shard, reference_weights(c, shard, o.seed), bo, cpu_change);
  const cuda::LocalShape& s = check.gpu().shape();
  out << "reference model: " << o.model << "'s widths, " << layers << " of its " << full.num_layers << ", vocab "
      << c.vocab_size << (c.vocab_size < full.vocab_size ? cat(" of ", full.vocab_size, " (token ids mod ",
                                                               c.vocab_size, ")") : std::string())
      << ", " << (o.tp_shard > 1 ? cat("rank 0's share of ", o.tp_shard) : std::string("one GPU"));
  if (c.moe) out << " (" << s.local_experts << " experts of " << s.expert_inter << ")";
  if (o.tp_rank != 0) out << ", the shapes of the timed rank " << o.tp_rank;
  if (o.tp_shard > 1) out << ", without its all-reduces on both backends";
  out << ", " << cuda::attention_kernel_name(check.gpu().attention())
      << " attention; seeded bf16 weights uploaded from the host";
  if (full.quant.method != QuantConfig::Method::None)
    out << "; the timed model's weights stay packed, " << full.quant.describe() << ", and are expanded on the "
        << "GPU, a path this check does not run (gpu.cuda_backend's packed_matches_bf16 holds it to this one)";
  out << "; the GPU runs each configuration's whole batch, the CPU backend (float32) the first "
      << std::min(o.check_tokens, o.sample_tokens) << " tokens of its first and its last sample"
      << (c.moe ? ", MoE routing forced to the CPU's there" : "") << "; built in "
      << fixed(std::chrono::duration<double>(BenchClock::now() - t0).count(), 2) << " s\n";

  const std::vector<std::string> routings = c.moe ? o.routing : std::vector<std::string>{""};
  for (const std::string& routing : routings) {
    const std::vector<float> skew =
        routing == "zipf" ? zipf_logit_offsets(c.moe->num_experts, o.zipf_s) : std::vector<float>{};
    for (const std::int64_t T : o.tokens) {
      // The timed configuration's batch (run_bench.cpp draws it so), its ids within the vocabulary.
      PackedBatch batch = random_batch(T, o.sample_tokens, full.vocab_size, o.seed + std::uint64_t(T));
      for (std::int32_t& id : batch.tokens) id %= std::int32_t(c.vocab_size);
      const auto t1 = BenchClock::now();
      const ReferenceError e = check.compare(batch, o.check_tokens, skew, o.seed + std::uint64_t(T));
      const std::string what =
          cat("T=", T, " (", o.model, routing.empty() ? std::string() : cat(", ", routing), ")");
      out << "reference check " << what << ": " << layers << " x " << e.tokens << " tokens ("
          << (e.samples > 1 ? "first and last samples" : "one sample") << ") against the CPU backend, "
          << "worst rel. error " << sci(e.error) << " at point " << e.point << " (bound " << sci(e.bound) << ")"
          << (e.nonfinite > 0 ? cat(", ", e.nonfinite, " NaN or Inf values") : std::string()) << ", "
          << fixed(std::chrono::duration<double>(BenchClock::now() - t1).count(), 2) << " s: "
          << (e.ok() ? "ok" : "FAILED") << "\n";
      LT_CHECK(e.ok(), "bench: synthetic ", o.model, " ", what, ": the CUDA backend is ", sci(e.error),
               " (relative) off the CPU backend at capture point ", e.point, " of its reference model, over the bound ",
               sci(e.bound), e.nonfinite > 0 ? cat(", and returned ", e.nonfinite, " NaN or Inf values") : std::string());
      checks.by_config[{routing, T}] = e;
    }
  }
  out << "\n";
  return checks;
}

}  // namespace layertap
