// The benchmark's checks of each timed configuration, as nccl-tests check each size once. Against
// a reference: a small model of the timed one's widths and kinds of layers, uploaded from seeded
// host weights, against the float32 CPU backend on the same weights, held to the bf16-forward
// bound of the golden tests. On the timed model itself: the captured states are finite, and two
// captured forwards of the same batch give the same states bit for bit. Speed is measured, never
// asserted; a wrong result is an error, not a figure.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cuda/cuda_backend.hpp"
#include "bench/measure.hpp"
#include "bench/run_bench.hpp"
#include "model/capture.hpp"
#include "model/packed_batch.hpp"

namespace layertap {

// `first` and `second`: the states two forwards of one batch returned, one (T, hidden) bf16
// tensor per name in `points` (none on a rank that is not its group's writer). Throws
// layertap::Error naming `what` (the configuration), the point and the first token and element at
// fault when a state has the wrong size, holds a NaN or Inf, or the two differ in any bit.
void check_captured_states(const std::vector<std::vector<std::byte>>& first,
                           const std::vector<std::vector<std::byte>>& second, const std::vector<std::string>& points,
                           std::int64_t T, std::int64_t hidden, const std::string& what);

// Runs `batch` twice under `plan` (bf16 states) and checks the results as above; returns what was
// checked, for the report ("4 points of (T, H) bf16 finite, bitwise equal in two forwards").
std::string check_forward(cuda::CudaBackend& backend, const PackedBatch& batch, const CapturePlan& plan,
                          const std::string& what);

// The reference model of synthetic `model`: its widths and kinds of layers, but only the dense
// layers before its first MoE layer and that one (at least 2 layers: llama3-8b 2, kimi-k2.5 1
// dense + 1 MoE, deepseek-v3 3 + 1), a vocabulary of at most kReferenceVocab (the embedding is a
// gather: its size changes no kernel) and no quantization (every Linear bf16).
inline constexpr std::int64_t kReferenceVocab = 4096;
ModelConfig reference_config(const std::string& model);

// This rank's slices (rank_layout.hpp) of `c` filled with seeded random float32 values that bf16
// holds exactly (so the GPU's upload and the CPU compute on the same weights), scaled as the
// synthetic models' (DeviceWeights::random): Linears uniform with variance 1 / in, router the
// same over H, norm weights 1 +- 0.1, embedding +-1, biases +-0.1, router score bias +-0.01.
ModelWeights reference_weights(const ModelConfig& c, const TpShard& shard, std::uint64_t seed);

// The worst of a reference comparison over the capture points: the point whose error is the
// largest fraction of its bound.
struct ReferenceError {
  double error = 0;  // relative Frobenius error, ||gpu - cpu|| / ||cpu||, over the compared rows
  double bound = 0;  // that point's bound: 2^-8 for the embedding output, kBf16ForwardBound after
  std::string point;
  std::int64_t nonfinite = 0;  // NaN or Inf values anywhere in the GPU's states (every row)
  std::int64_t tokens = 0, samples = 0;  // compared: rows, of that many samples
  bool ok() const { return nonfinite == 0 && error <= bound; }
};

// Rank 0's share of a `tp`-GPU group of `c` on both backends, each without its all-reduces (the
// benchmark's rank runs that way): the CUDA backend uploaded from `weights` (bf16), then the CPU
// backend on them (float32). `cpu_change`, when given, alters the CPU's weights after the upload:
// a test's stand-in for a wrong kernel; the benchmark passes none. Every layer's input, the last
// layer's output and the final state are compared.
class ReferenceCheck {
 public:
  ReferenceCheck(const ModelConfig& c, int tp, ModelWeights weights, cuda::CudaBackendOptions options,
                 const std::function<void(ModelWeights&)>& cpu_change = {});
  ReferenceCheck(const ReferenceCheck&) = delete;
  ReferenceCheck& operator=(const ReferenceCheck&) = delete;

  // The GPU runs all of `batch` (its tokens below c.vocab_size), so its kernels see the timed
  // configuration's shapes; the CPU runs the first `slice` tokens of its first and of its last
  // sample, whose states depend on nothing else (attention stays within a sample), and those rows
  // of every point are compared. MoE layers run the CPU's float32 routing on those tokens (a bf16
  // forward flips near-tied choices, and a flipped token is off by O(1): docs/GPU.md,
  // "Tolerances"); the other tokens are forced onto the top k experts of seeded Gumbel-noise
  // logits plus `routing_skew` [E] (empty: none, a uniform load), so the experts carry the
  // configuration's load.
  ReferenceError compare(const PackedBatch& batch, std::int64_t slice, const std::vector<float>& routing_skew,
                         std::uint64_t seed);
  const cuda::CudaBackend& gpu() const { return *gpu_; }

 private:
  ModelConfig config_;
  CapturePlan plan_;  // every layer's input, the last layer's output, final
  ModelledAllReduce gpu_comm_;
  std::unique_ptr<TpComm> cpu_comm_;
  cuda::CudaProbe probe_;
  std::unique_ptr<cuda::CudaBackend> gpu_;
  std::unique_ptr<CpuBackend> cpu_;
};

// The reference check of every configuration the benchmark will time (batch size, and routing for
// MoE models), before the timed model is built (the reference model is freed first): one line
// each, `reference check T=8192 (kimi-k2.5, uniform): ...: ok`. Throws layertap::Error naming the
// configuration when one fails. With o.check_tokens 0 it prints that nothing is checked.
// `cpu_change` as ReferenceCheck's (tests only).
struct ReferenceChecks {
  std::map<std::pair<std::string, std::int64_t>, ReferenceError> by_config;  // (routing, T); dense: ""
  // The error for the report's tables ("1.4e-02"), or "-" when not checked.
  std::string error_text(const std::string& routing, std::int64_t T) const;
};
ReferenceChecks run_reference_checks(const BenchOptions& o, const cuda::CudaBackendOptions& bo, std::ostream& out,
                                     const std::function<void(ModelWeights&)>& cpu_change = {});

}  // namespace layertap
