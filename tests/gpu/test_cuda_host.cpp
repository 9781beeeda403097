// The host-side arithmetic of the CUDA path, which runs (and must pass) without a GPU: tensor-
// parallel shapes, parameter and memory counts for Llama-3.1-8B, the out-of-memory message, the
// benchmark's option parsing and result check, the parallel host copies, and device selection with no device.
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_options.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/device_weights.hpp"
#include "backend/cuda/host_copy.hpp"
#include "backend/cuda/local_shape.hpp"
#include "backend/cuda/memory_plan.hpp"
#include "backend/cuda/workspace.hpp"
#include "bench/model_catalog.hpp"
#include "bench/result_check.hpp"
#include "cli/bench.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"

namespace {

using namespace layertap;

int failures = 0;

void check(bool ok, const std::string& what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what.c_str());
  failures += ok ? 0 : 1;
}

void check_throws(const std::string& what, const std::function<void()>& f, const std::string& must_contain) {
  try {
    f();
    check(false, what + ": did not throw");
  } catch (const Error& e) {
    check(std::string(e.what()).find(must_contain) != std::string::npos, what + ": " + e.what());
  }
}

void shapes_and_memory() {
  const ModelConfig c = synthetic_model_config("llama3-8b");
  const cuda::LocalShape s1 = cuda::LocalShape::of(c, {0, 1});
  // Per layer: q/k/v 6144 x 4096, o 4096 x 4096, gate/up/down 3 x 14336 x 4096.
  check(s1.layer_matmul_params() == 6979321856,
        cat("llama3-8b matmul params ", s1.layer_matmul_params(), " = 6979321856"));
  const cuda::LocalShape s8 = cuda::LocalShape::of(c, {3, 8});
  check(s8.heads == 4 && s8.kv_heads == 1 && s8.inter == 1792 && s8.qkv_dim() == 768,
        "tp 8: 4 query heads, 1 kv head, intermediate 1792 per rank");
  const cuda::LocalShape s16 = cuda::LocalShape::of(c, {5, 16});
  check(s16.heads == 2 && s16.kv_heads == 1, "tp 16: kv heads replicated (1 per rank)");
  check_throws("tp 3", [&] { (void)cuda::LocalShape::of(c, {0, 3}); }, "does not divide");
  // Sizes from a hostile config (head_dim 2^20, 4096 layers) overflow 64 bits in the workspace's
  // products: an error naming it, not a wrapped (small) allocation.
  cuda::LocalShape huge = s1;
  huge.head_dim = std::int64_t(1) << 20;
  huge.layers = 4096;
  check_throws("workspace of head_dim 2^20 x 4096 layers",
               [&] { (void)cuda::Workspace::device_bytes(huge, {std::int64_t(1) << 20, 4, std::int64_t(1) << 30}); },
               "overflows 64 bits");

  // bf16 bytes: matmul params + embedding 128256 x 4096 + 65 norm vectors of 4096; each of the
  // 2 + 32 * 6 tensors may add under 256 bytes of alignment padding.
  const std::size_t exact = 2 * (std::size_t(6979321856) + std::size_t(128256) * 4096 + 65 * 4096);
  const std::size_t bytes = cuda::DeviceWeights::bytes(s1);
  check(bytes >= exact && bytes < exact + 194 * 256, cat("llama3-8b weights ", bytes, " bytes (exact ", exact, ")"));

  cuda::CudaBackendOptions o;
  o.max_batch_tokens = 16384;
  o.max_capture_points = 4;
  const cuda::MemoryPlan p = cuda::plan_memory(s1, o);
  // Per token, bf16: x, h, delta 3 x 4096 + qkv 6144 + ctx 4096 + gate_up 28672 + act 14336 +
  // 4 snapshots x 4096 = 81920 values; + 8 bytes of ids/pos and 8 * (1 + 1/64) of flash tiles.
  check(p.per_token_bytes >= 163840 + 16 && p.per_token_bytes <= 163840 + 17,
        cat("workspace per token ", p.per_token_bytes, " bytes"));
  check(p.pinned_bytes >= std::size_t(4) * 16384 * 4096 * 2, cat("pinned bytes ", p.pinned_bytes));
  const std::size_t gib = std::size_t(1) << 30;
  bool fits = true;
  try {
    cuda::check_fits(p, 20 * gib, "a 20 GiB GPU", o);
  } catch (const Error&) {
    fits = false;
  }
  check(fits, "llama3-8b with 16384-token batches fits in 20 GiB");
  check_throws("llama3-8b in 15 GiB", [&] { cuda::check_fits(p, 15 * gib, "a 15 GiB GPU", o); },
               "tokens per batch would fit");
  check_throws("llama3-8b in 10 GiB", [&] { cuda::check_fits(p, 10 * gib, "a 10 GiB GPU", o); },
               "even the weights alone do not fit");
  try {
    cuda::check_fits(p, 15 * gib, "a 15 GiB GPU", o);
  } catch (const Error& e) {
    const std::string m = e.what();
    check(m.find("weights 13.98 GiB") != std::string::npos && m.find("max_batch_tokens 16384") != std::string::npos &&
              m.find("--max-batch-tokens") != std::string::npos && m.find("--tp") != std::string::npos,
          "the message names weights, workspace, free memory and what to lower");
  }
}

void bench_options() {
  std::ostringstream out;
  BenchOptions o;
  const bool parsed =
      parse_bench_options({"--synthetic", "llama3-8b", "--tokens", "8192,16384", "--points", "4", "--iters=3"}, o, out);
  check(parsed && o.tokens == std::vector<int64_t>{8192, 16384} && o.capture == "eagle3" && o.iters == 3,
        "bench: --tokens 8192,16384 --points 4 --iters=3");
  BenchOptions three;
  const bool three_ok = parse_bench_options({"--points", "3"}, three, out);
  check(three_ok && three.capture == "10,21,final", "bench: --points 3 on 32 layers: '" + three.capture + "'");
  BenchOptions help;
  check(!parse_bench_options({"--help"}, help, out) && out.str().find("--synthetic") != std::string::npos,
        "bench: --help prints the usage");
  const auto parse_fresh = [&](const std::vector<std::string>& args) {
    BenchOptions fresh;
    (void)parse_bench_options(args, fresh, out);
  };
  check_throws("bench: unknown option", [&] { parse_fresh({"--nope", "1"}); }, "unknown option --nope");
  check_throws("bench: bad token list", [&] { parse_fresh({"--tokens", "8k"}); }, "--tokens");
  check_throws("bench: unknown model", [&] { parse_fresh({"--synthetic", "gpt2"}); }, "llama3-8b");
  check_throws("bench: bad attention", [&] { parse_fresh({"--attention", "fast"}); }, "reference");
  BenchOptions unchecked;
  check(parse_bench_options({"--check-tokens", "0"}, unchecked, out) && unchecked.check_tokens == 0 &&
            BenchOptions{}.check_tokens == 512,
        "bench: --check-tokens 0 turns the reference check off (default 512)");
  check_throws("bench: negative --check-tokens", [&] { parse_fresh({"--check-tokens", "-1"}); }, "--check-tokens");
  BenchOptions nine;
  const bool nine_ok = parse_bench_options({"--synthetic", "tiny", "--points", "9"}, nine, out);
  check(nine_ok && nine.capture == "0,1,2,3,4,5,6,7,final", "bench: --points 9 on 8 layers: '" + nine.capture + "'");
  const ModelConfig q = synthetic_model_config("qwen3-8b");
  check(q.qk_norm && q.num_layers == 36 && q.head_dim == 128 && q.intermediate_size == 12288, "qwen3-8b shape");
  const ModelConfig l = synthetic_model_config("llama3-8b");
  check(l.rope.type == RopeConfig::Type::Llama3 && l.rope.theta == 500000.0 && l.vocab_size == 128256 &&
            l.num_kv_heads == 8 && l.intermediate_size == 14336,
        "llama3-8b shape and rope");
}

// The benchmark's result check on hand-made (T 3, H 4) bf16 states at two points: equal finite
// states pass, and so does a rank that returns none; a NaN, an Inf, one flipped bit, a missing
// point or a short tensor is an error naming the configuration, the point and the first element.
void bench_result_check() {
  const std::int64_t T = 3, H = 4;
  const std::vector<std::string> points = {"2", "final"};
  std::vector<std::vector<std::byte>> a(2, std::vector<std::byte>(std::size_t(T * H) * 2));
  for (auto& p : a)
    for (std::size_t i = 0; i < p.size(); i += 2) {  // little-endian bf16 0x3fNN: finite, about 0.5
      p[i] = std::byte(i);
      p[i + 1] = std::byte(0x3f);
    }
  const auto set = [&](std::vector<std::vector<std::byte>> s, std::size_t point, std::int64_t t, std::int64_t e,
                       std::uint16_t v) {
    const std::size_t at = std::size_t(t * H + e) * 2;
    s[point][at] = std::byte(v & 0xff);
    s[point][at + 1] = std::byte(v >> 8);
    return s;
  };
  bool passed = true;
  try {
    check_captured_states(a, a, points, T, H, "equal");
    check_captured_states({}, {}, {}, T, H, "not the writer");
  } catch (const Error& e) {
    passed = false;
    std::printf("%s\n", e.what());
  }
  check(passed, "bench check: equal finite states pass, and a rank without states");
  const std::string cfg = "synthetic tiny, T=3";
  const auto nan = set(a, 1, 1, 2, 0x7fc0), inf = set(a, 0, 0, 0, 0xff80), flipped = set(a, 1, 2, 3, 0x3f17);
  check_throws("bench check: a NaN", [&] { check_captured_states(nan, nan, points, T, H, cfg); },
               "bench: synthetic tiny, T=3: capture point final holds 1 NaN or Inf value(s) of 12 (first at token 1, "
               "element 2: 0x7fc0)");
  check_throws("bench check: an Inf", [&] { check_captured_states(inf, inf, points, T, H, cfg); },
               "capture point 2 holds 1 NaN or Inf value(s) of 12 (first at token 0, element 0: 0xff80)");
  check_throws("bench check: one bit differs", [&] { check_captured_states(a, flipped, points, T, H, cfg); },
               "synthetic tiny, T=3: two captured forwards of the same batch differ at capture point final in 1 of "
               "12 values (first at token 2, element 3: 0x3f16 then 0x3f17)");
  check_throws("bench check: a point missing", [&] { check_captured_states(a, {a[0]}, points, T, H, cfg); },
               "returned 1 states, expected 2");
  auto short_state = a;
  short_state[0].resize(10);
  check_throws("bench check: a short state", [&] { check_captured_states(short_state, a, points, T, H, cfg); },
               "capture point 2 holds 10 bytes, expected (3, 4) bf16 = 24");
}

void host_copies() {
  const std::size_t n = (std::size_t(20) << 20) + 3;  // crosses the 8 MiB pieces unevenly
  std::vector<std::uint16_t> src(n);
  for (std::size_t i = 0; i < n; ++i) src[i] = std::uint16_t((i * 2654435761u) >> 7);
  std::vector<std::uint16_t> dst(n, 0);
  cuda::parallel_copy(dst.data(), src.data(), n * 2, 4);
  check(dst == src, "parallel_copy of 40 MiB on 4 threads");
  std::vector<float> wide(n, -1.0f);
  cuda::parallel_bf16_to_f32(wide.data(), src.data(), n, 3);
  std::size_t bad = 0;
  for (std::size_t i = 0; i < n; ++i) {
    std::uint32_t bits = 0;
    std::memcpy(&bits, &wide[i], 4);
    bad += bits != std::uint32_t(src[i]) << 16;  // bf16 is the top half of the float32
  }
  check(bad == 0, "parallel_bf16_to_f32 widens exactly");
}

void devices_and_names() {
  check(cuda::parse_attention_kernel("flash") == cuda::AttentionKernel::Flash &&
            std::string(cuda::attention_kernel_name(cuda::AttentionKernel::Reference)) == "reference",
        "attention kernel names");
  // The device rule under every GPU binding: all 8 visible (device = local rank), one visible per
  // task (Slurm --gpus-per-task=1: that one), 2 of 4 visible (local rank mod 2).
  bool rule = true;
  for (int r = 0; r < 8; ++r) rule &= cuda::rank_device(r, 8) == r && cuda::rank_device(r, 1) == 0;
  for (int r = 0; r < 4; ++r) rule &= cuda::rank_device(r, 2) == r % 2;
  check(rule, "rank_device: local rank with every GPU visible, the one GPU with one visible, else mod");
  check_throws("device selection without a GPU", [] { (void)cuda::rank_device(0, 0); }, "no CUDA device");
  check_throws("a negative local rank", [] { (void)cuda::rank_device(-1, 8); }, "negative");
  // Sharing is told by PCI bus ids: one GPU per task (each its own) passes, two tasks bound to one
  // GPU (or 4 ranks on 2 GPUs) are named.
  check(cuda::shared_gpu({"0000:1b:00.0", "0000:2c:00.0", "0000:9d:00.0"}).empty(), "distinct bus ids share nothing");
  check(cuda::shared_gpu({"0000:1b:00.0", "0000:2c:00.0", "0000:1b:00.0"}) ==
            "local ranks 0 and 2 would share the GPU at 0000:1b:00.0",
        "a shared bus id names both local ranks and the GPU");
}

}  // namespace

int main() {
  try {
    shapes_and_memory();
    bench_options();
    bench_result_check();
    host_copies();
    devices_and_names();
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  std::printf(failures == 0 ? "PASS\n" : "FAILED (%d)\n", failures);
  return failures == 0 ? 0 : 1;
}
