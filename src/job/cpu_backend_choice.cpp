#include "job/cpu_backend_choice.hpp"

#include <algorithm>
#include <chrono>
#include <variant>

#include "backend/cpu/cpu_backend.hpp"
#include "core/backend_names.hpp"
#include "core/checked.hpp"
#include "core/host_memory.hpp"
#include "core/text.hpp"
#include "model/rank_layout.hpp"

namespace layertap::job {
namespace {

class CpuBackendChoice final : public BackendChoice {
 public:
  using BackendChoice::BackendChoice;

  const char* name() const override { return kCpuBackend.data(); }
  bool chunks_long_samples() const override { return true; }
  int64_t device_batch_tokens(MpiGroups&, const RankLoad&) const override { return kCpuBatchTokens; }

  // Float32 weights and a batch's activations (an estimate: the captured states and a few working
  // rows of the widest layer part, in float32).
  HostPlan host_plan(const RankLoad& load) const override {
    const ModelConfig& c = cfg_;
    // The attention's term: the query row (MLA's heads are qk_head_dim = nope + rope wide).
    const int64_t queries = c.mla ? c.num_heads * c.mla->qk_head_dim() : c.q_dim();
    const int64_t widest = std::max({c.hidden_size, c.intermediate_size / shard_.size, queries / shard_.size,
                                     c.moe ? c.moe->expert_intermediate_size * c.moe->experts_per_token : 0});
    const int64_t row = checked_add(checked_mul(load.capture_points, c.hidden_size, "activations"),
                                    checked_mul(8, widest, "activations"), "activations");
    // Chunked prefill keeps, per layer and position of the sample in flight: K and V of the rank's
    // kv heads (GQA) or the normed latent and the rope key (MLA), in float32.
    const LayerSlices first = layer_slices(c, shard_, 0);
    const auto* gqa = std::get_if<GqaSlices>(&first.attn);
    const int64_t kept_row = gqa != nullptr ? 2 * gqa->kv_heads * c.head_dim : c.mla->kv_lora_rank + c.mla->qk_rope_head_dim;
    const int64_t kept = load.max_sample_tokens > load.max_batch_tokens ? load.max_sample_tokens - 1 : 0;
    HostPlan plan{{{"float32 weights", host_weight_bytes(c, shard_)},
                   {"activations", checked_product({load.max_batch_tokens, 4, row}, "a batch's activations")},
                   {"dataset share", load.dataset_bytes}}};
    if (kept > 0)
      plan.parts.push_back({"kept keys and values", checked_product({kept, c.num_layers, kept_row, 4}, "kept rows")});
    return plan;
  }

  RankPlan describe_plan(const Checkpoint&, MpiGroups&, const RankLoad& load) const override {
    const HostPlan host = host_plan(load);
    return {cat("  host       ", human_bytes(host.total()), " (", host.describe(), ")\n"), true};
  }

  std::string pre_read(const Checkpoint& ckpt) const override {
    const auto t0 = std::chrono::steady_clock::now();
    const int64_t bytes = host_weight_bytes(cfg_, shard_);
    const ModelWeights w = load_weights(ckpt, cfg_, shard_);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return cat("decoded ", human_bytes(bytes), " of float32 weights in ", fixed(s, 1), " s (", gb_per_s(bytes, s),
               " of float32), anonymous memory ", human_bytes(anonymous_resident_bytes()),
               " holding them (the cpu backend's load path)");
  }

  std::unique_ptr<Backend> build(const Checkpoint& ckpt, MpiGroups& groups, const RankLoad&) const override {
    return std::make_unique<CpuBackend>(cfg_, load_weights(ckpt, cfg_, shard_), groups.tp());
  }

  std::string host_memory_hint() const override { return " (the cuda backend keeps no weights on the host)"; }
};

}  // namespace

std::unique_ptr<BackendChoice> cpu_backend_choice(const ModelConfig& cfg, const TpShard& shard) {
  return std::make_unique<CpuBackendChoice>(cfg, shard);
}

}  // namespace layertap::job
