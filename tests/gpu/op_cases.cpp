// The op table: every case of every op of op_table.hpp, in one list. Each row runs the kernel on the
// GPU against the CPU op on inputs drawn from the row's seed, under the bound op_NAME.cpp derives.
// t.from(seed) starts an op's block: its rows take seed, seed + 1, ... in order (t.add(seed, ...)
// names a row's seed), so a row's inputs do not depend on which ops a run selects. A new parameter
// of an op: a field of its case type and a row here; a new op: a case type, its op_NAME.cpp and a
// block here (and its ctest group in CMakeLists.txt).
#include <cmath>
#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "op_table.hpp"

namespace layertap::gpu_test::ops {
namespace {

using kernels::GateActivation;
using F = kernels::GroupedFormat;
using S = kernels::ScaleType;

class Table {
 public:
  void from(std::uint64_t seed) { next_ = seed; }
  void add(OpCase c) { rows_.push_back({next_++, std::move(c)}); }
  void add(std::uint64_t seed, OpCase c) {
    next_ = seed;
    add(std::move(c));
  }
  std::vector<Row> take() { return std::move(rows_); }

 private:
  std::vector<Row> rows_;
  std::uint64_t next_ = 0;
};

RopeConfig default_rope(double theta) {
  RopeConfig r;
  r.theta = theta;
  return r;
}

// Llama-4 Scout's rope_scaling: no band between the kept and the slowed wavelengths.
RopeConfig llama4_rope() {
  RopeConfig r;
  r.type = RopeConfig::Type::Llama3;
  r.theta = 500000.0;
  r.factor = 16.0;
  r.low_freq_factor = 1.0;
  r.high_freq_factor = 1.0;
  r.original_max_position_embeddings = 8192;
  return r;
}

RopeConfig llama3_rope() {
  RopeConfig r;
  r.type = RopeConfig::Type::Llama3;
  r.theta = 500000.0;
  r.factor = 8.0;
  r.low_freq_factor = 1.0;
  r.high_freq_factor = 4.0;
  r.original_max_position_embeddings = 64;
  return r;
}

// DeepSeek-V3-like YaRN (MLA's rope).
RopeConfig yarn() {
  RopeConfig r;
  r.type = RopeConfig::Type::Yarn;
  r.theta = 50000.0;
  r.factor = 64.0;
  r.original_max_position_embeddings = 4096;
  r.beta_fast = 32.0;
  r.beta_slow = 1.0;
  r.attention_factor = 1.0 + 0.1 * std::log(64.0);  // get_mscale(64, 1) / get_mscale(64, 0.707)-like: not 1
  return r;
}

// A grouped_gemm case; the fields past these are set on the result.
GroupedGemm grouped(std::string name, F f, S st, std::vector<std::int64_t> counts, std::int64_t N, std::int64_t K,
                    std::int64_t P, std::int64_t first, std::int64_t slack) {
  GroupedGemm c;
  c.name = std::move(name);
  c.format = f;
  c.scale = st;
  c.counts = std::move(counts);
  c.N = N;
  c.K = K;
  c.P = P;
  c.first = first;
  c.slack = slack;
  return c;
}

}  // namespace

std::vector<Row> op_cases() {
  Table t;
  const std::vector<std::int64_t> mixed = {19, 1, 61, 7, 33};  // the golden samples

  // embedding: T, H, V, positions of out-of-range ids (exact row copies).
  t.from(7001);
  for (const std::int64_t T : {1, 7, 129, 1000})
    for (const std::int64_t H : {5, 8, 72, 4104}) t.add(Embedding{T, H, 160, {}});
  t.add(Embedding{300, 64, 128256, {}});       // a Llama-3-sized vocabulary
  t.add(Embedding{50, 72, 160, {17, 3, 40}});  // first bad position is 3
  t.add(Embedding{50, 13, 160, {0}});

  // rmsnorm (fused_residual_rmsnorm): N, C, add, out_is_x, eps.
  t.from(20240601);
  for (const std::int64_t N : {1, 3, 257})
    for (const std::int64_t C : {1, 7, 72, 256, 4096, 5120 + 3}) t.add(Rmsnorm{N, C, true, false, 1e-6f});
  t.add(Rmsnorm{257, 4096, false, false, 1e-5f});  // no add: plain RMSNorm, residual untouched
  t.add(Rmsnorm{3, 5123, false, false, 1e-6f});
  t.add(Rmsnorm{257, 5123, true, true, 1e-6f});    // out aliases x
  t.add(Rmsnorm{70000, 72, true, false, 1e-6f});   // more rows than the launcher's grid
  // Gemma's norms, out = bf16((1 + w) * normed) (gemma-3-4b's hidden size 2560).
  t.add(Rmsnorm{33, 2560, true, false, 1e-6f, 1.0f});
  t.add(Rmsnorm{3, 72, false, false, 1e-6f, 1.0f});

  // rmsnorm_rows (MLA's latent norms): N, C, in_stride, out_stride, in_place. q_a (contiguous,
  // in place) and kv_a's first kv_lora values (stride kv_lora + rope).
  t.from(7001);
  t.add(RmsnormRows{37, 1536, 1536, 1536, true});
  t.add(RmsnormRows{37, 512, 576, 512, false});
  t.add(RmsnormRows{19, 28, 36, 28, false});
  // Gemma's (1 + w).
  t.from(7101);
  t.add(RmsnormRows{37, 256, 256, 256, true, 1.0f});
  t.add(RmsnormRows{19, 28, 36, 28, false, 1.0f});

  // qk_norm_rope: lengths, hq, hkv, hd, weighted q/k norm, rope config and its name, rotary dim
  // (0: hd), Llama-4 layer kind, first sample's first position, NoPE temperature.
  t.from(8101);
  const std::vector<QkNormRope> qk_norm_rope = {
      {{1, 7, 64, 33}, 6, 2, 12, false, default_rope(10000.0), "default"},         // fixture llama
      {{19, 1, 61}, 4, 2, 14, false, llama3_rope(), "llama3"},                       // fixture llama3_rope
      {{19, 1, 61}, 4, 2, 14, true, llama3_rope(), "llama3"},
      {{5, 5, 5}, 8, 2, 10, false, default_rope(1e6), "default"},                    // fixture mistral
      {{19, 1, 61, 7, 33}, 6, 2, 16, true, default_rope(1e6), "default"},            // fixture qwen3
      {{300}, 3, 1, 2, true, default_rope(10000.0), "default"},                      // smallest head
      {{100, 29}, 2, 2, 130, true, default_rope(10000.0), "default"},                // 65 pairs: 3 per lane
      {{200, 57}, 32, 8, 128, false, llama3_rope(), "llama3"},                       // Llama-3-8B heads
      {{200, 57}, 32, 8, 128, true, default_rope(1e6), "default"},                   // Qwen3-8B heads
      {{16384}, 1, 1, 128, false, default_rope(500000.0), "default"},                // positions up to 16k
      {{2, 3}, 2, 1, 256, true, default_rope(10000.0), "default"},
      {{19, 1, 61, 7, 33}, 4, 2, 16, true, default_rope(1e6), "default", 8},        // fixture glm4_moe: partial
      {{19, 1, 61}, 4, 2, 16, false, default_rope(1e6), "default", 8},
      {{200, 57}, 12, 1, 128, true, default_rope(1e6), "default", 64},              // GLM-4.5 heads at TP 8
      {{70}, 2, 2, 130, true, default_rope(1e4), "default", 66},                    // 33 pairs, 64 passed through
      // Llama-4: 8 query heads on 2 kv heads, a packed batch whose first sample continues at
      // position 300 (chunked prefill).
      {{37, 200, 19}, 8, 2, 128, false, llama3_rope(), "llama3", 0, Llama4::Interleaved, 300},
      {{37, 200, 19}, 8, 2, 128, false, llama3_rope(), "llama3", 0, Llama4::InterleavedNorm, 300},
      {{37, 200, 19}, 8, 2, 64, false, llama3_rope(), "llama3", 0, Llama4::Interleaved, 300},
      {{37, 200, 19}, 8, 2, 64, false, llama3_rope(), "llama3", 0, Llama4::InterleavedNorm, 300},
      {{150, 40}, 8, 2, 128, false, llama4_rope(), "llama4", 0, Llama4::InterleavedNorm, 8100},  // past 8192
      {{19, 1, 61}, 4, 2, 16, false, llama3_rope(), "llama3", 8, Llama4::InterleavedNorm, 5},    // partial
      {{3, 2}, 2, 1, 256, false, llama3_rope(), "llama3", 0, Llama4::InterleavedNorm, 7},        // 4 pairs a lane
      // NoPE layers: positions crossing p + 1 = 8192 (Llama-4's floor_scale); floor_scale 4
      // steps every 4 positions; without the temperature, nothing changes.
      {{100, 30}, 8, 2, 128, false, {}, "", 0, Llama4::NoPE, 8150, {true, 8192, 0.1}},
      {{37, 200, 19}, 8, 2, 64, false, {}, "", 0, Llama4::NoPE, 300, {true, 4, 0.1}},
      {{37, 200, 19}, 8, 2, 64, false, {}, "", 0, Llama4::NoPE, 300},
      // Gemma-3's q/k norms, (1 + w), at its head_dim 256 (gemma-3-4b: 8 query heads on 4).
      {{19, 1, 61}, 8, 4, 256, true, default_rope(1e6), "default", 0, Llama4::No, 0, {}, 1.0f},
      {{5, 5, 5}, 4, 2, 16, true, default_rope(10000.0), "default", 0, Llama4::No, 0, {}, 1.0f},
  };
  for (const QkNormRope& c : qk_norm_rope) t.add(c);

  // rope_strided (MLA): lengths, row, head stride, offset, heads, rd, interleaved, rope config.
  // Per-head query rope dims (offset nope in rows of nh * qk), the shared rope key (offset
  // kv_lora, head stride 0); interleaved (DeepSeek, Kimi) and half-split; YaRN and default.
  t.from(7004);
  t.add(RopeStrided{mixed, 8 * 192, 192, 128, 8, 64, true, yarn()});
  t.add(RopeStrided{mixed, 576, 0, 512, 1, 64, true, yarn()});
  t.add(RopeStrided{mixed, 4 * 24, 24, 16, 4, 8, true, default_rope(10000.0)});
  t.add(RopeStrided{mixed, 4 * 24, 24, 16, 4, 8, false, default_rope(10000.0)});
  t.add(RopeStrided{{300}, 2 * 320, 320, 64, 2, 256, true, yarn()});

  // mla_assemble_kv: T, nh, nope, rd, vd, kv_lora (copies, exact).
  t.from(7009);
  t.add(MlaAssembleKv{57, 4, 16, 8, 12, 32});
  t.add(MlaAssembleKv{130, 8, 128, 64, 128, 512});

  // attention (reference and flash kernels): lengths, hq, hkv, hd, window, kept keys, sinks, chunk.
  t.from(10001);
  const std::vector<std::int64_t> tiles = {64, 65, 1, 63, 128, 130};  // on and off the 64-token tile
  const float gemma3_scale = float(1.0 / std::sqrt(168.0));
  const std::vector<Attention> attention = {
      {mixed, 6, 2, 12, 0},      {mixed, 4, 2, 14, 0},    {mixed, 8, 2, 10, 8},     {mixed, 6, 2, 16, 0},
      {mixed, 8, 2, 8, 0},       {tiles, 4, 2, 64, 0},    {tiles, 4, 1, 64, 0},     {tiles, 8, 8, 64, 5},
      {tiles, 4, 2, 128, 0},     {tiles, 8, 1, 128, 100}, {tiles, 4, 4, 128, 64},   {{300}, 2, 1, 128, 0},
      {{300}, 2, 2, 64, 17},     {{1}, 2, 1, 128, 0},     {{300, 2}, 3, 3, 256, 0}, {{200}, 32, 8, 128, 0},
      // kept keys of a sample in flight
      {{65, 9}, 4, 2, 64, 0, 50}, {{3, 70}, 6, 2, 12, 5, 130},
      // GPT-OSS's sinks (head_dim 64, GQA 8:1, sliding window 128 on alternate layers)
      {mixed, 8, 2, 64, 0, 0, true}, {tiles, 8, 1, 64, 4, 0, true}, {{70, 5}, 4, 2, 64, 0, 100, true},
      {{130, 3, 64}, 16, 2, 64, 128, 37, true}, {tiles, 4, 2, 128, 0, 0, true}, {mixed, 6, 2, 12, 3, 20, true},
      // Llama-4's attention chunks (Scout: head_dim 128, GQA 5:1, chunk 8192): chunks of 8 and 5
      // (dividing the 64-key tile and not), 64 (the tile), 100 (query tiles that span a boundary)
      // and 1 (each query its own key); head_dim 12 for the reference only
      {tiles, 5, 1, 128, 0, 0, false, 8},    {tiles, 4, 2, 64, 0, 0, false, 5},
      {mixed, 10, 2, 128, 0, 0, false, 5},   {mixed, 6, 2, 64, 0, 0, false, 8},
      {{300}, 4, 2, 64, 0, 0, false, 100},   {{300, 2}, 4, 1, 128, 0, 0, false, 64},
      {{70, 5}, 4, 2, 128, 0, 0, false, 1},  {mixed, 6, 2, 12, 0, 0, false, 5},
      // a chunk and a window both: their intersection
      {{300}, 4, 2, 128, 40, 0, false, 100}, {tiles, 4, 2, 64, 6, 0, false, 8},
      // kept keys whose positions continue across chunk boundaries (50..114 in chunks of 8,
      // 150..219 across 200, 13..82 and 37..166 in chunks of 5)
      {{65, 9}, 4, 2, 64, 0, 50, false, 8}, {{70, 3}, 5, 1, 128, 0, 150, false, 100},
      {{70, 3}, 6, 2, 12, 0, 13, false, 5}, {{130, 2}, 4, 2, 64, 0, 37, false, 5},
      // chunks and sinks
      {mixed, 8, 2, 64, 0, 0, true, 8}, {{130, 3, 64}, 8, 2, 128, 0, 37, true, 5},
      {{70, 9}, 10, 2, 128, 0, 150, true, 100},
      // Gemma-3's scale query_pre_attn_scalar^-0.5 (27b: 168 for head_dim 128, 32 query heads on
      // 16), whole and in a sliding window
      {mixed, 8, 4, 128, 0, 0, false, 0, gemma3_scale}, {tiles, 8, 4, 128, 64, 0, false, 0, gemma3_scale},
  };
  for (const Attention& c : attention) t.add(c);

  // attention_mla: lengths, heads, qk and v head dims, scale. The fixtures' 24/16 and 24/8
  // (reference only), Kimi/DeepSeek's 192/128 (reference and flash), with MLA-like scales (YaRN
  // mscale^2 / sqrt(qk)).
  t.from(7011);
  t.add(AttentionMla{mixed, 4, 24, 16, 0.3f});
  t.add(AttentionMla{mixed, 4, 24, 8, 0.25f});
  t.add(AttentionMla{{64, 65, 1, 63, 128, 130}, 4, 192, 128, 0.1127f});
  t.add(AttentionMla{{300, 2}, 8, 192, 128, 0.0722f});

  // swiglu: T, I, activation {kind, alpha, limit, interleaved}.
  t.from(9001);
  const GateActivation silu{}, gelu{GateActivation::GeluTanh};
  for (const std::int64_t T : {1, 3, 257})
    for (const std::int64_t I : {1, 7, 8, 100, 108, 2048 + 8, 2048 + 3}) t.add(Swiglu{T, I, silu});
  t.add(Swiglu{64, 14336, silu});  // Llama-3-8B's intermediate size
  t.add(Swiglu{33, 2048 + 8, gelu});
  // GPT-OSS's: alpha 1.702, limit 7, intermediate size 2880; its gate_up interleaved as stored.
  for (const bool interleaved : {false, true}) {
    const GateActivation clamped{GateActivation::ClampedSwiglu, 1.702f, 7.0f, interleaved};
    for (const std::int64_t I : {1, 7, 8, 108, 2880, 2048 + 3}) t.add(Swiglu{33, I, clamped});
  }
  t.add(Swiglu{3, 2880, GateActivation{GateActivation::Silu, 0, 0, true}});

  // gemm (cuBLASLt): T, N, K, bias, misalign.
  t.from(11001);
  const std::vector<Gemm> gemm = {
      {1, 8, 8, false, 0},        {7, 100, 72, false, 0},      {7, 100, 72, true, 0},     // odd fixture sizes
      {33, 180, 60, true, 0},     {61, 72, 100, false, 0},     {19, 216, 72, true, 0},    // qwen2 qkv with bias
      {5, 30, 17, false, 1},      {130, 64, 56, false, 3},                               // misaligned x and y
      {257, 6144, 4096, false, 0}, {1000, 4096, 4096, true, 0}, {512, 28672, 4096, false, 0},  // Llama-3-8B
      {512, 4096, 14336, false, 0}, {4097, 1024, 512, false, 0},
  };
  for (const Gemm& c : gemm) t.add(c);

  // dequant_fp8: out, in, block rows and cols, window {row0, rows, col0, cols}, variant
  // {specials, misalign}. DeepSeek-V3's 128 x 128 blocks with partial edges; a small grid;
  // windows inside blocks.
  t.from(501);
  t.add(DequantFp8{300, 200, 128, 128, {0, 300, 0, 200}});
  t.add(DequantFp8{300, 200, 128, 128, {128, 172, 0, 200}});
  t.add(DequantFp8{72, 96, 16, 8, {0, 72, 32, 40}});
  t.add(DequantFp8{50, 37, 16, 8, {5, 33, 3, 30}});
  t.add(DequantFp8{1, 9, 128, 128, {0, 1, 0, 9}});
  // The vector paths: 16 codes a thread (cols % 16 == 0), with runs crossing a block column
  // where the window starts 8 columns into one (those runs element by element); 8 codes a
  // thread (cols % 8 == 0); odd widths; every scale class; unaligned buffers.
  t.add(DequantFp8{64, 1024, 128, 128, {3, 61, 136, 768}});
  t.add(DequantFp8{40, 96, 16, 8, {0, 40, 0, 96}, {true, false}});
  t.add(DequantFp8{40, 96, 4, 24, {1, 39, 8, 88}, {true, false}});
  t.add(DequantFp8{33, 53, 16, 8, {0, 33, 0, 53}, {true, false}});
  t.add(DequantFp8{20, 256, 128, 128, {0, 20, 0, 256}, {false, true}});
  // dequant_int4: out, in, group, scale type, window, variant (seeds continue the FP8 rows').
  for (const DType st : {DType::BF16, DType::F16, DType::F32}) {
    t.add(DequantInt4{40, 256, 32, st, {0, 40, 0, 256}});
    t.add(DequantInt4{40, 256, 32, st, {8, 17, 64, 128}});
    t.add(DequantInt4{7, 100, 32, st, {0, 7, 0, 100}});  // partial word and group
    t.add(DequantInt4{3, 2048, 128, st, {1, 2, 1024, 1024}});
    // 1 word a thread (cols % 32 != 0); groups that runs cross (12: 32-column runs, 4: several
    // groups a word); every scale class; unaligned buffers; an odd width with special scales.
    t.add(DequantInt4{9, 200, 40, st, {0, 9, 0, 200}});
    t.add(DequantInt4{6, 384, 12, st, {0, 6, 0, 384}});
    t.add(DequantInt4{5, 64, 4, st, {0, 5, 0, 64}});
    t.add(DequantInt4{30, 512, 32, st, {0, 30, 0, 512}, {true, false}});
    t.add(DequantInt4{12, 256, 64, st, {2, 10, 64, 192}, {false, true}});
    t.add(DequantInt4{11, 93, 16, st, {0, 11, 0, 93}, {true, false}});
  }
  // dequant_mxfp4: out, in, window, variant. 4 words a thread (whole blocks), a window inside
  // (rows and blocks of a TP slice), 1 word a thread with a partial last block (cols 200), every
  // scale class, unaligned buffers.
  t.add(DequantMxfp4{40, 256, {0, 40, 0, 256}});
  t.add(DequantMxfp4{40, 2880, {7, 25, 1440, 1440}});
  t.add(DequantMxfp4{9, 256, {0, 9, 0, 200}});
  t.add(DequantMxfp4{30, 512, {0, 30, 0, 512}, {true, false}});
  t.add(DequantMxfp4{11, 160, {1, 10, 32, 128}, {true, false}});
  t.add(DequantMxfp4{12, 256, {2, 10, 64, 192}, {false, true}});
  t.add(DequantMxfp4{7, 256, {0, 7, 0, 200}, {true, true}});

  // grouped_gemm, in the spirit of ggml's test-backend-ops.
  t.from(3401);
  std::vector<GroupedGemm> g;
  // name, format, scale type, rows per expert, N, K, parts, offsets[0], rows past offsets[n]
  g.push_back(grouped("int4 bf16: gate/up in 2 parts, K 256", F::Int4Group, S::BF16, {37, 0, 1, 64, 90}, 192, 256, 2, 0, 8));
  g.push_back(grouped("int4 bf16: K 200 off groups (4-byte copies), N 136", F::Int4Group, S::BF16, {70, 0, 65}, 136, 200, 1, 3, 5));
  g.push_back(grouped("int4 bf16: one expert takes every row", F::Int4Group, S::BF16, {0, 0, 150, 0}, 72, 96, 1, 0, 0));
  g.push_back(grouped("int4 f16 scales", F::Int4Group, S::F16, {20, 33, 1}, 64, 128, 2, 0, 4));
  g.push_back(grouped("int4 f32 scales, odd N 129, K 160", F::Int4Group, S::F32, {66, 2}, 129, 160, 1, 0, 3));
  g.push_back(grouped("int4 groups of 64, K 320", F::Int4Group, S::BF16, {40, 41}, 64, 320, 1, 0, 0));
  g.back().group = 64;
  g.push_back(grouped("int4 groups of 128, K 192 (half a last group)", F::Int4Group, S::BF16, {12}, 40, 192, 1, 0, 0));
  g.back().group = 128;
  {
    std::mt19937_64 rng(17);
    std::vector<std::int64_t> counts(40);
    for (auto& c : counts) c = std::int64_t(rng() % 8);
    g.push_back(grouped("int4: 40 experts of 0..7 rows", F::Int4Group, S::BF16, counts, 16, 64, 1, 0, 2));
  }
  g.push_back(grouped("int4: every expert empty", F::Int4Group, S::BF16, {0, 0, 0}, 32, 64, 1, 7, 9));
  // MXFP4 (INT4 groups of 32, E8M0 scales): gate/up in 2 parts with ragged experts; K 160, half a
  // last K step (GPT-OSS's 2880 at TP 2: 1440 = 22.5 steps); many small experts.
  g.push_back(grouped("mxfp4: gate/up in 2 parts, ragged experts, K 256", F::Int4Group, S::E8M0, {37, 0, 1, 64, 90}, 192, 256, 2, 0, 8));
  g.push_back(grouped("mxfp4: K 160 (half a K step), N 136", F::Int4Group, S::E8M0, {70, 0, 65, 3}, 136, 160, 1, 3, 5));
  {
    std::mt19937_64 rng(29);
    std::vector<std::int64_t> counts(32);
    for (auto& c : counts) c = std::int64_t(rng() % 9);
    g.push_back(grouped("mxfp4: 32 experts of 0..8 rows, K 1440", F::Int4Group, S::E8M0, counts, 64, 1440, 2, 0, 1));
  }
  // Expert biases (GPT-OSS): interleaved gate/up in one part, down; a ragged, odd N in 2 parts.
  g.push_back(grouped("mxfp4 + bias: gate/up in 1 part, N 256, K 192", F::Int4Group, S::E8M0, {9, 0, 70, 1}, 256, 192, 1, 0, 3));
  g.back().bias = true;
  g.push_back(grouped("bf16 + bias: odd N 129 in 1 part, K 96", F::Bf16, S::BF16, {40, 2}, 129, 96, 1, 1, 2));
  g.back().bias = true;
  g.push_back(grouped("int4 + bias: 2 parts of 48, K 128", F::Int4Group, S::BF16, {33, 64}, 96, 128, 2, 0, 0));
  g.back().bias = true;
  g.push_back(grouped("fp8 128x128: gate/up in 2 parts of 96 rows, K 256", F::Fp8Block, S::F32, {1, 63, 0, 100}, 192, 256, 2, 0, 6));
  g.push_back(grouped("fp8 K 200 partial block (4-byte copies), N 136", F::Fp8Block, S::F32, {65, 64, 2}, 136, 200, 1, 0, 1));
  g.push_back(grouped("fp8 row phase 32, K 320", F::Fp8Block, S::F32, {120, 30}, 72, 320, 1, 0, 0));
  g.back().rp = 32;
  g.push_back(grouped("fp8 blocks 16x128, phases (5, 64), 2 parts of 50", F::Fp8Block, S::F32, {50, 0, 14}, 100, 192, 2, 2, 2));
  g.back().br = 16;
  g.back().rp = 5;
  g.back().cp = 64;
  g.push_back(grouped("fp8: one expert, one row", F::Fp8Block, S::F32, {1}, 128, 128, 1, 0, 0));
  // FP8 blocks that do not span whole 64-k steps (a scale per 8 k). First the DeepSeek-V3 fixture
  // (tests/fixtures/models/deepseek_v3_fp8: weight_block_size [16, 8], hidden 72,
  // moe_intermediate_size 32, 8 routed experts): gate/up (64, 72) in 2 parts, down (72, 32), and a
  // tensor-parallel half of gate/up's rows and of down's K.
  const std::vector<std::int64_t> fixture_rows = {9, 0, 23, 1, 66, 3, 0, 40};
  g.push_back(grouped("fp8 16x8 fixture gate/up: 2 parts of 32, K 72 (4-byte)", F::Fp8Block, S::F32, fixture_rows, 64, 72, 2, 0, 3));
  g.back().br = 16;
  g.back().bc = 8;
  g.push_back(grouped("fp8 16x8 fixture down: N 72, K 32", F::Fp8Block, S::F32, fixture_rows, 72, 32, 1, 5, 0));
  g.back().br = 16;
  g.back().bc = 8;
  g.push_back(grouped("fp8 16x8 fixture, TP 2: gate/up 2 parts of 16, K 72", F::Fp8Block, S::F32, {4, 17, 0, 70}, 32, 72, 2, 0, 0));
  g.back().br = 16;
  g.back().bc = 8;
  g.push_back(grouped("fp8 16x8 fixture, TP 2: down N 72, K 16", F::Fp8Block, S::F32, {4, 17, 0, 70}, 72, 16, 1, 0, 1));
  g.back().br = 16;
  g.back().bc = 8;
  g.push_back(grouped("fp8 blocks 128x32, phases (100, 8), K 256", F::Fp8Block, S::F32, {70, 5}, 96, 256, 1, 0, 2));
  g.back().rp = 100;
  g.back().cp = 8;
  g.push_back(grouped("fp8 blocks 16x8, K 200 (4-byte copies), N 136", F::Fp8Block, S::F32, {65, 2, 0, 33}, 136, 200, 1, 1, 0));
  g.back().br = 16;
  g.back().bc = 8;
  g.push_back(grouped("fp8 blocks 128x128 at col phase 8 (steps cross), K 320", F::Fp8Block, S::F32, {100}, 130, 320, 1, 0, 0));
  g.back().cp = 8;
  g.push_back(grouped("fp8 blocks 40x24, phases (7, 16), K 136 (4-byte), 2 parts", F::Fp8Block, S::F32, {30, 70}, 100, 136, 2, 0, 0));
  g.back().br = 40;
  g.back().bc = 24;
  g.back().rp = 7;
  g.back().cp = 16;
  g.push_back(grouped("fp8 blocks 16x192, col phase 136, K 192", F::Fp8Block, S::F32, {33, 64}, 48, 192, 1, 0, 0));
  g.back().br = 16;
  g.back().bc = 192;
  g.back().cp = 136;
  g.push_back(grouped("bf16: gate/up in 2 parts, K 256", F::Bf16, S::BF16, {50, 50, 0, 77}, 192, 256, 2, 0, 3));
  g.push_back(grouped("bf16: K 72, N 8, one-row experts", F::Bf16, S::BF16, {1, 1, 1}, 8, 72, 1, 10, 20));
  // K % 8 != 0 (x rows 4-byte aligned only; x and weights in 4-byte copies): the test fixtures' MoE
  // down projection (N = hidden 72) at moe_intermediate_size 24 sliced for TP 2 (K 12) and 4 (K 6).
  g.push_back(grouped("bf16 K 12 (TP 2 down, 4-byte x), fixture rows", F::Bf16, S::BF16, fixture_rows, 72, 12, 1, 5, 3));
  g.push_back(grouped("bf16 K 6 (TP 4 down, 4-byte x), N 72", F::Bf16, S::BF16, {4, 17, 0, 70, 1}, 72, 6, 1, 3, 2));
  g.push_back(grouped("bf16 K 12, 2 parts of 12", F::Bf16, S::BF16, {0, 1, 66, 9}, 24, 12, 2, 0, 1));
  g.push_back(grouped("bf16 K 6, 2 parts of 68 (N 136)", F::Bf16, S::BF16, {0, 1, 65, 7, 0, 2}, 136, 6, 2, 1, 0));
  g.push_back(grouped("bf16 K 134 (3 steps, 4-byte x), odd N 41", F::Bf16, S::BF16, {30, 1, 0}, 41, 134, 1, 0, 2));
  g.push_back(grouped("fp8 16x8 K 12 (4-byte x and codes), N 72", F::Fp8Block, S::F32, fixture_rows, 72, 12, 1, 0, 2));
  g.back().br = 16;
  g.back().bc = 8;
  g.push_back(grouped("fp8 16x16 K 12, phases (3, 8), 2 parts of 36", F::Fp8Block, S::F32, {1, 0, 40}, 72, 12, 2, 2, 0));
  g.back().br = 16;
  g.back().bc = 16;
  g.back().rp = 3;
  g.back().cp = 8;
  g.push_back(grouped("fp8 128x128 K 20 (4-byte x and codes)", F::Fp8Block, S::F32, {3, 64}, 40, 20, 1, 0, 0));
  // x 4 bytes past 16-byte alignment, K % 8 != 0: x in 4-byte copies.
  g.push_back(grouped("bf16 K 12, x 4-byte aligned", F::Bf16, S::BF16, {3, 0, 65}, 40, 12, 2, 0, 1));
  g.back().x_shift = 2;
  g.push_back(grouped("fp8 16x8 K 12, x 4-byte aligned", F::Fp8Block, S::F32, {20, 0, 1}, 72, 12, 1, 0, 0));
  g.back().x_shift = 2;
  g.back().br = 16;
  g.back().bc = 8;
  // The decoders bit for bit: unit x rows.
  const std::size_t first_one_hot = g.size();
  g.push_back(grouped("one-hot int4 bf16 scales", F::Int4Group, S::BF16, {0, 128, 64}, 128, 128, 1, 0, 0));
  g.push_back(grouped("one-hot int4 f16 scales", F::Int4Group, S::F16, {64}, 64, 64, 1, 0, 0));
  g.push_back(grouped("one-hot int4 f32 scales", F::Int4Group, S::F32, {64}, 64, 64, 1, 0, 0));
  g.push_back(grouped("one-hot mxfp4 (E8M0 scales 2^-125..2^125)", F::Int4Group, S::E8M0, {0, 128, 64}, 128, 128, 1, 0, 0));
  g.push_back(grouped("one-hot mxfp4, K 96", F::Int4Group, S::E8M0, {33, 96}, 64, 96, 2, 0, 0));
  g.push_back(grouped("one-hot fp8 (all 254 codes), blocks 16x64", F::Fp8Block, S::F32, {192}, 128, 192, 1, 0, 0));
  g.back().br = 16;
  g.back().bc = 64;
  g.push_back(grouped("one-hot fp8 (all 254 codes), blocks 16x8, K 72 (4-byte)", F::Fp8Block, S::F32, {80, 72}, 64, 72, 2, 0, 0));
  g.back().br = 16;
  g.back().bc = 8;
  g.push_back(grouped("one-hot fp8 (all 254 codes), 8x16 at phases (3, 8)", F::Fp8Block, S::F32, {160}, 128, 160, 1, 0, 0));
  g.back().br = 8;
  g.back().bc = 16;
  g.back().rp = 3;
  g.back().cp = 8;
  g.push_back(grouped("one-hot bf16", F::Bf16, S::BF16, {64}, 64, 64, 1, 0, 0));
  g.push_back(grouped("one-hot bf16 K 6 (4-byte x), 2 parts of 36", F::Bf16, S::BF16, {20, 0, 1, 45}, 72, 6, 2, 0, 0));
  g.push_back(grouped("one-hot fp8 16x8 K 12 (4-byte x)", F::Fp8Block, S::F32, {70}, 64, 12, 1, 0, 0));
  g.back().br = 16;
  g.back().bc = 8;
  for (std::size_t i = first_one_hot; i < g.size(); ++i) g[i].one_hot = true;
  for (GroupedGemm& c : g) t.add(std::move(c));

  // moe_route: name, RouteParams (kind and its parameters), choice bias, logit offsets, T, logits.
  kernels::RouteParams ds;
  ds.kind = kernels::RouteParams::SigmoidGroupedTopk;
  ds.num_experts = 16, ds.top_k = 4, ds.n_group = 4, ds.topk_group = 2, ds.norm_topk_prob = 1;
  ds.routed_scaling_factor = 2.5f;
  t.add(1, MoeRoute{"deepseek 16 experts, 4 groups, bias", ds, true, false});
  kernels::RouteParams v3 = ds;
  v3.num_experts = 256, v3.top_k = 8, v3.n_group = 8, v3.topk_group = 4;
  t.add(2, MoeRoute{"deepseek-v3 256 experts, 8 groups, bias", v3, true, false});
  kernels::RouteParams kimi = ds;
  kimi.num_experts = 384, kimi.top_k = 8, kimi.n_group = 1, kimi.topk_group = 1, kimi.routed_scaling_factor = 2.827f;
  t.add(3, MoeRoute{"kimi 384 experts, bias", kimi, true, false});
  t.add(4, MoeRoute{"kimi 384 experts, bias, logit offsets", kimi, true, true});
  kernels::RouteParams qwen;
  qwen.kind = kernels::RouteParams::SoftmaxTopk;
  qwen.num_experts = 128, qwen.top_k = 8, qwen.norm_topk_prob = 1;
  t.add(5, MoeRoute{"qwen3 128 experts softmax", qwen, false, false});
  qwen.norm_topk_prob = 0;
  t.add(6, MoeRoute{"qwen3 128 experts softmax, no renormalisation", qwen, false, true});
  // The warp router's edges: T of 1 and T not a multiple of the block's 8 tokens; the group
  // step with one expert per group, 64 groups (two per lane), every group kept, and E not a
  // multiple of 32; ties everywhere; NaN and infinities; top_k past 32 (picks kept in memory);
  // the largest E of the warp router (1024, 32 per lane) and the one-thread fallback past it.
  t.add(21, MoeRoute{"deepseek-v3 256 experts, 8 groups, bias", v3, true, false, 1});
  t.add(22, MoeRoute{"deepseek-v3 256 experts, 8 groups, bias", v3, true, true, 7});
  t.add(23, MoeRoute{"deepseek-v3 256 experts, 8 groups, ties", v3, true, false, 64, Logits::Ties});
  t.add(24, MoeRoute{"deepseek-v3 256 experts, 8 groups, NaN/inf", v3, true, false, 64, Logits::Special});
  kernels::RouteParams single = ds;
  single.num_experts = 16, single.top_k = 4, single.n_group = 16, single.topk_group = 6;
  t.add(25, MoeRoute{"16 groups of one expert", single, true, false, 40, Logits::Ties});
  kernels::RouteParams many = v3;
  many.n_group = 64, many.topk_group = 5, many.top_k = 12;
  t.add(26, MoeRoute{"256 experts, 64 groups of 4, top 12 over 5 groups", many, true, false, 40});
  kernels::RouteParams all_kept = v3;
  all_kept.topk_group = 8, all_kept.norm_topk_prob = 0;
  t.add(27, MoeRoute{"256 experts, every group kept, no renormalisation", all_kept, false, false, 40});
  kernels::RouteParams odd = ds;
  odd.num_experts = 72, odd.top_k = 6, odd.n_group = 3, odd.topk_group = 2;
  t.add(28, MoeRoute{"72 experts, 3 groups of 24", odd, true, false, 33, Logits::Ties});
  t.add(29, MoeRoute{"kimi 384 experts, ties", kimi, true, false, 40, Logits::Ties});
  t.add(30, MoeRoute{"kimi 384 experts, NaN/inf", kimi, false, false, 40, Logits::Special});
  qwen.norm_topk_prob = 1;
  t.add(31, MoeRoute{"qwen3 128 experts softmax, ties", qwen, false, false, 40, Logits::Ties});
  t.add(32, MoeRoute{"qwen3 128 experts softmax, NaN/inf", qwen, false, false, 40, Logits::Special});
  kernels::RouteParams wide = qwen;
  wide.num_experts = 96, wide.top_k = 40;
  t.add(33, MoeRoute{"softmax 96 experts, top 40", wide, false, false, 20});
  kernels::RouteParams wide_sig = ds;
  wide_sig.num_experts = 64, wide_sig.top_k = 36, wide_sig.n_group = 2, wide_sig.topk_group = 2;
  t.add(34, MoeRoute{"sigmoid 64 experts, 2 groups, top 36", wide_sig, true, false, 20, Logits::Ties});
  kernels::RouteParams max_warp = kimi;
  max_warp.num_experts = 1024, max_warp.top_k = 8;
  t.add(35, MoeRoute{"1024 experts (32 a lane)", max_warp, true, false, 16});
  kernels::RouteParams serial = qwen;
  serial.num_experts = 1040, serial.top_k = 4;
  t.add(36, MoeRoute{"1040 experts softmax (one thread a token)", serial, false, true, 12});
  kernels::RouteParams oss;  // GPT-OSS: the top-k logits (router bias as the logit offset), softmaxed
  oss.kind = kernels::RouteParams::TopkSoftmax;
  oss.num_experts = 128, oss.top_k = 4;
  t.add(37, MoeRoute{"gpt-oss 128 experts, top-4 logits softmaxed, router bias", oss, false, true});
  t.add(38, MoeRoute{"gpt-oss 128 experts, ties", oss, false, false, 40, Logits::Ties});
  t.add(39, MoeRoute{"gpt-oss 128 experts, NaN/inf", oss, false, false, 40, Logits::Special});
  kernels::RouteParams oss_wide = oss;
  oss_wide.num_experts = 96, oss_wide.top_k = 40;
  t.add(40, MoeRoute{"top-k softmax 96 experts, top 40", oss_wide, false, false, 20});
  kernels::RouteParams llama4;  // Llama-4: the top-k logits, each weight its sigmoid
  llama4.kind = kernels::RouteParams::TopkSigmoid;
  llama4.num_experts = 16, llama4.top_k = 1;
  t.add(51, MoeRoute{"llama-4 16 experts, top-1 logit sigmoided", llama4, false, false});
  t.add(52, MoeRoute{"llama-4 16 experts, top-1, logit offsets", llama4, false, true, 7});
  t.add(53, MoeRoute{"llama-4 16 experts, top-1, ties", llama4, false, false, 40, Logits::Ties});
  t.add(54, MoeRoute{"llama-4 16 experts, top-1, NaN/inf", llama4, false, false, 40, Logits::Special});
  kernels::RouteParams maverick = llama4;
  maverick.num_experts = 128;
  t.add(55, MoeRoute{"llama-4 128 experts, top-1", maverick, false, false});
  kernels::RouteParams llama4_k = llama4;
  llama4_k.top_k = 4;
  t.add(56, MoeRoute{"top-k sigmoid 16 experts, top 4, ties", llama4_k, false, false, 40, Logits::Ties});
  t.add(57, MoeRoute{"top-k sigmoid 16 experts, top 4, NaN/inf", llama4_k, false, false, 40, Logits::Special});
  kernels::RouteParams llama4_wide = llama4;
  llama4_wide.num_experts = 96, llama4_wide.top_k = 40;
  t.add(58, MoeRoute{"top-k sigmoid 96 experts, top 40", llama4_wide, false, false, 20});
  t.add(59, MoeRoute{"top-k sigmoid 96 experts, top 40, NaN/inf", llama4_wide, false, false, 20, Logits::Special});

  // moe_permute (with moe_gather and moe_combine): T, E, k, first, n (local experts [first,
  // first + n)), H, shared expert, repeats, weight_input.
  t.add(11, MoePermute{300, 64, 8, 16, 16, 200, true});    // one rank of 4 (whole experts)
  t.add(12, MoePermute{300, 64, 8, 0, 64, 200, false});    // intermediate split: every expert
  t.add(13, MoePermute{1000, 384, 8, 336, 48, 72, true});  // Kimi's last rank of 8
  t.add(14, MoePermute{5, 16, 4, 12, 4, 64, true});        // experts with no tokens
  t.add(15, MoePermute{257, 8, 2, 0, 8, 7, true});         // H off the 16-byte copies
  // Placement's edges: T of 1 (fewer pairs than local experts: one tile counting in `counts`),
  // one local expert, top_k above the local experts, many tiles (and a scan over several chunks
  // of the (expert, tile) table), more local experts than the shared counters hold (with
  // several tiles and with one), tiles limited by perm_token's length (top_k 300: no combine),
  // repeated experts within a token.
  t.add(41, MoePermute{1, 384, 8, 336, 48, 64, true});
  t.add(42, MoePermute{300, 64, 8, 5, 1, 24, true});
  t.add(43, MoePermute{300, 64, 8, 60, 4, 24, false});
  t.add(44, MoePermute{3001, 64, 8, 16, 16, 8, true});
  t.add(45, MoePermute{2000, 384, 8, 0, 384, 8, false});
  t.add(46, MoePermute{300, 1100, 8, 0, 1100, 8, true});
  t.add(50, MoePermute{2, 1100, 8, 0, 1100, 8, false});
  t.add(47, MoePermute{20, 512, 300, 0, 8, 8, false});
  t.add(48, MoePermute{500, 16, 8, 0, 16, 24, true, true});
  t.add(49, MoePermute{77, 40, 6, 8, 24, 16, false, true});
  // Input-weighted experts (Llama-4): top-1 on one rank of 4 (most tokens' expert elsewhere,
  // slot -1) and with every expert local; top 8 on one rank of 4; H off the 16-byte path;
  // repeated experts within a token (each row its own pair's weight).
  t.add(61, MoePermute{300, 16, 1, 4, 4, 200, true, false, true});
  t.add(62, MoePermute{300, 128, 1, 0, 128, 64, true, false, true});
  t.add(63, MoePermute{300, 64, 8, 16, 16, 200, true, false, true});
  t.add(64, MoePermute{257, 8, 2, 0, 8, 7, false, false, true});
  t.add(65, MoePermute{77, 40, 6, 8, 24, 16, true, true, true});

  // random_fill: n, offset, scale; the row's seed is the fill's. Around the block size, and past
  // the 2^16-block grid where the grid-stride loop takes over; then norm weights.
  for (const std::int64_t n : std::vector<std::int64_t>{1, 255, 256, 257, 100003, (std::int64_t(1) << 24) + 7})
    t.add(1234, RandomFill{n, 0.0f, 0.0625f});
  t.add(99, RandomFill{4096, 1.0f, 0.1f});
  return t.take();
}

std::vector<Check> op_checks() {
  return {
      {"rmsnorm", rmsnorm_host_checks, nullptr},
      {"swiglu", nullptr, swiglu_device_checks},
      {"qk_norm_rope", rope_host_checks, nullptr},
      {"rope_strided", mla_host_checks, nullptr},
      {"attention", attention_host_checks, nullptr},
      {"gemm", nullptr, gemm_device_checks},
      {"dequant_fp8", dequant_host_checks, dequant_device_checks},
      {"grouped_gemm", grouped_gemm_host_checks, nullptr},
      {"moe_route", moe_host_checks, nullptr},
      {"random_fill", random_fill_host_checks, nullptr},
  };
}

}  // namespace layertap::gpu_test::ops
