// The CUDA backend's full forward pass: every capture point of every golden fixture against the
// Hugging Face float32 reference (one sample per batch and all samples packed), llama_tp at
// tensor parallel 1, 2 and 4 (ranks as threads on one GPU), determinism and dtypes, capture plans
// with repeated points, the flash kernel against the reference kernel in a whole model, and the
// errors a user can cause. Exit 77 without a GPU.
//
// Tolerance of the golden comparison (relative Frobenius error per sample and capture point):
//   point 0, the embedding output: the float32 embedding rounded to bf16 once, so every element
//     is within 2^-9 relative: bound 2^-9.
//   later points: bf16 holds 8 significant bits, so each rounding moves a value by up to 2^-9
//     relative (2^-9/sqrt(3) ~ 1.1e-3 RMS). On its way through one decoder layer a value meets
//     ~12 roundings (weights once, then every tensor boundary: norm, q/k/v, RoPE, attention,
//     o_proj, residual, norm, gate/up, silu, product, down_proj, residual); in quadrature that is
//     ~4e-3 per layer, carried and amplified along the residual stream. A host emulation of
//     exactly these rounding points (numpy, float64 products rounded where the GPU rounds) on the
//     six fixtures gives 0.8-0.9e-2 after layer 0 and 1.1-2.0e-2 at the last points (llama3_rope
//     worst), and reproduces the reference to 6e-7 with the roundings off. The GPU differs from
//     that emulation only in float32 accumulation order and sincosf, far below 2^-9, so its
//     errors are of the same size: we hold 5e-2, 2.5x the emulation's worst. A wiring bug (a
//     wrong head, position, bias or norm) moves the states by 1e-1 and more; the kernels
//     themselves are held to tight elementwise bounds in their own tests.
// The tensor-parallel runs add the bf16 all-reduce's roundings (one per peer) to the same bound.
#include <algorithm>
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "gpu_test.hpp"
#include "kernels/attention.cuh"
#include "kernels/cuda_check.hpp"
#include "model/capture.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"
#include "fixture_reference.hpp"

namespace {

using namespace layertap;
namespace fs = std::filesystem;
using States = std::vector<std::vector<std::byte>>;

constexpr double kPoint0Bound = 1.0 / 512.0 + 1e-7;
constexpr double kStateBound = 5e-2;

using test::FixtureReference;
using test::relative_error;

std::vector<float> to_floats(const std::vector<std::byte>& s, DType dtype) {
  std::vector<float> f(s.size() / dtype_size(dtype));
  if (dtype == DType::F32) {
    std::memcpy(f.data(), s.data(), s.size());
  } else {
    for (std::size_t i = 0; i < f.size(); ++i) {
      uint16_t b = 0;
      std::memcpy(&b, s.data() + 2 * i, 2);
      f[i] = bf16_to_float(b);
    }
  }
  return f;
}

// Points 0..L then final: point p has id p.
CapturePlan all_points(int64_t L) {
  std::string request;
  for (int64_t k = 0; k <= L; ++k) request += cat(k, ",");
  return resolve_capture(request + "final", L);
}

struct Batch {
  std::vector<std::size_t> samples;
  PackedBatch packed;
};

// Each sample alone, then all of them packed.
std::vector<Batch> golden_batches(const FixtureReference& ref) {
  std::vector<Batch> out;
  std::vector<std::size_t> all;
  for (std::size_t s = 0; s < ref.tokens.size(); ++s) {
    out.push_back({{s}, {}});
    all.push_back(s);
  }
  out.push_back({all, {}});
  for (Batch& b : out) {
    b.packed.offsets.push_back(0);
    for (const std::size_t s : b.samples) {
      b.packed.tokens.insert(b.packed.tokens.end(), ref.tokens[s].begin(), ref.tokens[s].end());
      b.packed.offsets.push_back(b.packed.num_tokens());
    }
  }
  return out;
}

int64_t total_tokens(const FixtureReference& ref) {
  int64_t t = 0;
  for (const auto& s : ref.tokens) t += int64_t(s.size());
  return t;
}

// Compares the states of each golden batch; prints the worst error per capture point.
int compare_golden(const std::string& name, const ModelConfig& cfg, const FixtureReference& ref, const CapturePlan& plan,
                   const std::vector<Batch>& batches, const std::vector<States>& results) {
  const int64_t H = cfg.hidden_size;
  std::vector<double> worst(plan.points.size(), 0.0);
  int fails = 0;
  for (std::size_t b = 0; b < batches.size(); ++b) {
    if (results[b].size() != plan.points.size()) {
      std::printf("FAIL %s: batch %zu returned %zu states for %zu points\n", name.c_str(), b, results[b].size(),
                  plan.points.size());
      return 1;
    }
    for (std::size_t p = 0; p < plan.points.size(); ++p) {
      const std::vector<float> got = to_floats(results[b][p], DType::BF16);
      for (std::size_t i = 0; i < batches[b].samples.size(); ++i) {
        const std::size_t s = batches[b].samples[i];
        const int64_t T = int64_t(ref.tokens[s].size());
        const float* want = ref.states[s].data() + std::size_t(plan.points[p].id * T * H);
        const double err = relative_error(got.data() + batches[b].packed.offsets[i] * H, want, std::size_t(T * H));
        worst[p] = std::max(worst[p], err);
      }
    }
  }
  for (std::size_t p = 0; p < plan.points.size(); ++p) {
    const double bound = plan.points[p].id == 0 ? kPoint0Bound : kStateBound;
    const bool ok = worst[p] <= bound;
    fails += ok ? 0 : 1;
    std::printf("%s %-16s point %-5s %-52s worst rel. error %.3e (bound %.1e)\n", ok ? "ok  " : "FAIL", name.c_str(),
                plan.points[p].spec.c_str(), plan.meaning(p).c_str(), worst[p], bound);
  }
  return fails;
}

fs::path fixture(const std::string& name) { return fs::path(LAYERTAP_FIXTURES) / "models" / name; }

// ---------------------------------------------------------------------------------------------
// Single GPU: golden, determinism, dtypes, repeated points

int golden_single(const std::string& name) {
  const fs::path dir = fixture(name);
  const ModelConfig cfg = load_model_config((dir / "config.json").string());
  const Checkpoint ckpt(checkpoint_files(dir.string()));
  const FixtureReference ref = test::load_fixture_reference((dir / "reference.safetensors").string(), cfg.num_layers, cfg.hidden_size);
  const CapturePlan plan = all_points(cfg.num_layers);
  SoloDeviceAllReduce solo;
  cuda::CudaBackendOptions o;
  o.max_batch_tokens = total_tokens(ref);
  o.max_capture_points = int64_t(plan.points.size());
  cuda::CudaBackend backend(cfg, load_weights(ckpt, cfg, {}), solo, o);
  std::printf("     %s: %s\n", name.c_str(), backend.description().c_str());
  const std::vector<Batch> batches = golden_batches(ref);
  std::vector<States> results;
  for (const Batch& b : batches) results.push_back(backend.forward(b.packed, plan, DType::BF16));
  int fails = compare_golden(name, cfg, ref, plan, batches, results);

  // Same batch again: bit for bit. As float32: the bf16 states widened exactly.
  const PackedBatch& all = batches.back().packed;
  const States again = backend.forward(all, plan, DType::BF16);
  const States as_f32 = backend.forward(all, plan, DType::F32);
  std::size_t differ = 0, widen_differ = 0;
  for (std::size_t p = 0; p < plan.points.size(); ++p) {
    differ += again[p] != results.back()[p];
    widen_differ += to_floats(as_f32[p], DType::F32) != to_floats(results.back()[p], DType::BF16);
  }
  // Repeated and reordered points: one copy per distinct point, each result where it was asked.
  const CapturePlan odd = resolve_capture("final,2,2,0", cfg.num_layers);
  const States picked = backend.forward(all, odd, DType::BF16);
  const int64_t L = cfg.num_layers;
  const bool picked_ok = picked.size() == 4 && picked[0] == results.back()[std::size_t(L + 1)] &&
                         picked[1] == results.back()[2] && picked[2] == results.back()[2] &&
                         picked[3] == results.back()[0];
  const bool ok = differ == 0 && widen_differ == 0 && picked_ok;
  std::printf("%s %-16s determinism (%zu points differ on a rerun), float32 = widened bf16 (%zu differ), plan "
              "'final,2,2,0' %s\n",
              ok ? "ok  " : "FAIL", name.c_str(), differ, widen_differ, picked_ok ? "matches" : "DIFFERS");
  return fails + (ok ? 0 : 1);
}

// ---------------------------------------------------------------------------------------------
// Tensor parallelism with ranks as threads on one GPU. The all-reduce goes through the host, in
// NCCL's order (rank 0's values plus rank 1's, rounded to bf16, plus rank 2's, ...).

class ThreadAllReduce final : public DeviceAllReduce {
 public:
  struct Group {
    explicit Group(int n) : size(n), slots(std::size_t(n)), barrier(n) {}
    int size;
    std::vector<std::vector<uint16_t>> slots;
    std::barrier<> barrier;
  };
  ThreadAllReduce(Group& g, int rank) : g_(g), rank_(rank) {}
  int rank() const override { return rank_; }
  int size() const override { return g_.size; }
  void all_reduce_sum_bf16(void* dev, int64_t n, cudaStream_t stream) override {
    std::vector<uint16_t>& mine = g_.slots[std::size_t(rank_)];
    mine.resize(std::size_t(n));
    LT_CUDA_CHECK(cudaMemcpyAsync(mine.data(), dev, std::size_t(n) * 2, cudaMemcpyDeviceToHost, stream));
    LT_CUDA_CHECK(cudaStreamSynchronize(stream));
    g_.barrier.arrive_and_wait();  // every rank's partial sums are on the host
    for (int r = 0; r < g_.size; ++r)  // a rank that failed (and dropped out) left no partial sums
      LT_CHECK(g_.slots[std::size_t(r)].size() == std::size_t(n), "tensor-parallel rank ", r, " did not take part");
    std::vector<uint16_t> sum(g_.slots[0]);
    for (int r = 1; r < g_.size; ++r)
      for (std::size_t i = 0; i < sum.size(); ++i)
        sum[i] = float_to_bf16(bf16_to_float(sum[i]) + bf16_to_float(g_.slots[std::size_t(r)][i]));
    g_.barrier.arrive_and_wait();  // nobody overwrites its slot before every rank has read them all
    LT_CUDA_CHECK(cudaMemcpyAsync(dev, sum.data(), std::size_t(n) * 2, cudaMemcpyHostToDevice, stream));
    LT_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
  void drop() { g_.barrier.arrive_and_drop(); }  // a failed rank stops holding up the others

 private:
  Group& g_;
  int rank_;
};

int golden_tp(const std::string& name, int tp) {
  const fs::path dir = fixture(name);
  const ModelConfig cfg = load_model_config((dir / "config.json").string());
  const Checkpoint ckpt(checkpoint_files(dir.string()));
  const FixtureReference ref = test::load_fixture_reference((dir / "reference.safetensors").string(), cfg.num_layers, cfg.hidden_size);
  const CapturePlan plan = all_points(cfg.num_layers);
  const std::vector<Batch> batches = golden_batches(ref);
  int device = 0;
  LT_CUDA_CHECK(cudaGetDevice(&device));

  ThreadAllReduce::Group group(tp);
  std::vector<std::vector<States>> results(static_cast<std::size_t>(tp));
  std::vector<std::string> errors(static_cast<std::size_t>(tp));
  std::vector<std::thread> ranks;
  for (int r = 0; r < tp; ++r) {
    ranks.emplace_back([&, r] {
      ThreadAllReduce comm(group, r);
      try {
        LT_CUDA_CHECK(cudaSetDevice(device));
        cuda::CudaBackendOptions o;
        o.max_batch_tokens = total_tokens(ref);
        o.max_capture_points = int64_t(plan.points.size());
        cuda::CudaBackend backend(cfg, load_weights(ckpt, cfg, TpShard{r, tp}), comm, o);
        for (const Batch& b : batches) results[std::size_t(r)].push_back(backend.forward(b.packed, plan, DType::BF16));
      } catch (const std::exception& e) {
        errors[std::size_t(r)] = e.what();
        comm.drop();
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  int fails = 0;
  for (int r = 0; r < tp; ++r) {
    if (!errors[std::size_t(r)].empty()) {
      std::printf("FAIL %s tp=%d rank %d: %s\n", name.c_str(), tp, r, errors[std::size_t(r)].c_str());
      ++fails;
    }
  }
  if (fails != 0) return fails;
  for (int r = 1; r < tp; ++r) {
    for (const States& s : results[std::size_t(r)]) {
      if (!s.empty()) {
        std::printf("FAIL %s tp=%d: rank %d returned states (only rank 0 captures)\n", name.c_str(), tp, r);
        ++fails;
      }
    }
  }
  return fails + compare_golden(cat(name, " tp=", tp), cfg, ref, plan, batches, results[0]);
}

// ---------------------------------------------------------------------------------------------
// The flash kernel against the reference kernel in a whole model (random weights, seeded). The
// kernels differ by the flash kernel's bf16 probabilities (<= 2^-9 v_max per attention output
// element, see test_attention.cpp); from there the two bf16 pipelines round differently, so they
// can drift apart by as much as either is from the exact result: the golden bound, kStateBound.

ModelConfig synthetic_config(int64_t hd, bool qk_norm, int64_t window) {
  ModelConfig c;
  c.architecture = qk_norm ? "Qwen3ForCausalLM" : "LlamaForCausalLM";
  c.hidden_size = 256, c.intermediate_size = 320, c.num_layers = 3, c.num_heads = 512 / hd;
  c.num_kv_heads = c.num_heads / 2, c.head_dim = hd, c.vocab_size = 500, c.rms_norm_eps = 1e-6;
  c.qk_norm = qk_norm;
  c.qkv_bias = !qk_norm;  // the bias epilogue too
  c.sliding_window.assign(std::size_t(c.num_layers), window);
  return c;
}

int flash_vs_reference(int64_t hd, bool qk_norm, int64_t window) {
  const ModelConfig cfg = synthetic_config(hd, qk_norm, window);
  if (!kernels::flash_attention_supported(hd)) {
    std::printf("skip flash vs reference, head_dim %lld (flash unsupported here)\n", (long long)hd);
    return 0;
  }
  PackedBatch batch;
  batch.offsets = {0, 100, 101, 165, 365, 402};
  for (int64_t t = 0; t < batch.offsets.back(); ++t) batch.tokens.push_back(int32_t((t * 7919) % cfg.vocab_size));
  const CapturePlan plan = all_points(cfg.num_layers);
  SoloDeviceAllReduce solo;
  cuda::CudaBackendOptions o;
  o.max_batch_tokens = batch.num_tokens();
  o.max_capture_points = int64_t(plan.points.size());
  States out[2];
  for (int k = 0; k < 2; ++k) {
    o.attention = k == 0 ? cuda::AttentionKernel::Reference : cuda::AttentionKernel::Flash;
    const auto backend = cuda::CudaBackend::synthetic(cfg, solo, o, 77);
    LT_CHECK(backend->attention() == o.attention, "the backend did not take the attention kernel asked for");
    out[k] = backend->forward(batch, plan, DType::BF16);
  }
  int fails = 0;
  for (std::size_t p = 0; p < plan.points.size(); ++p) {
    const std::vector<float> ref = to_floats(out[0][p], DType::BF16), got = to_floats(out[1][p], DType::BF16);
    const double err = relative_error(got.data(), ref.data(), ref.size());
    double rms = 0;
    for (const float v : ref) rms += double(v) * double(v);
    rms = std::sqrt(rms / double(ref.size()));
    const bool ok = err <= kStateBound && rms > 1e-3 && std::isfinite(rms);
    fails += ok ? 0 : 1;
    std::printf("%s flash vs reference hd=%lld%s window=%lld point %-5s rel. error %.3e (bound %.0e), state rms %.3g\n",
                ok ? "ok  " : "FAIL", (long long)hd, qk_norm ? " qk_norm" : " qkv_bias", (long long)window,
                plan.points[p].spec.c_str(), err, kStateBound, rms);
  }
  return fails;
}

// ---------------------------------------------------------------------------------------------
// Errors a user can cause: each must throw layertap::Error naming the problem.

int expect_error(const char* what, const std::function<void()>& f, const char* must_contain) {
  try {
    f();
  } catch (const Error& e) {
    const bool ok = std::string(e.what()).find(must_contain) != std::string::npos;
    std::printf("%s %s throws: %s\n", ok ? "ok  " : "FAIL", what, e.what());
    return ok ? 0 : 1;
  }
  std::printf("FAIL %s did not throw\n", what);
  return 1;
}

int user_errors() {
  const fs::path dir = fixture("llama");
  const ModelConfig cfg = load_model_config((dir / "config.json").string());
  const Checkpoint ckpt(checkpoint_files(dir.string()));
  const ModelWeights weights = load_weights(ckpt, cfg, {});
  SoloDeviceAllReduce solo;
  cuda::CudaBackendOptions o;
  o.max_batch_tokens = 16;
  o.max_capture_points = 2;
  cuda::CudaBackend backend(cfg, weights, solo, o);
  const CapturePlan plan = resolve_capture("1,final", cfg.num_layers);
  PackedBatch ok_batch{{1, 2, 3, 4}, {0, 2, 4}};
  int fails = 0;
  fails += expect_error("token id = vocab_size", [&] {
    PackedBatch b{{1, 2, int32_t(cfg.vocab_size), 4}, {0, 4}};
    (void)backend.forward(b, plan, DType::BF16);
  }, "at batch position 2");
  fails += expect_error("negative token id", [&] {
    PackedBatch b{{-5, 2}, {0, 2}};
    (void)backend.forward(b, plan, DType::BF16);
  }, "at batch position 0");
  // The backend still works after a bad batch.
  const States good = backend.forward(ok_batch, plan, DType::BF16);
  const bool still_ok = good.size() == 2 && good[0].size() == std::size_t(4 * cfg.hidden_size * 2);
  std::printf("%s forward after a rejected batch\n", still_ok ? "ok  " : "FAIL");
  fails += still_ok ? 0 : 1;
  fails += expect_error("more tokens than max_batch_tokens", [&] {
    PackedBatch b{std::vector<int32_t>(17, 1), {0, 17}};
    (void)backend.forward(b, plan, DType::BF16);
  }, "max_batch_tokens");
  fails += expect_error("more distinct points than max_capture_points", [&] {
    (void)backend.forward(ok_batch, resolve_capture("0,1,2", cfg.num_layers), DType::BF16);
  }, "max_capture_points");
  fails += expect_error("offsets that do not span the batch", [&] {
    PackedBatch b{{1, 2, 3}, {0, 2}};
    (void)backend.forward(b, plan, DType::BF16);
  }, "offsets");
  fails += expect_error("float16 states", [&] { (void)backend.forward(ok_batch, plan, DType::F16); }, "float16");
  fails += expect_error("a workspace larger than the GPU", [&] {
    cuda::CudaBackendOptions big = o;
    big.max_batch_tokens = int64_t(1) << 31;
    cuda::CudaBackend b(cfg, weights, solo, big);
  }, "GiB");
  fails += expect_error("flash attention at head_dim 12", [&] {
    cuda::CudaBackendOptions f = o;
    f.attention = cuda::AttentionKernel::Flash;
    cuda::CudaBackend b(cfg, weights, solo, f);
  }, "head_dim");
  return fails;
}

}  // namespace

int main() {
  if (!gpu_test::gpu_visible()) return gpu_test::kSkip;
  int failures = 0;
  try {
    for (const char* name : {"llama", "llama3_rope", "mistral", "qwen2", "qwen3", "llama_tp"})
      failures += golden_single(name);
    for (const int tp : {2, 4}) failures += golden_tp("llama_tp", tp);
    failures += flash_vs_reference(64, false, 0);
    failures += flash_vs_reference(128, true, 40);
    failures += user_errors();
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  std::printf(failures == 0 ? "PASS\n" : "FAILED (%d)\n", failures);
  return failures == 0 ? 0 : 1;
}
