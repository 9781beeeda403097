// The op table: every CUDA kernel against its CPU counterpart on the simulated (or a real) GPU.
// A row (op_cases.cpp, the one list of cases) is a seed and one of the case types below: the type
// names the op, its fields are the op's family parameters and shape. Each op's file (op_NAME.cpp)
// defines its `run`, which builds seeded inputs, runs the kernel and the CPU op and holds the
// result to the bound derived in that file's header comment; test_ops.cpp runs the rows of the
// ops named on its command line. A new parameter of an op is a field here and a row there.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/grouped_gemm.cuh"
#include "kernels/moe_routing.hpp"
#include "kernels/swiglu.cuh"
#include "model/hf_config.hpp"
#include "model/quant_formats.hpp"

namespace layertap::gpu_test::ops {

// kernels/rmsnorm.cu fused_residual_rmsnorm (op_rmsnorm.cpp): N rows of C.
struct Rmsnorm {
  static constexpr const char* kOp = "rmsnorm";
  std::int64_t N, C;
  bool add;       // pass x (otherwise x = nullptr: plain RMSNorm of the residual)
  bool out_is_x;  // write the output over x (allowed aliasing)
  float eps;
  float weight_offset = 0;  // Gemma's norms apply (1 + w): 1
};

// kernels/mla.cu rmsnorm_rows (op_mla.cpp): N rows of C read and written at their own strides.
struct RmsnormRows {
  static constexpr const char* kOp = "rmsnorm_rows";
  std::int64_t N, C, in_stride, out_stride;
  bool in_place;
  float weight_offset = 0;  // Gemma's norms apply (1 + w): 1
};

// kernels/embedding.cu (op_embedding.cpp): T ids into a (V, H) table; the ids at bad_at out of range.
struct Embedding {
  static constexpr const char* kOp = "embedding";
  std::int64_t T, H, V;
  std::vector<std::int64_t> bad_at;
};

// kernels/swiglu.cu (op_swiglu.cpp): (T, 2I) gate/up to (T, I); the activation's kind, alpha,
// limit and layout (split or interleaved) in `f`.
struct Swiglu {
  static constexpr const char* kOp = "swiglu";
  std::int64_t T, I;
  kernels::GateActivation f;
};

// Llama-4's layers: RoPE layers rotate interleaved pairs (then, with use_qk_norm, the weightless
// norm); NoPE layers do not rotate (with attn_temperature_tuning, the queries are scaled).
enum class Llama4 { No, Interleaved, InterleavedNorm, NoPE };

// kernels/rope.cu qk_norm_rope (op_rope.cpp): in place on the fused qkv rows (T, (hq + 2hkv) hd)
// of a packed batch.
struct QkNormRope {
  static constexpr const char* kOp = "qk_norm_rope";
  std::vector<std::int64_t> lengths;  // samples of the packed batch
  std::int64_t hq, hkv, hd;
  bool norm;  // the weighted norm before RoPE
  RopeConfig rope;
  std::string rope_name;
  std::int64_t rd = 0;  // rotary dim (partial rotary); 0: hd
  Llama4 llama4 = Llama4::No;
  std::int64_t first_position = 0;  // the first sample continues at this position
  ModelConfig::Temperature temperature{};
  float weight_offset = 0;  // of the weighted norm; Gemma's (1 + w): 1
};

// kernels/mla.cu rope_strided (op_mla.cpp): `heads` vectors of dim rd at `offset` of rows of
// `row` values (head stride hs).
struct RopeStrided {
  static constexpr const char* kOp = "rope_strided";
  std::vector<std::int64_t> lengths;
  std::int64_t row, hs, offset, heads, rd;
  bool interleaved;
  RopeConfig cfg;
};

// kernels/mla.cu mla_assemble_kv (op_mla.cpp): per-head k (nope + rd) and v (vd) from kv
// (T, nh (nope + vd)) and the shared rope key past kv_lora `kvl`.
struct MlaAssembleKv {
  static constexpr const char* kOp = "mla_assemble_kv";
  std::int64_t T, nh, nope, rd, vd, kvl;
};

// kernels/attention.cu, both kernels (op_attention.cpp), on the fused qkv rows of a packed batch.
struct Attention {
  static constexpr const char* kOp = "attention";
  std::vector<std::int64_t> lengths;
  std::int64_t hq, hkv, hd, window;
  std::int64_t kept = 0;   // the first sample continues one with `kept` earlier keys (key_offset)
  bool sinks = false;      // GPT-OSS's per-head sink logits
  std::int64_t chunk = 0;  // Llama-4's attention chunk
  float scale = 0;         // softmax scale; 0: 1/sqrt(hd) (Gemma-3: query_pre_attn_scalar^-0.5)
};

// kernels/attention.cu, both kernels, in MLA's layout (op_mla.cpp): q, k (T, nh qk), v (T, nh vd)
// in their own buffers, softmax scale `scale`.
struct AttentionMla {
  static constexpr const char* kOp = "attention_mla";
  std::vector<std::int64_t> lengths;
  std::int64_t nh, qk, vd;
  float scale;
};

// src/backend/cuda/gemm (op_gemm.cpp): y (T, N) = x (T, K) w (N, K)^T [+ bias].
struct Gemm {
  static constexpr const char* kOp = "gemm";
  std::int64_t T, N, K;
  bool bias;
  std::int64_t misalign;  // elements added to the x and y pointers (0: 256-byte aligned)
};

// Variants of a dequant case: `specials` puts infinite, NaN, zero, subnormal and overflowing
// scales among the random ones (every third); `misalign` shifts the output (and the packed input)
// off 16 bytes, so every run takes the kernels' element path.
struct DequantVariant {
  bool specials = false, misalign = false;
};

// kernels/dequant.cu (op_dequant.cpp): a window of an [out, in] FP8 matrix with blocks [br, bc].
struct DequantFp8 {
  static constexpr const char* kOp = "dequant_fp8";
  std::int64_t out, in, br, bc;
  quant::Window win;
  DequantVariant variant{};
};

// A window of an [out, in] INT4 matrix with groups of `group` and scales of type st (col0 on a
// group boundary).
struct DequantInt4 {
  static constexpr const char* kOp = "dequant_int4";
  std::int64_t out, in, group;
  DType st;
  quant::Window win;
  DequantVariant variant{};
};

// A window of an [out, in] MXFP4 matrix (in % 32 == 0; col0 on a block boundary): INT4 groups of
// 32 with E8M0 scales.
struct DequantMxfp4 {
  static constexpr const char* kOp = "dequant_mxfp4";
  std::int64_t out, in;
  quant::Window win;
  DequantVariant variant{};
};

// kernels/grouped_gemm.cu (op_grouped_gemm.cpp): each expert's rows times its W_e (N, K), stored
// in P parts of the format.
struct GroupedGemm {
  static constexpr const char* kOp = "grouped_gemm";
  std::string name;
  kernels::GroupedFormat format = kernels::GroupedFormat::Int4Group;
  kernels::ScaleType scale = kernels::ScaleType::BF16;
  std::vector<std::int64_t> counts;  // rows of each expert
  std::int64_t N = 0, K = 0, P = 1;  // W_e (N, K) in P parts
  std::int64_t first = 0;            // offsets[0]
  std::int64_t slack = 0;            // max_rows - offsets[n]
  std::int64_t group = 32;                          // INT4
  std::int64_t br = 128, bc = 128, rp = 0, cp = 0;  // FP8
  std::int64_t x_shift = 0;  // x starts this many bf16 past a 16-byte boundary (2: 4-byte aligned)
  bool one_hot = false;
  bool bias = false;  // every part with a bias (GPT-OSS's experts): y = bf16(bf16(sum) + b)
};

// Router logits: on a grid of 1/8 in [-3, 3] (ties among them); Ties: 3 values only, so most
// choices and group scores tie and the lower index must win; Special: the grid with NaN, +inf and
// -inf sprinkled in (ranked last / first / last, NaN probabilities and weights where the host has them).
enum class Logits { Grid, Ties, Special };

// kernels/moe.cu moe_route (op_moe.cpp): T tokens' (E) logits to top_k experts and weights.
struct MoeRoute {
  static constexpr const char* kOp = "moe_route";
  std::string name;
  kernels::RouteParams p;  // the routing kind and its parameters
  bool bias, offset;       // the choice bias; per-expert logit offsets
  std::int64_t T = 300;
  Logits logits = Logits::Grid;
};

// kernels/moe.cu moe_permute, moe_gather and moe_combine (op_moe.cpp): T tokens' k experts of E,
// the local ones [first, first + n), hidden size H.
struct MoePermute {
  static constexpr const char* kOp = "moe_permute";
  std::int64_t T, E, k, first, n, H;
  bool shared;                // a shared expert's output added by the combine
  bool repeats = false;       // experts drawn with replacement (a token may name one twice)
  bool weight_input = false;  // Llama-4: the gather weights the rows, the combine sums unweighted
};

// kernels/random_fill.cu fill_uniform_bf16 (op_random_fill.cpp): n values offset + scale u,
// u in [-1, 1) from the row's seed.
struct RandomFill {
  static constexpr const char* kOp = "random_fill";
  std::int64_t n;
  float offset, scale;
};

using OpCase = std::variant<Rmsnorm, RmsnormRows, Embedding, Swiglu, QkNormRope, RopeStrided, MlaAssembleKv, Attention,
                            AttentionMla, Gemm, DequantFp8, DequantInt4, DequantMxfp4, GroupedGemm, MoeRoute,
                            MoePermute, RandomFill>;

struct Row {
  std::uint64_t seed;  // the inputs' random stream
  OpCase op;
};

inline const char* op_name(const OpCase& c) {
  return std::visit([](const auto& x) { return x.kOp; }, c);
}

// What the ops' files check besides the rows, run with their op's rows: `host` (may be null) needs
// no device (argument errors, host helpers, the references themselves) and fails the test even
// where no GPU is visible; `device` (may be null) needs one (properties with no CPU counterpart).
struct Check {
  const char* op;
  int (*host)();
  int (*device)(cudaStream_t);
};

std::vector<Row> op_cases();
std::vector<Check> op_checks();

// The runners, one per case type; each returns its failure count.
int run(const Rmsnorm& c, std::uint64_t seed, cudaStream_t stream);
int run(const RmsnormRows& c, std::uint64_t seed, cudaStream_t stream);
int run(const Embedding& c, std::uint64_t seed, cudaStream_t stream);
int run(const Swiglu& c, std::uint64_t seed, cudaStream_t stream);
int run(const QkNormRope& c, std::uint64_t seed, cudaStream_t stream);
int run(const RopeStrided& c, std::uint64_t seed, cudaStream_t stream);
int run(const MlaAssembleKv& c, std::uint64_t seed, cudaStream_t stream);
int run(const Attention& c, std::uint64_t seed, cudaStream_t stream);
int run(const AttentionMla& c, std::uint64_t seed, cudaStream_t stream);
int run(const Gemm& c, std::uint64_t seed, cudaStream_t stream);
int run(const DequantFp8& c, std::uint64_t seed, cudaStream_t stream);
int run(const DequantInt4& c, std::uint64_t seed, cudaStream_t stream);
int run(const DequantMxfp4& c, std::uint64_t seed, cudaStream_t stream);
int run(const GroupedGemm& c, std::uint64_t seed, cudaStream_t stream);
int run(const MoeRoute& c, std::uint64_t seed, cudaStream_t stream);
int run(const MoePermute& c, std::uint64_t seed, cudaStream_t stream);
int run(const RandomFill& c, std::uint64_t seed, cudaStream_t stream);

// The checks' functions (op_checks() lists them).
int rmsnorm_host_checks();
int swiglu_device_checks(cudaStream_t stream);
int rope_host_checks();
int attention_host_checks();
int mla_host_checks();
int gemm_device_checks(cudaStream_t stream);
int dequant_host_checks();
int dequant_device_checks(cudaStream_t stream);
int grouped_gemm_host_checks();
int moe_host_checks();
int random_fill_host_checks();

}  // namespace layertap::gpu_test::ops
