// The host side of the CUDA path for MLA, MoE and packed weights, which runs (and must pass)
// without a GPU:
//   - the routing the router kernel runs (kernels/moe_routing.hpp, one warp per token) against
//     cpu::route, bit for bit on the host, ties included, for DeepSeek/Kimi grouped sigmoid and
//     Qwen3 softmax routers;
//   - the element decoders of the dequantization kernels (kernels/quant_element.hpp) against the
//     CPU decoders of src/model/quant_formats.cpp over every FP8 code and INT4 nibble and bf16, f16
//     and f32 scales, and every MXFP4 code and E8M0 scale (bit for bit after the bf16 rounding both
//     paths apply);
//   - every packed piece the device layout holds of the FP8 and INT4 fixtures, at TP 1 and 2 and
//     both MoE splits: the checkpoint bytes read_packed_linear gives, decoded as the kernels index
//     them, equal the CPU path (LinearReader) rounded to bf16;
//   - shapes, storage and memory of Kimi-K2.5 at --tp-shard 8, Qwen3-30B-A3B and DeepSeek-V3, the
//     fit message naming the dequantization scratch, the benchmark's options and projection.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cpu/moe.hpp"
#include "backend/route_params.hpp"
#include "host_check.hpp"
#include "backend/cuda/device_weights.hpp"
#include "backend/cuda/local_shape.hpp"
#include "backend/cuda/memory_plan.hpp"
#include "bench/model_catalog.hpp"
#include "bench/projection.hpp"
#include "bench/run_bench.hpp"
#include "cli/bench.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "kernels/moe_routing.hpp"
#include "kernels/quant_element.hpp"
#include "model/hf_config.hpp"
#include "model/linear_reader.hpp"
#include "model/packed_weights.hpp"
#include "model/quant_formats.hpp"
#include "model/safetensors.hpp"

namespace {

using namespace layertap;
namespace fs = std::filesystem;

using test::check;
using test::check_throws;

std::uint32_t bits(float f) {
  std::uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// ---------------------------------------------------------------------------------------------
// Routing

// T tokens of logits drawn from `levels` values (few levels: many ties), through an identity
// router so that cpu::route sees exactly these logits.
void routing_case(const std::string& name, const MoeConfig& m, int levels, std::uint64_t seed) {
  const std::int64_t E = m.num_experts, T = 64, k = m.experts_per_token;
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> level(0, levels - 1);
  std::normal_distribution<float> normal(0.0f, 1.5f);
  MoeWeights w;
  w.router.out = E;
  w.router.in = E;
  w.router.w.assign(std::size_t(E * E), 0.0f);
  for (std::int64_t e = 0; e < E; ++e) w.router.w[std::size_t(e * E + e)] = 1.0f;
  if (m.score_bias) {
    w.score_bias.emplace(std::size_t(E));
    for (float& b : *w.score_bias) b = levels > 0 ? 0.05f * float(level(rng) % 3) : 0.02f * normal(rng);
  }
  std::vector<float> h(std::size_t(T * E));
  for (float& x : h) x = levels > 0 ? 0.5f * float(level(rng)) - 1.0f : normal(rng);
  const cpu::Routing want = cpu::route(m, w, h.data(), T, E);
  const kernels::RouteParams p = route_params(m);
  std::int64_t expert_diff = 0, weight_diff = 0;
  std::vector<float> logits(static_cast<std::size_t>(E)), choice(static_cast<std::size_t>(E)),
      weights(static_cast<std::size_t>(k));
  std::vector<std::int32_t> experts(static_cast<std::size_t>(k));
  for (std::int64_t t = 0; t < T; ++t) {
    std::copy(h.begin() + t * E, h.begin() + (t + 1) * E, logits.begin());
    kernels::route_token(p, logits.data(), choice.data(), m.score_bias ? w.score_bias->data() : nullptr,
                         experts.data(), weights.data());
    for (std::int64_t j = 0; j < k; ++j) {
      expert_diff += experts[std::size_t(j)] != want.experts[std::size_t(t * k + j)];
      weight_diff += bits(weights[std::size_t(j)]) != bits(want.weights[std::size_t(t * k + j)]);
    }
  }
  check(expert_diff == 0 && weight_diff == 0,
        cat("routing ", name, ": ", T, " tokens, experts differ ", expert_diff, ", weights differ (bits) ", weight_diff));
}

void routing() {
  MoeConfig ds;  // DeepSeek-V3-like, small
  ds.routing = MoeConfig::Routing::SigmoidGroupedTopk;
  ds.num_experts = 16, ds.experts_per_token = 4, ds.n_group = 4, ds.topk_group = 2;
  ds.norm_topk_prob = true, ds.routed_scaling_factor = 2.5, ds.score_bias = true;
  routing_case("deepseek 16 experts, 4 groups (ties)", ds, 5, 1);
  routing_case("deepseek 16 experts, 4 groups", ds, 0, 2);
  MoeConfig v3 = ds;
  v3.num_experts = 256, v3.experts_per_token = 8, v3.n_group = 8, v3.topk_group = 4;
  routing_case("deepseek-v3 256 experts, 8 groups", v3, 0, 3);
  routing_case("deepseek-v3 256 experts, 8 groups (ties)", v3, 4, 4);
  MoeConfig kimi = ds;
  kimi.num_experts = 384, kimi.experts_per_token = 8, kimi.n_group = 1, kimi.topk_group = 1;
  kimi.routed_scaling_factor = 2.827;
  routing_case("kimi 384 experts", kimi, 0, 5);
  routing_case("kimi 384 experts (ties)", kimi, 3, 6);
  kimi.norm_topk_prob = false;
  routing_case("kimi 384 experts, no renormalisation", kimi, 0, 7);
  MoeConfig qwen;
  qwen.routing = MoeConfig::Routing::SoftmaxTopk;
  qwen.num_experts = 128, qwen.experts_per_token = 8, qwen.norm_topk_prob = true;
  routing_case("qwen3 128 experts softmax", qwen, 0, 8);
  routing_case("qwen3 128 experts softmax (ties)", qwen, 6, 9);
  qwen.norm_topk_prob = false;
  routing_case("qwen3 128 experts softmax, no renormalisation", qwen, 0, 10);
}

// ---------------------------------------------------------------------------------------------
// Element decoders

bool same_bf16(std::uint16_t got, float cpu) {
  if (std::isnan(cpu)) return (got & 0x7fffu) > 0x7f80u;
  return got == float_to_bf16(cpu);
}

void fp8_elements() {
  // All 256 codes x scales of every kind (normal, tiny: subnormal products, huge, powers of two).
  const std::vector<float> scales = {1.0f, 0.0123f, 3.7e-5f, 448.0f, 1e-30f, 0x1p-20f, 7.5e3f, 1.0f / 3.0f};
  std::int64_t diff = 0, n = 0;
  for (const float sc : scales) {
    std::vector<std::uint8_t> codes(256);
    for (int c = 0; c < 256; ++c) codes[std::size_t(c)] = std::uint8_t(c);
    std::vector<float> cpu(256);
    quant::dequantize_fp8_block(reinterpret_cast<const std::byte*>(codes.data()), reinterpret_cast<const std::byte*>(&sc),
                                16, 16, 16, 16, {0, 16, 0, 16}, cpu.data());
    for (int c = 0; c < 256; ++c, ++n) diff += !same_bf16(kernels::fp8_block_element(std::uint32_t(c), sc), cpu[std::size_t(c)]);
  }
  check(diff == 0, cat("fp8 block element: ", n, " (code, scale) pairs equal bf16(CPU decoder), ", diff, " differ"));
}

void int4_elements() {
  std::mt19937_64 rng(11);
  for (const DType st : {DType::BF16, DType::F16, DType::F32}) {
    const std::int64_t rows = 24, cols = 96, group = 32, groups = cols / group;
    std::vector<std::uint32_t> words(std::size_t(rows * cols / 8));
    for (auto& w : words) w = std::uint32_t(rng());
    // Scales over many magnitudes (f16 subnormals included), both signs.
    std::vector<std::uint16_t> s16(std::size_t(rows * groups));
    std::vector<float> s32(std::size_t(rows * groups));
    std::uniform_real_distribution<float> mant(0.5f, 1.0f);
    std::uniform_int_distribution<int> expo(-26, 12);
    for (std::size_t i = 0; i < s32.size(); ++i) {
      float v = std::ldexp(mant(rng), expo(rng)) * (rng() % 2 ? 1.0f : -1.0f);
      if (st == DType::BF16) v = bf16_to_float(float_to_bf16(v));
      if (st == DType::F16) v = fp16_to_float(float_to_fp16(v));
      s32[i] = v;
      s16[i] = st == DType::BF16 ? float_to_bf16(v) : float_to_fp16(v);
    }
    const std::byte* scales = st == DType::F32 ? reinterpret_cast<const std::byte*>(s32.data())
                                               : reinterpret_cast<const std::byte*>(s16.data());
    std::vector<float> cpu(std::size_t(rows * cols));
    quant::dequantize_int4_group(reinterpret_cast<const std::byte*>(words.data()), scales, st, rows, cols, group,
                                 {0, rows, 0, cols}, cpu.data());
    const kernels::ScaleType type = st == DType::BF16 ? kernels::ScaleType::BF16
                                    : st == DType::F16 ? kernels::ScaleType::F16
                                                       : kernels::ScaleType::F32;
    std::int64_t diff = 0;
    for (std::int64_t r = 0; r < rows; ++r)
      for (std::int64_t c = 0; c < cols; ++c) {
        const std::uint32_t nibble = (words[std::size_t(r * cols / 8 + c / 8)] >> (4 * (c % 8))) & 0xfu;
        const float s = kernels::scale_value(scales, r * groups + c / group, type);
        diff += !same_bf16(kernels::int4_group_element(nibble, s, type), cpu[std::size_t(r * cols + c)]);
      }
    check(diff == 0, cat("int4 group element, ", dtype_name(st), " scales: ", rows * cols,
                         " elements equal bf16(CPU decoder), ", diff, " differ"));
  }
}

void mxfp4_elements() {
  // Every E8M0 code (one row each) x every e2m1 code, in both nibble positions: row s's block holds
  // bytes j | (15 - j) << 4.
  const std::int64_t rows = 256, cols = 32;
  std::vector<std::uint8_t> blocks(std::size_t(rows * cols / 2)), scales(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i] = std::uint8_t((i % 16) | (15 - i % 16) << 4);
  for (std::size_t s = 0; s < scales.size(); ++s) scales[s] = std::uint8_t(s);
  std::vector<float> cpu(std::size_t(rows * cols));
  quant::dequantize_mxfp4(reinterpret_cast<const std::byte*>(blocks.data()),
                          reinterpret_cast<const std::byte*>(scales.data()), rows, cols, {0, rows, 0, cols},
                          cpu.data());
  std::int64_t diff = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::uint32_t nibble = (blocks[std::size_t(r * cols / 2 + c / 2)] >> (4 * (c % 2))) & 0xfu;
      const float s = kernels::scale_value(scales.data(), r, kernels::ScaleType::E8M0);
      const std::uint16_t got = kernels::int4_group_element(nibble, s, kernels::ScaleType::E8M0);
      diff += !same_bf16(got, cpu[std::size_t(r * cols + c)]);
    }
  check(diff == 0, cat("mxfp4 element (E8M0 scales): ", rows * cols, " (code, scale) pairs equal bf16(CPU decoder), ",
                       diff, " differ"));
  // The float32 values themselves, not only their bf16: the decoders agree bit for bit.
  std::int64_t diff32 = 0;
  for (std::int64_t r = 0; r < rows; ++r)
    for (std::int64_t c = 0; c < cols; ++c) {
      const std::uint32_t nibble = (blocks[std::size_t(r * cols / 2 + c / 2)] >> (4 * (c % 2))) & 0xfu;
      const float s = kernels::e8m0_value(scales[std::size_t(r)]);
      const float v = kernels::int4_value(nibble, s, kernels::ScaleType::E8M0);
      const float want = cpu[std::size_t(r * cols + c)];
      diff32 += std::isnan(want) ? !std::isnan(v) : bits(v) != bits(want);
    }
  check(diff32 == 0, cat("mxfp4 float32 values: ", rows * cols, " equal the CPU decoder's, ", diff32, " differ"));
}

// ---------------------------------------------------------------------------------------------
// Packed pieces of the fixtures

fs::path fixture(const std::string& name) { return fs::path(LAYERTAP_FIXTURES) / "models" / name; }

// The piece's bf16 values decoded from its checkpoint bytes as the kernels index them.
std::vector<std::uint16_t> decode_piece(const cuda::PackedPiece& pc, const PackedLinear& pl) {
  std::vector<std::uint16_t> out(std::size_t(pc.rows * pc.cols));
  if (pc.storage.kind == cuda::LinearStorage::Kind::Fp8Block) {
    const auto* codes = reinterpret_cast<const std::uint8_t*>(pl.data.data());
    const auto* scale = reinterpret_cast<const float*>(pl.scales.data());
    const std::int64_t scale_cols = (pc.col_phase + pc.cols + pc.block_cols - 1) / pc.block_cols;
    for (std::int64_t r = 0; r < pc.rows; ++r)
      for (std::int64_t c = 0; c < pc.cols; ++c)
        out[std::size_t(r * pc.cols + c)] = kernels::fp8_block_element(
            codes[r * pc.cols + c],
            scale[((r + pc.row_phase) / pc.block_rows) * scale_cols + (c + pc.col_phase) / pc.block_cols]);
  } else {
    const auto* words = reinterpret_cast<const std::uint32_t*>(pl.data.data());
    const std::int64_t row_words = (pc.cols + 7) / 8, scale_cols = (pc.cols + pc.group - 1) / pc.group;
    for (std::int64_t r = 0; r < pc.rows; ++r)
      for (std::int64_t c = 0; c < pc.cols; ++c) {
        const std::uint32_t nibble = (words[r * row_words + c / 8] >> (4 * (c % 8))) & 0xfu;
        const float s = kernels::scale_value(pl.scales.data(), r * scale_cols + c / pc.group, pc.storage.scale);
        out[std::size_t(r * pc.cols + c)] = kernels::int4_group_element(nibble, s, pc.storage.scale);
      }
  }
  return out;
}

void packed_fixture(const std::string& name, int tp, MoeSplit split) {
  const fs::path dir = fixture(name);
  const ModelConfig cfg = load_model_config((dir / "config.json").string());
  const TpShard shard{0, tp, split};
  try {
    check_tp_divisibility(cfg, shard);
  } catch (const Error&) {
    return;  // this layout does not divide the fixture
  }
  const Checkpoint ckpt(checkpoint_files(dir.string()));
  const LinearReader reader(ckpt, cfg.quant);
  std::int64_t pieces = 0, elements = 0, bad_sizes = 0, bad_values = 0;
  for (int r = 0; r < tp; ++r) {
    const cuda::LocalShape s = cuda::LocalShape::of(cfg, {r, tp, split}, cuda::PackedSource::Checkpoint, &ckpt);
    const cuda::DeviceWeights layout = cuda::DeviceWeights::layout(s);
    for (const cuda::DeviceLayer& l : layout.layers) {
      for (const cuda::PackedPiece& pc : l.packed) {
        const PackedLinear pl = read_packed_linear(ckpt, cfg.quant, pc.module, pc.out_full, pc.in_full, pc.win);
        bad_sizes += std::int64_t(pl.data.size()) != pc.data_bytes || std::int64_t(pl.scales.size()) != pc.scale_bytes;
        const std::vector<std::uint16_t> got = decode_piece(pc, pl);
        const std::vector<float> want = reader.read(pc.module, pc.out_full, pc.in_full, pc.win);
        for (std::size_t i = 0; i < got.size(); ++i) bad_values += got[i] != float_to_bf16(want[i]);
        ++pieces;
        elements += std::int64_t(got.size());
      }
    }
  }
  check(pieces > 0 && bad_sizes == 0 && bad_values == 0,
        cat("packed pieces of ", name, " tp ", tp, " ", moe_split_name(split), ": ", pieces, " pieces, ", elements,
            " elements equal bf16(LinearReader), sizes differ ", bad_sizes, ", values differ ", bad_values));
}

void fixtures() {
  for (const char* name : {"deepseek_v3", "deepseek_v3_fp8", "deepseek_v3_noqlora", "kimi_k2", "kimi_k25_int4", "qwen3_moe"}) {
    const ModelConfig cfg = load_model_config((fixture(name) / "config.json").string());
    check(cuda::unsupported_parts(cfg).empty(), cat(name, ": the CUDA backend runs every part"));
    const Checkpoint ckpt(checkpoint_files(fixture(name).string()));
    const cuda::LocalShape s = cuda::LocalShape::of(cfg, {0, 1}, cuda::PackedSource::Checkpoint, &ckpt);
    if (cfg.moe) {
      const kernels::RouteParams want = route_params(*cfg.moe);
      check(s.route.kind == want.kind && s.route.num_experts == want.num_experts && s.route.top_k == want.top_k &&
                s.route.n_group == want.n_group && s.route.topk_group == want.topk_group &&
                s.route.norm_topk_prob == want.norm_topk_prob &&
                s.route.routed_scaling_factor == want.routed_scaling_factor,
            cat(name, ": routing parameters"));
    }
    std::size_t fp8 = 0, int4 = 0;
    for (const auto& [module, st] : s.packed) (st.kind == cuda::LinearStorage::Kind::Fp8Block ? fp8 : int4) += 1;
    if (std::string(name) == "deepseek_v3_fp8") {
      // Per layer: q_a, q_b, kv_a, kv_b, o + gate/up/down of the dense MLP (layer 0) or of 8
      // experts and the shared expert (layers 1..3).
      check(fp8 == 5 * 4 + 3 + 3 * 27 && int4 == 0, cat(name, ": ", fp8, " FP8 Linears packed"));
    } else if (std::string(name) == "kimi_k25_int4") {
      check(int4 == 3 * 8 * 3 && fp8 == 0, cat(name, ": ", int4, " INT4 Linears packed (routed experts only)"));
    } else {
      check(s.packed.empty(), cat(name, ": nothing packed"));
    }
  }
  for (const int tp : {1, 2, 4})
    for (const MoeSplit split : {MoeSplit::Experts, MoeSplit::Intermediate}) {
      packed_fixture("deepseek_v3_fp8", tp, split);
      packed_fixture("kimi_k25_int4", tp, split);
    }
}

// ---------------------------------------------------------------------------------------------
// Synthetic models, memory, benchmark

void synthetic_models() {
  const ModelConfig kimi = synthetic_model_config("kimi-k2.5");
  check(kimi.num_layers == 61 && kimi.mla && kimi.mla->qk_head_dim() == 192 && kimi.mla->v_head_dim == 128 &&
            kimi.moe && kimi.moe->num_experts == 384 && kimi.moe->experts_per_token == 8 &&
            kimi.quant.method == QuantConfig::Method::Int4Group && kimi.quant.group_size == 32 &&
            !kimi.is_moe_layer(0) && kimi.is_moe_layer(60) && kimi.rope.type == RopeConfig::Type::Yarn,
        "kimi-k2.5: 61 layers, MLA 192/128, 384 experts top 8, INT4 groups of 32, dense layer 0, YaRN");
  const cuda::LocalShape s = cuda::LocalShape::of(kimi, {0, 8}, cuda::PackedSource::Config);
  check(s.heads == 8 && s.local_experts == 48 && s.first_expert == 0 && s.expert_inter == 2048 &&
            s.shared_inter == 256 && s.inter == 2304 && s.packed.size() == 60 * 48 * 3,
        cat("kimi-k2.5 rank 0 of 8: 8 heads, experts 0..47, shared slice 256, dense slice 2304, ", s.packed.size(),
            " INT4 Linears"));
  // MLA: no GQA head dim; RoPE's table rows are the rope dim's half.
  check(s.head_dim == 0 && s.q_dim() == 0 && s.qkv_dim() == 0 && s.rope_dim == 64 && s.rope_freqs() == 32 &&
            s.mla_qk() == 192 && s.v_dim == 128,
        cat("kimi-k2.5 rank 0 of 8: head_dim ", s.head_dim, ", rope dim ", s.rope_dim, ", ", s.rope_freqs(),
            " frequencies per layer"));
  cuda::CudaBackendOptions o;
  o.max_batch_tokens = 16384;
  o.max_capture_points = 4;
  // The grouped GEMM reads Kimi-K2.5's INT4 experts as stored: no scratch at all (nothing else is
  // packed); the dry run says so.
  const cuda::MemoryPlan grouped = cuda::plan_memory(s, o);
  check(grouped.experts_grouped && grouped.scratch_bytes == 0 && grouped.expert_group == 0 &&
            cuda::describe_device_plan(grouped, s, std::size_t(139) << 30, o).find("read as stored by the grouped GEMM") !=
                std::string::npos,
        cat("kimi-k2.5 rank 0 of 8, grouped experts: scratch ", grouped.scratch_bytes, ", the dry run's plan says why"));
  o.experts = cuda::ExpertKernel::Expand;
  const cuda::MemoryPlan p = cuda::plan_memory(s, o);
  // Expanded: INT4 per expert matrix (2048 x 7168 or 7168 x 2048): 7340032 bytes of words + 917504
  // of bf16 scales; 3 per expert, 48 experts, 60 MoE layers. Scratch: slots for the experts of a
  // group in bf16, 6 in the default 512 MiB (84 MiB each); nothing else of Kimi-K2.5 is packed.
  const std::size_t packed = std::size_t(60) * 48 * 3 * (7340032 + 917504);
  const std::size_t expert = std::size_t(3) * 2048 * 7168 * 2;
  const double gib = double(std::size_t(1) << 30);
  check(p.packed_bytes == packed && p.scratch_bytes == 6 * expert && p.expert_scratch_bytes == expert &&
            p.expert_group == 6 && p.scratch_layer == -1,
        cat("kimi-k2.5 rank 0 of 8: packed ", p.packed_bytes, " = ", packed, " bytes (", double(packed) / gib,
            " GiB), scratch ", p.scratch_bytes, " = 6 x ", expert, " (", p.expert_group, " experts at a time, layer ",
            p.scratch_layer, ")"));
  cuda::CudaBackendOptions roomy = o;  // slots for all 48: one layer's experts at once
  roomy.expert_scratch_bytes = 48 * expert;
  const cuda::MemoryPlan all = cuda::plan_memory(s, roomy);
  check(all.scratch_bytes == 48 * expert && all.expert_group == 48,
        cat("kimi-k2.5 rank 0 of 8 with room for 48 experts: scratch ", all.scratch_bytes, " = 48 x ", expert));
  const double total = double(p.weight_bytes + p.scratch_bytes + p.workspace_bytes + cuda::kDeviceHeadroomBytes) / gib;
  check(total < 125.0, cat("kimi-k2.5 rank 0 of 8 with 16384-token batches needs ", total,
                           " GiB (weights ", double(p.weight_bytes) / gib, ", workspace ",
                           double(p.workspace_bytes) / gib, "): fits an H200's 139 GiB"));
  check_throws("kimi-k2.5 rank share in 80 GiB", [&] { cuda::check_fits(p, std::size_t(80) << 30, "an 80 GiB GPU", o); },
               "dequantization scratch");

  const ModelConfig qwen = synthetic_model_config("qwen3-30b-a3b");
  const cuda::LocalShape q = cuda::LocalShape::of(qwen, {0, 1}, cuda::PackedSource::Config);
  const cuda::MemoryPlan qp = cuda::plan_memory(q, o);
  check(q.any_moe() && !q.any_dense_ffn() && q.local_experts == 128 && q.packed.empty() &&
            double(qp.weight_bytes) / gib > 55 && double(qp.weight_bytes) / gib < 60,
        cat("qwen3-30b-a3b on one GPU: 48 MoE layers of 128 experts, bf16 weights ", double(qp.weight_bytes) / gib,
            " GiB"));
  check(q.head_dim == 128 && q.rope_freqs() == 64, cat("qwen3-30b-a3b: head_dim ", q.head_dim, ", ", q.rope_freqs(),
                                                        " frequencies per layer"));
  const ModelConfig v3 = synthetic_model_config("deepseek-v3");
  const cuda::LocalShape d = cuda::LocalShape::of(v3, {1, 8}, cuda::PackedSource::Config);
  check(d.packed.size() == std::size_t(61 * 5 + 3 * 3 + 58 * (32 * 3 + 3)) && d.first_expert == 32,
        cat("deepseek-v3 rank 1 of 8: every decoder Linear FP8 (", d.packed.size(), "), experts 32..63"));
  const ModelConfig tiny = synthetic_model_config("tiny-moe", 3);
  check(tiny.num_layers == 3 && tiny.mla && tiny.mla->qk_head_dim() == 192, "tiny-moe with --layers 3");
}

void bench_options() {
  std::ostringstream out;
  BenchOptions o;
  const bool parsed = parse_bench_options({"--synthetic", "kimi-k2.5", "--tp-shard", "8", "--tokens", "8192",
                                           "--routing", "uniform,zipf", "--bus-gbs", "450,50", "--zipf-s", "1.2"},
                                          o, out);
  check(parsed && o.tp_shard == 8 && o.routing.size() == 2 && o.bus_gbs == std::vector<double>{450.0, 50.0} &&
            o.zipf_s == 1.2 && o.capture == "eagle3",
        "bench: --synthetic kimi-k2.5 --tp-shard 8 --routing uniform,zipf --bus-gbs 450,50 --zipf-s 1.2");
  const auto parse_fresh = [&](const std::vector<std::string>& args) {
    BenchOptions fresh;
    (void)parse_bench_options(args, fresh, out);
  };
  check_throws("bench: --tp-rank beyond --tp-shard", [&] { parse_fresh({"--tp-shard", "8", "--tp-rank", "8"}); },
               "--tp-rank");
  check_throws("bench: tp-shard that does not divide the heads",
               [&] { parse_fresh({"--synthetic", "kimi-k2.5", "--tp-shard", "3"}); }, "does not divide");
  check_throws("bench: unknown routing", [&] { parse_fresh({"--routing", "hot"}); }, "uniform and zipf");
  check_throws("bench: bad bus", [&] { parse_fresh({"--bus-gbs", "fast"}); }, "--bus-gbs");
  check_throws("bench: bad moe split", [&] { parse_fresh({"--moe-split", "rows"}); }, "--moe-split");

  const std::vector<float> z = zipf_logit_offsets(384, 1.0);
  check(z.size() == 384 && z[0] == 0.0f && std::fabs(z[1] + std::log(2.0f)) < 1e-6f && z[383] < z[382],
        "zipf offsets: -s ln(e + 1)");
  // 8192 tokens x 7168 bf16 = 117440512 bytes; ring all-reduce over 8 ranks at 450 GB/s moves
  // 2 * 7/8 of them per rank: 0.456690 ms; 122 of them per 61-layer forward.
  const TpProjection p = project_tp(8192, 7168, 61, 8, 450.0, 1000.0);
  const double ar = 2.0 * 7.0 / 8.0 * 117440512.0 / 450e9 * 1e3;
  check(std::fabs(p.allreduce_ms - ar) < 1e-9 && std::fabs(p.step_ms - (1000.0 + 122 * ar)) < 1e-6 &&
            std::fabs(p.tokens_per_s - 8192.0 / ((1000.0 + 122 * ar) * 1e-3)) < 1e-6,
        cat("projection: all-reduce ", p.allreduce_ms, " ms, step ", p.step_ms, " ms, ", p.tokens_per_s, " tok/s"));
  const TpProjection solo = project_tp(8192, 7168, 61, 1, 450.0, 100.0);
  check(solo.allreduce_ms == 0 && solo.step_ms == 100.0, "projection: one rank has no all-reduce");

  // The layers the benchmark builds when not told: the most whose plan (the backend's own) fits.
  cuda::CudaBackendOptions bo;
  bo.max_batch_tokens = 16384;
  bo.max_capture_points = 4;
  const TpShard r0{0, 8};
  const auto need = [&](std::int64_t L) {
    const cuda::LocalShape s =
        cuda::LocalShape::of(synthetic_model_config("kimi-k2.5", L), r0, cuda::PackedSource::Config);
    return cuda::device_bytes_needed(cuda::plan_memory(s, bo));
  };
  const std::int64_t in_80 = layers_that_fit("kimi-k2.5", r0, bo, std::size_t(80) << 30);
  check(layers_that_fit("kimi-k2.5", r0, bo, std::size_t(125) << 30) == 61 && in_80 > 2 && in_80 < 61 &&
            need(in_80) <= (std::size_t(80) << 30) && need(in_80 + 1) > (std::size_t(80) << 30),
        cat("bench: kimi-k2.5 rank 0 of 8 at 16384 tokens: all 61 layers in 125 GiB, ", in_80, " in 80 GiB"));
  check(layers_that_fit("kimi-k2.5", r0, bo, need(30)) == 30 &&
            layers_that_fit("kimi-k2.5", r0, bo, need(30) - 1) == 29 && layers_that_fit("kimi-k2.5", r0, bo, need(2) - 1) == 0,
        "bench: layers_that_fit at the boundary of 30 layers, and 0 when not even 2 fit");
}

}  // namespace

int main() {
  try {
    routing();
    fp8_elements();
    int4_elements();
    mxfp4_elements();
    fixtures();
    synthetic_models();
    bench_options();
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  return test::finish();
}
