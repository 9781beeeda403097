// Settings of the CUDA backend, fixed at construction (they size its one workspace).
#pragma once
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_probe.hpp"
#include "backend/cuda/weight_loader.hpp"
#include "model/weights.hpp"

namespace layertap::cuda {

enum class AttentionKernel {
  Auto,       // flash where it runs (head_dim 64 or 128 on sm_80+), else reference
  Reference,  // attention_reference: any head_dim, float32, slow on long samples
  Flash,      // attention_flash: tensor cores; construction fails where it cannot run
};

// "auto", "reference" or "flash"; throws layertap::Error naming the choices otherwise.
AttentionKernel parse_attention_kernel(const std::string& name);
const char* attention_kernel_name(AttentionKernel k);

// How a MoE layer multiplies its routed experts.
enum class ExpertKernel {
  Auto,     // grouped where the experts' storage allows it (grouped_experts.hpp says where not), else expand
  Grouped,  // kernels/grouped_gemm: one launch per projection for all of the rank's experts, the
            // weights read as stored (INT4, FP8, bf16), the rows counted on the device: no host wait
  Expand,   // the reference: packed experts expanded to bf16 a group at a time, one cuBLASLt
            // product per expert and projection, the row counts waited for on the host
};
// "auto", "grouped" or "expand"; throws layertap::Error naming the choices otherwise.
ExpertKernel parse_expert_kernel(const std::string& name);
const char* expert_kernel_name(ExpertKernel k);

struct CudaBackendOptions {
  std::int64_t max_batch_tokens = 8192;  // T of the largest batch; sizes every activation buffer
  // The longest sample. One longer than max_batch_tokens runs in chunks over consecutive batches,
  // the keys and values of its earlier chunks kept on the device (max_kept_positions sizes them);
  // 0: none is longer.
  std::int64_t max_sample_tokens = 0;
  std::int64_t max_capture_points = 4;   // distinct capture points per batch (eagle3 = 4)
  AttentionKernel attention = AttentionKernel::Auto;
  ExpertKernel experts = ExpertKernel::Auto;
  double timeout_s = 1800;               // bound on any wait for the GPU or tensor-parallel peers
  int host_copy_threads = 4;             // threads that copy captured states into the result
  MoeSplit moe_split = MoeSplit::Experts;  // how the routed experts are laid out over the TP group
  bool profile_layers = false;           // time each decoder layer (CudaProbe::layer_ms) with events
  std::size_t memory_limit = 0;          // use at most this much device memory (--gpu-memory); 0: all that is free
  // The slots packed routed experts are expanded into (bf16), a group of experts at a time; at
  // least one expert's. Only where the experts are expanded (ExpertKernel::Expand).
  std::size_t expert_scratch_bytes = std::size_t(512) << 20;
  LoaderOptions loader;                  // reading the checkpoint (threads, staging ring)
  CudaProbe* probe = nullptr;            // benchmarks and tests only: routing hooks, per-layer figures
};

// Positions of a sample in flight the backend keeps between batches: all but the last of the
// longest sample's when it is longer than a batch, else none.
inline std::int64_t max_kept_positions(const CudaBackendOptions& o) {
  return o.max_sample_tokens > o.max_batch_tokens ? o.max_sample_tokens - 1 : 0;
}

}  // namespace layertap::cuda
