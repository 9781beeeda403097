// The benchmark's reference check (src/bench/result_check.hpp) on the tiny synthetic models: the
// CUDA backend uploaded from seeded host weights against the CPU backend on the same weights,
// dense GQA (tiny) and MLA + MoE (tiny-moe) at TP 1 and as rank 0's share of 2 (whole experts and
// the intermediate split), uniform and Zipf loads. It must pass with a real, nonzero bf16 error,
// and fail when the two backends compute different things: the CPU's weights are changed after
// the upload as a wrong kernel would change the GPU's result (a head dropped, gate and up
// swapped, two experts' rows exchanged, the shared expert missing). Then the bench's own lines,
// its error on a failed check, and a whole tiny run with the error in its table. Exit 77 without
// a GPU.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <functional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "bench/measure.hpp"
#include "bench/projection.hpp"
#include "bench/result_check.hpp"
#include "bench/run_bench.hpp"
#include "core/error.hpp"
#include "core/state_compare.hpp"
#include "gpu_test.hpp"
#include "host_check.hpp"

namespace {

using namespace layertap;
using test::check;
using test::check_throws;
using Change = std::function<void(ModelWeights&)>;

constexpr std::int64_t kTokens = 96, kSampleTokens = 64, kSlice = 40;

// One comparison of `model`'s reference (rank 0 of `tp`, `split`) on a batch of 96 tokens in
// samples of 64, the CPU on the first 40; `change` alters the CPU's weights.
ReferenceError run_check(const std::string& model, int tp, MoeSplit split, bool zipf, const Change& change = {}) {
  const ModelConfig c = reference_config(model);
  cuda::CudaBackendOptions o;
  o.max_batch_tokens = kTokens;
  o.moe_split = split;
  ReferenceCheck ref(c, tp, reference_weights(c, TpShard{0, tp, split}, 3), o, change);
  const PackedBatch batch = random_batch(kTokens, kSampleTokens, c.vocab_size, 5);
  const std::vector<float> skew = zipf ? zipf_logit_offsets(c.moe->num_experts, 1.0) : std::vector<float>{};
  return ref.compare(batch, kSlice, skew, 7);
}

std::string describe(const ReferenceError& e) {
  return cat("worst rel. error ", e.error, " at point ", e.point, " (bound ", e.bound, "), ", e.nonfinite,
             " non-finite");
}

void passes() {
  struct Case {
    std::string model;
    int tp;
    MoeSplit split;
    bool zipf;
  };
  for (const Case& k : {Case{"tiny", 1, MoeSplit::Experts, false}, Case{"tiny", 2, MoeSplit::Experts, false},
                        Case{"tiny-moe", 1, MoeSplit::Experts, false}, Case{"tiny-moe", 1, MoeSplit::Experts, true},
                        Case{"tiny-moe", 2, MoeSplit::Experts, true}, Case{"tiny-moe", 2, MoeSplit::Intermediate, false}}) {
    const ReferenceError e = run_check(k.model, k.tp, k.split, k.zipf);
    // Above 1e-3: the GPU's bf16 forward really differs from the float32 one (a check that
    // compared a backend with itself would read 0).
    check(e.ok() && e.error > 1e-3 && e.bound == kBf16ForwardBound,
          cat("reference check passes: ", k.model, " rank 0 of ", k.tp, " ", moe_split_name(k.split),
              k.zipf ? " zipf" : " uniform", ": ", describe(e)));
  }
}

// Each change on the CPU's side only, as a wrong kernel would change the GPU's result: must fail.
void fails() {
  const auto fail = [](const std::string& model, const std::string& what, const Change& change) {
    const ReferenceError e = run_check(model, 1, MoeSplit::Experts, false, change);
    check(!e.ok() && e.error > e.bound, cat("reference check fails: ", model, ", ", what, ": ", describe(e)));
  };
  fail("tiny", "head 1 of layer 1 dropped (its o_proj columns zero)", [](ModelWeights& w) {
    Linear& o = std::get<GqaWeights>(w.layers[1].attn).o;  // (H, heads * 64)
    for (std::int64_t r = 0; r < o.out; ++r) std::fill_n(o.w.begin() + r * o.in + 64, 64, 0.0f);
  });
  fail("tiny", "gate and up exchanged in layer 0", [](ModelWeights& w) {
    MlpWeights& m = std::get<MlpWeights>(w.layers[0].ffn);
    std::swap(m.gate, m.up);
  });
  fail("tiny-moe", "experts 2 and 3 exchanged in the MoE layer", [](ModelWeights& w) {
    MoeWeights& m = std::get<MoeWeights>(w.layers[1].ffn);
    std::swap(m.routed[2], m.routed[3]);
  });
  fail("tiny-moe", "the shared expert's down product missing", [](ModelWeights& w) {
    MoeWeights& m = std::get<MoeWeights>(w.layers[1].ffn);
    std::fill(m.shared->down.w.begin(), m.shared->down.w.end(), 0.0f);
  });
}

BenchOptions tiny_options(const std::string& model) {
  BenchOptions o;
  o.model = model;
  o.tokens = {kTokens};
  o.sample_tokens = kSampleTokens;
  o.check_tokens = kSlice;
  o.iters = 1;
  o.warmup = 0;
  o.gemm_iters = 1;
  return o;
}

void bench_lines() {
  cuda::CudaBackendOptions bo;
  bo.max_batch_tokens = kTokens;
  {
    std::ostringstream out;
    const ReferenceChecks r = run_reference_checks(tiny_options("tiny-moe"), bo, out);
    const std::string s = out.str();
    std::printf("%s", s.c_str());
    check(s.find("reference check T=96 (tiny-moe, uniform): 2 layers (1 dense, 1 MoE) x 72 tokens (first and last "
                 "samples) against the CPU backend, worst rel. error ") != std::string::npos &&
              s.find("reference check T=96 (tiny-moe, zipf): ") != std::string::npos &&
              s.find("packed_matches_bf16") != std::string::npos && r.by_config.size() == 2 &&
              r.error_text("zipf", kTokens) != "-",
          "bench: one line per routing of tiny-moe, the packed path named, the errors kept for the tables");
  }
  check_throws("bench: a failed reference check ends the run naming the configuration", [&] {
    std::ostringstream out;
    (void)run_reference_checks(tiny_options("tiny"), bo, out, [](ModelWeights& w) {
      MlpWeights& m = std::get<MlpWeights>(w.layers[0].ffn);
      std::swap(m.gate, m.up);
    });
  }, std::vector<std::string>{"bench: synthetic tiny T=96 (tiny): the CUDA backend is ",
                              "off the CPU backend at capture point"});
  BenchOptions none = tiny_options("tiny");
  none.check_tokens = 0;
  std::ostringstream out;
  const ReferenceChecks r = run_reference_checks(none, bo, out);
  check(out.str().find("reference check: none (--check-tokens 0)") != std::string::npos && r.error_text("", kTokens) == "-",
        "bench: --check-tokens 0 says nothing is checked");
}

// The whole benchmark on tiny: the reference line before the timed model, its error in the table.
void whole_run() {
  std::ostringstream out;
  const int rc = run_bench(tiny_options("tiny"), out);
  const std::string s = out.str();
  const std::size_t line = s.find("reference check T=96 (tiny): "), backend = s.find("backend: cuda");
  const std::size_t header = s.find("| ref. error\n");  // a GPU's timing table, or the simulated GPU's checks
  const std::size_t row = header == std::string::npos ? header : s.find("     96 |", header);
  const std::size_t row_end = row == std::string::npos ? row : s.find('\n', row + 1);
  const std::string table_row = row_end == std::string::npos ? std::string() : s.substr(row, row_end - row);
  check(rc == 0 && line != std::string::npos && line < backend && table_row.find("e-0") != std::string::npos,
        cat("bench: tiny run checked before it is built and timed; table row '", table_row, "'"));
}

}  // namespace

int main() {
  if (!gpu_test::gpu_visible()) return gpu_test::kSkip;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    passes();
    fails();
    bench_lines();
    whole_run();
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  return test::finish();
}
