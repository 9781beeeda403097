#include "backend/cuda/memory_plan.hpp"

#include <algorithm>
#include <cstdio>

#include "backend/cuda/device_weights.hpp"
#include "backend/cuda/grouped_experts.hpp"
#include "backend/cuda/workspace.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "model/packed_batch.hpp"

namespace layertap::cuda {

namespace {
// "layer 3's packed weights other than routed experts + 6 routed experts at a time, 84.0 MiB each,
// expanded to bf16"
std::string scratch_parts(const MemoryPlan& p) {
  std::string r;
  if (p.scratch_layer >= 0) r = cat("layer ", p.scratch_layer, "'s packed weights", p.expert_group > 0 ? " other than routed experts" : "");
  if (p.expert_group > 0)
    r += cat(r.empty() ? "" : " + ", p.expert_group, " routed expert", p.expert_group > 1 ? "s" : "", " at a time, ",
             fixed(double(p.expert_scratch_bytes) / double(1 << 20), 1), " MiB each");
  r += p.expert_group > 0 ? ", expanded to bf16" : " expanded to bf16";
  return r + (p.experts_grouped ? "; the routed experts are read as stored by the grouped GEMM, no slots for them" : "");
}

}  // namespace

MemoryPlan plan_memory(const LocalShape& shape, const CudaBackendOptions& o) {
  LT_CHECK(o.max_batch_tokens > 0, "cuda backend: max_batch_tokens must be positive, not ", o.max_batch_tokens);
  LT_CHECK(o.max_capture_points >= 0, "cuda backend: max_capture_points must be >= 0, not ", o.max_capture_points);
  MemoryPlan p;
  // Only TP rank 0 (the group's writer) captures: the other ranks hold no snapshots or pinned targets.
  const std::int64_t points = shape.tp_rank == 0 ? o.max_capture_points : 0;
  const LocalShape s = with_expert_path(shape, o);  // the experts' path sizes the scratch and the workspace
  const DeviceWeights::Sizes w = DeviceWeights::sizes(s);
  p.experts_grouped = s.experts_grouped;
  p.weight_bytes = w.resident;
  p.packed_bytes = w.packed;
  p.scratch_bytes = w.scratch;
  p.scratch_layer = w.scratch_layer;
  p.expert_scratch_bytes = w.expert_scratch;
  p.expert_group = w.expert_group;
  const std::int64_t Tm = o.max_batch_tokens, K = max_kept_positions(o);
  p.workspace_bytes = Workspace::device_bytes(s, {Tm, points, K});
  p.capture_bytes = p.workspace_bytes - Workspace::device_bytes(s, {Tm, 0, K});
  p.kept_bytes = p.workspace_bytes - Workspace::device_bytes(s, {Tm, points, 0});
  p.pinned_bytes = Workspace::pinned_bytes(s, {Tm, points, K});
  const std::size_t fixed = Workspace::device_bytes(s, {0, points, K});
  p.per_token_bytes = (p.workspace_bytes - fixed + std::size_t(Tm) - 1) / std::size_t(Tm);
  constexpr std::int64_t kProbe = 1 << 20;  // positions: the per-position growth, alignment amortized
  p.per_kept_bytes = (Workspace::device_bytes(s, {Tm, points, kProbe}) - Workspace::device_bytes(s, {Tm, points, 0}) +
                      kProbe - 1) / kProbe;
  return p;
}

LocalShape with_expert_path(LocalShape s, const CudaBackendOptions& o) {
  s.expert_group = 0;
  s.experts_grouped = false;
  if (s.any_moe() && o.experts != ExpertKernel::Expand) {
    const std::string problem = grouped_experts_problem(DeviceWeights::layout(s), s);
    LT_CHECK(problem.empty() || o.experts == ExpertKernel::Auto,
             "cuda backend: the grouped expert GEMM cannot read this model's experts: ", problem);
    s.experts_grouped = problem.empty();
    if (s.experts_grouped) return s;
  }
  const std::size_t expert = DeviceWeights::sizes(s).expert_scratch;
  if (expert == 0) return s;
  s.expert_group = std::clamp<std::int64_t>(std::int64_t(o.expert_scratch_bytes / Arena::aligned(expert)), 1,
                                            std::max<std::int64_t>(1, s.local_experts));
  return s;
}

std::size_t device_bytes_needed(const MemoryPlan& p) {
  return p.weight_bytes + p.scratch_bytes + p.workspace_bytes + kDeviceHeadroomBytes;
}

std::int64_t max_tokens_that_fit(const MemoryPlan& p, std::size_t free_bytes, const CudaBackendOptions& o) {
  const std::size_t fixed = p.workspace_bytes - p.per_token_bytes * std::size_t(o.max_batch_tokens);
  const std::size_t room = p.weight_bytes + p.scratch_bytes + fixed + kDeviceHeadroomBytes;
  if (room >= free_bytes || p.per_token_bytes == 0) return -1;
  return std::int64_t(std::min<std::size_t>((free_bytes - room) / p.per_token_bytes, std::size_t(kMaxBatchTokens)));
}

std::int64_t max_sample_that_fits(const MemoryPlan& p, std::size_t free_bytes, const CudaBackendOptions& o) {
  const std::size_t unkept = device_bytes_needed(p) - p.kept_bytes;
  if (unkept > free_bytes) return -1;
  if (p.per_kept_bytes == 0) return kMaxBatchTokens;  // (not reached: every model keeps something)
  const std::size_t positions = (free_bytes - unkept) / p.per_kept_bytes;  // kept: all but the last token
  return std::max<std::int64_t>(o.max_batch_tokens, std::int64_t(std::min<std::size_t>(positions, kMaxBatchTokens)) + 1);
}

std::string describe_device_plan(const MemoryPlan& p, const LocalShape& s, std::size_t free_bytes,
                                 const CudaBackendOptions& o) {
  const std::size_t need = device_bytes_needed(p);
  const std::int64_t most = max_tokens_that_fit(p, free_bytes, o);
  std::string r;
  r += cat("  weights    ", gib(p.weight_bytes), " resident (", gib(p.weight_bytes - p.packed_bytes), " bf16",
           p.packed_bytes > 0 ? cat(", ", gib(p.packed_bytes), " packed FP8/INT4/MXFP4 with scales") : std::string(), ")\n");
  if (p.scratch_bytes > 0) r += cat("  scratch    ", gib(p.scratch_bytes), " (", scratch_parts(p), ")\n");
  else if (p.experts_grouped) r += "  scratch    none (the routed experts are read as stored by the grouped GEMM)\n";
  r += cat("  workspace  ", gib(p.workspace_bytes), " at ", o.max_batch_tokens, " tokens (", p.per_token_bytes / 1024,
           " KiB per token), of which capture buffers ", gib(p.capture_bytes),
           s.tp_rank == 0 ? cat(" (", o.max_capture_points, " points)") : std::string(" (not the writer: none)"),
           " and kept K/V ", gib(p.kept_bytes), "\n");
  const std::int64_t kept = max_kept_positions(o), longest = max_sample_that_fits(p, free_bytes, o);
  r += cat("  kept K/V   ",
           kept > 0 ? cat("for samples of up to ", o.max_sample_tokens, " tokens, run in chunks of ", o.max_batch_tokens)
                    : std::string("none (no sample is longer than a batch)"),
           "; ", p.per_kept_bytes / 1024, " KiB per position of a sample in flight\n");
  r += cat("  headroom   ", gib(kDeviceHeadroomBytes), " for cuBLASLt, the kernels and the context\n");
  r += cat("  device     ", gib(need), " of ", gib(free_bytes), need <= free_bytes ? ": fits" : ": does NOT fit",
           most == kMaxBatchTokens ? cat(" (", most, " tokens per batch, the most --max-batch-tokens allows, would fit)")
           : most >= 0             ? cat(" (up to ", most, " tokens per batch would fit)")
           : p.kept_bytes > 0      ? std::string(" (not even the weights and the longest sample's kept K/V fit)")
                                   : std::string(" (not even the weights fit)"),
           "\n");
  r += cat("  longest    sample that fits beside batches of ", o.max_batch_tokens, " tokens: ",
           longest < 0 ? std::string("none (a batch of that size does not fit)") : cat(longest, " tokens"), "\n");
  return r;
}

void check_fits(const MemoryPlan& p, std::size_t free_bytes, const std::string& device, const CudaBackendOptions& o) {
  const std::size_t need = device_bytes_needed(p);
  if (need <= free_bytes) return;
  const std::int64_t most = max_tokens_that_fit(p, free_bytes, o);
  const std::string fits = most >= 0          ? cat("at most ", most, " tokens per batch would fit")
                           : p.kept_bytes > 0 ? std::string("even the weights and the longest sample's kept keys and "
                                                            "values alone do not fit")
                                              : std::string("even the weights alone do not fit");
  const std::string weights =
      p.packed_bytes > 0 ? cat(" (this rank's tensor-parallel slice: ", gib(p.packed_bytes), " packed as the checkpoint "
                               "stores them, the rest bf16) + dequantization scratch ", gib(p.scratch_bytes),
                               " (", scratch_parts(p), ")")
                         : std::string(" (bf16, this rank's tensor-parallel slice)");
  const std::string kept = p.kept_bytes > 0 ? cat(", of which ", gib(p.kept_bytes), " keys and values kept for samples "
                                                  "of up to ", o.max_sample_tokens, " tokens")
                                            : std::string();
  const std::int64_t longest = max_sample_that_fits(p, free_bytes, o);
  const std::string sample = p.kept_bytes > 0 && longest >= 0
                                 ? cat("; samples of up to ", longest, " tokens would fit beside batches of ",
                                       o.max_batch_tokens)
                                 : std::string();
  LT_FAIL("the CUDA backend does not fit on ", device, ": weights ", gib(p.weight_bytes), weights, " + workspace ",
          gib(p.workspace_bytes), " (max_batch_tokens ",
          o.max_batch_tokens, ", ", o.max_capture_points, " capture points", kept, ") + ", gib(kDeviceHeadroomBytes),
          " headroom for cuBLASLt and the context = ", gib(need), ", but only ", gib(free_bytes), " are free (", fits, sample,
          "). Lower --max-batch-tokens, raise --tp (each rank holds 1/tp of the weights) or free the GPU.");
}

}  // namespace layertap::cuda
