// The routed experts of every MoE layer as kernels/grouped_gemm reads them: per layer and
// projection, a device table of each local expert's stored parts (data and scales, where
// DeviceWeights placed them), and the format they share. The tables live in the workspace (16
// bytes a part: Kimi-K2.5 at --tp 8, 60 layers x 48 experts x 3 parts, 135 KiB).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/device_weights.hpp"
#include "kernels/grouped_gemm.cuh"

namespace layertap::cuda {

// Why the grouped GEMM cannot read this rank's routed experts as they are stored ("" when it can,
// or when there are none): experts of mixed formats or biases, shapes or block phases the
// kernel refuses (kernels/grouped_gemm.cuh). `w` may be a layout (DeviceWeights::layout).
std::string grouped_experts_problem(const DeviceWeights& w, const LocalShape& shape);

// The most stored parts of one expert's gate/up and down together: gate, up (one checkpoint module
// each, or one fused module) and down. Sizes the tables (Workspace::expert_parts).
inline constexpr std::int64_t kGroupedPartsPerExpert = 3;

struct GroupedLayer {
  kernels::GroupedWeights gate_up;  // (2 Ie, H) per expert: gate rows, then up rows
  kernels::GroupedWeights down;     // (H, Ie)
};

class GroupedExperts {
 public:
  GroupedExperts() = default;
  // Builds the tables of every MoE layer of `w` and uploads them (synchronously) to `tables`, the
  // workspace's (M, n, kGroupedPartsPerExpert) parts; throws naming the problem when
  // grouped_experts_problem is not empty.
  GroupedExperts(const DeviceWeights& w, const LocalShape& shape, kernels::GroupedWeightPart* tables);
  const GroupedLayer& layer(std::int64_t i) const { return layers_[std::size_t(i)]; }

 private:
  std::vector<GroupedLayer> layers_;  // [layers]; dense layers' left empty
};

}  // namespace layertap::cuda
