// Float32 CPU backend: the reference forward pass, OpenBLAS for the matrix products. A layer is
// assembled from parts: GQA or MLA attention, dense or MoE FFN.
#pragma once
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cpu/moe.hpp"
#include "backend/cpu/ops.hpp"
#include "comm/tp_comm.hpp"
#include "core/backend_names.hpp"
#include "model/hf_config.hpp"
#include "model/weights.hpp"

namespace layertap {

class CpuBackend final : public Backend {
 public:
  // `comm` is this rank's tensor-parallel group; the weights must be this rank's slice.
  CpuBackend(ModelConfig config, ModelWeights weights, TpComm& comm);
  std::string name() const override { return std::string(kCpuBackend); }
  std::vector<std::vector<std::byte>> forward(const PackedBatch& batch, const CapturePlan& plan,
                                              DType dtype) override;
  std::vector<int16_t> routed_experts() const override;
  // The routing of each layer in the last forward, [L]: (T, k) choices and weights of a MoE layer,
  // none of a dense one. A bf16 backend can be run on the same choices (CudaProbe::forced_experts),
  // which its rounding would otherwise flip between nearly tied experts.
  const std::vector<cpu::Routing>& routing() const { return routing_; }
  // verify: the next forward routes each token as recorded ([T, M, k], a bf16 backend's choice)
  // instead of choosing, and reports (implausible_routing) a recorded choice that no forward within
  // `state_bound` of this one could have made.
  void replay_routing(std::vector<int16_t> experts, double state_bound);
  // After a replaying forward: the first implausible recorded choice ("layer l, token t: ..."), or "".
  const std::string& implausible_routing() const { return implausible_; }

 private:
  // One layer's kept rows of the sample in flight (model/packed_batch.hpp), [positions, width]:
  // GQA: K and V of this rank's kv heads (after RoPE); MLA: k = [normed latent | rope key], v empty.
  struct KeptRows {
    std::vector<float> k, v;
  };

  // The parts of one decoder layer, each leaving this rank's share of its row-parallel output
  // (forward's loop sums the shares over the group).
  void attention(int64_t layer, const float* h, const PackedBatch& batch, float* out);
  void gqa(int64_t layer, const GqaWeights& a, const float* h, const PackedBatch& batch, KeptRows& kept,
           float* out);
  void ffn(int64_t layer, const float* h, int64_t T, float* out);

  ModelConfig c_;
  ModelWeights w_;
  TpComm& comm_;
  std::vector<std::optional<cpu::Rope>> rope_;  // [L] each layer's (LayerConfig::rope; nullopt: NoPE)
  std::vector<KeptRows> kept_;  // [L]
  int64_t kept_positions_ = 0;  // positions of the sample in flight kept (0: none)
  std::vector<cpu::Routing> routing_;          // [L] the last forward's choices (empty for dense layers)
  std::vector<std::vector<int32_t>> replay_;   // [M][T * k] the next forward's, when replaying
  double replay_bound_ = 0;
  int64_t last_tokens_ = 0;  // T of the last forward
  std::string implausible_;
};

}  // namespace layertap
