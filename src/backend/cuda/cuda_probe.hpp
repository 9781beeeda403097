// What benchmarks and tests set on a CudaBackend's forward passes, and read back from them, beside
// the captured states (CudaBackendOptions::probe). A job never sets one; the caller owns it and
// keeps it alive as long as the backend.
#pragma once
#include <cstdint>
#include <vector>

namespace layertap::cuda {

struct CudaProbe {
  // In, read at each forward. routing_skew [E]: added to every router logit of expert e before
  // routing (a skewed expert load on synthetic weights); empty: none.
  std::vector<float> routing_skew;
  // In: expert choices taken instead of the router's, per layer (empty for dense layers):
  // forced_experts[i] (T, top_k) global expert ids, forced_weights[i] (T, top_k), for batches of
  // exactly that T. Lets a bf16 forward be compared with a float32 reference without the routing
  // flips bf16 rounding causes near ties. Empty: the router decides.
  std::vector<std::vector<std::int32_t>> forced_experts;
  std::vector<std::vector<float>> forced_weights;
  // In: a cost-only forward, on a cost-only device of the simulated GPU (sim/cost.hpp), where
  // nothing the device computes reaches the host: each MoE layer takes assumed_expert_rows[e]
  // rows for local expert e instead of the counts it would read back, and the forward does not
  // check what it reads (the bad-token flag). The cost report sets it; nothing else may.
  bool cost_only = false;
  std::vector<std::int32_t> assumed_expert_rows;  // [local experts]

  // Out, after each forward. layer_ms [L]: milliseconds of each decoder layer, packed weights'
  // expansion included (with CudaBackendOptions::profile_layers; else empty).
  std::vector<float> layer_ms;
  // [L]: rows (token, expert pairs) each MoE layer ran on this rank's experts, and the rows of its
  // busiest expert; 0 for dense layers.
  std::vector<std::int64_t> moe_rows, moe_busiest;
};

}  // namespace layertap::cuda
