#include "backend/cuda/memory_plan.hpp"

#include <cstdio>

#include "backend/cuda/device_weights.hpp"
#include "backend/cuda/workspace.hpp"
#include "core/error.hpp"

namespace layertap::cuda {

namespace {
std::string gib(std::size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(std::size_t(1) << 30));
  return buf;
}
}  // namespace

MemoryPlan plan_memory(const LocalShape& s, const CudaBackendOptions& o) {
  LT_CHECK(o.max_batch_tokens > 0, "cuda backend: max_batch_tokens must be positive, not ", o.max_batch_tokens);
  LT_CHECK(o.max_capture_points >= 0, "cuda backend: max_capture_points must be >= 0, not ", o.max_capture_points);
  MemoryPlan p;
  const DeviceWeights::Sizes w = DeviceWeights::sizes(s);
  p.weight_bytes = w.resident;
  p.packed_bytes = w.packed;
  p.scratch_bytes = w.scratch;
  p.scratch_layer = w.scratch_layer;
  p.workspace_bytes = Workspace::device_bytes(s, o.max_batch_tokens, o.max_capture_points);
  p.pinned_bytes = Workspace::pinned_bytes(s, o.max_batch_tokens, o.max_capture_points);
  const std::size_t fixed = Workspace::device_bytes(s, 0, o.max_capture_points);
  const std::size_t Tm = std::size_t(o.max_batch_tokens);
  p.per_token_bytes = (p.workspace_bytes - fixed + Tm - 1) / Tm;
  return p;
}

void check_fits(const MemoryPlan& p, std::size_t free_bytes, const std::string& device, const CudaBackendOptions& o) {
  const std::size_t need = p.weight_bytes + p.scratch_bytes + p.workspace_bytes + kDeviceHeadroomBytes;
  if (need <= free_bytes) return;
  const std::size_t fixed = p.workspace_bytes - p.per_token_bytes * std::size_t(o.max_batch_tokens);
  const std::size_t room = p.weight_bytes + p.scratch_bytes + fixed + kDeviceHeadroomBytes;
  const std::string fits =
      room < free_bytes && p.per_token_bytes > 0
          ? cat("at most ", (free_bytes - room) / p.per_token_bytes, " tokens per batch would fit")
          : std::string("even the weights alone do not fit");
  const std::string weights =
      p.packed_bytes > 0 ? cat(" (this rank's tensor-parallel slice: ", gib(p.packed_bytes), " packed as the checkpoint "
                               "stores them, the rest bf16) + dequantization scratch ", gib(p.scratch_bytes),
                               " (layer ", p.scratch_layer, "'s packed weights expanded to bf16)")
                         : std::string(" (bf16, this rank's tensor-parallel slice)");
  LT_FAIL("the CUDA backend does not fit on ", device, ": weights ", gib(p.weight_bytes), weights, " + workspace ",
          gib(p.workspace_bytes), " (max_batch_tokens ",
          o.max_batch_tokens, ", ", o.max_capture_points, " capture points) + ", gib(kDeviceHeadroomBytes),
          " headroom for cuBLAS and NCCL = ", gib(need), ", but only ", gib(free_bytes), " are free (", fits,
          "). Lower --max-batch-tokens, raise --tp (each rank holds 1/tp of the weights) or free the GPU.");
}

}  // namespace layertap::cuda
