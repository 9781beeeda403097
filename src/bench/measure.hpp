// How the benchmark measures: random packed batches, wall-clock seconds and their median, one
// tensor-parallel rank whose all-reduces are counted instead of run, the cuBLASLt bf16 rate on a
// model's own product shapes, and what the simulated GPU counts in one forward.
#pragma once
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/device_all_reduce.hpp"
#include "model/packed_batch.hpp"

namespace layertap {

using BenchClock = std::chrono::steady_clock;

// Packed batch of T random tokens in samples of `sample_tokens` (the last one shorter).
PackedBatch random_batch(std::int64_t T, std::int64_t sample_tokens, std::int64_t vocab, std::uint64_t seed);

// Wall-clock seconds of f().
double seconds_of(const std::function<void()>& f);
double median_of(std::vector<double> v);
double mean_of(const std::vector<double>& v);  // 0 for none

// One tensor-parallel rank whose all-reduces are not run (the benchmark models their time): it
// counts them, so the report can say how many a forward needs.
class ModelledAllReduce final : public DeviceAllReduce {
 public:
  ModelledAllReduce(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // Counted; on the simulated GPU also recorded as the NCCL call would be (sim/cost.hpp).
  void all_reduce_sum_bf16(void*, std::int64_t count, cudaStream_t stream) override;
  std::int64_t calls = 0;

 private:
  int rank_, size_;
};

// cuBLASLt bf16 rate on the model's four products at T tokens, over the model's own weights
// (cycling through the layers, so no product reuses a weight the last one left in L2) and
// random activations, `passes` products per shape. TFLOP/s per product and overall (total FLOP /
// total time).
struct GemmRates {
  std::map<std::string, double> tflops;  // qkv, o, gate_up, down
  double overall = 0;
};
GemmRates measure_gemm(const cuda::CudaBackend& backend, std::int64_t T, int passes);

// The simulated GPU (LAYERTAP_CUDA_SIM builds) counts what one forward does: exact on any machine,
// the structure the performance work cuts (launches, cuBLASLt calls, host waits). Runs `forward`
// once and prints its counts as one line naming `what`; elsewhere runs it and prints nothing (a
// caller may use what the forward returned: the first real GPU run crashed when it did not run).
void print_simulated_counts(std::ostream& out, const std::string& what, const std::function<void()>& forward);

}  // namespace layertap
