// The matrix products of the decoder through cuBLASLt: y = x w^T (+ bias), bf16 operands, float32
// accumulation, bf16 result, the bias added in the epilogue before the one rounding.
#pragma once
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <tuple>

namespace layertap::cuda {

class Gemm {
 public:
  // Workspace the cuBLASLt kernels may use (split-K partial sums and the like); the caller owns
  // `workspace` (device memory of `workspace_bytes`), so no product ever allocates.
  static constexpr std::size_t kWorkspaceBytes = std::size_t(64) << 20;

  Gemm(void* workspace, std::size_t workspace_bytes);
  ~Gemm();
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // y (T, N) = x (T, K) @ w (N, K)^T (+ bias (N)), row-major as PyTorch stores them.
  // bias may be null. Enqueued on `stream`.
  void linear(__nv_bfloat16* y, const __nv_bfloat16* x, const __nv_bfloat16* w, const __nv_bfloat16* bias,
              std::int64_t T, std::int64_t N, std::int64_t K, cudaStream_t stream);

  // y (T, N) float32 = x (T, K) @ w (N, K)^T (+ y when `accumulate`): bf16 operands, float32
  // accumulation and result, no rounding to bf16 (the MoE router's float32 logits: the products
  // of bf16 values are exact in float32, so this is a float32 GEMM of those values).
  void linear_f32(float* y, const __nv_bfloat16* x, const __nv_bfloat16* w, std::int64_t T, std::int64_t N,
                  std::int64_t K, bool accumulate, cudaStream_t stream);

 private:
  // One problem shape with its descriptors and the algorithm cuBLASLt's heuristic chose. Keyed
  // by shape, bias presence, operand alignments (which bound the algorithms allowed) and the
  // output type (false: bf16, true: float32).
  struct Plan;
  using Key =
      std::tuple<std::int64_t, std::int64_t, std::int64_t, bool, unsigned, unsigned, unsigned, unsigned, bool>;
  Plan& plan(const Key& key, const __nv_bfloat16* bias);

  cublasLtHandle_t handle_ = nullptr;
  void* workspace_;
  std::size_t workspace_bytes_;
  std::map<Key, std::unique_ptr<Plan>> plans_;  // cleared when it grows past kMaxPlans
  static constexpr std::size_t kMaxPlans = 4096;  // MoE: one shape per expert row count seen
};

}  // namespace layertap::cuda
