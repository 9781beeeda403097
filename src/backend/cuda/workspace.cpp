#include "backend/cuda/workspace.hpp"

#include <algorithm>

#include "backend/cuda/gemm.hpp"
#include "backend/cuda/grouped_experts.hpp"
#include "kernels/attention.cuh"

namespace layertap::cuda {

namespace {
using bf16 = __nv_bfloat16;

// One layout for counting and placing: `w` is null when only counting.
void layout(Arena& dev, Arena& host, const LocalShape& s, const WorkspaceSize& size, Workspace* w) {
  const std::int64_t Tm = size.max_tokens, P = size.max_points, K = size.max_kept;
  const std::int64_t H = s.hidden, meta = Workspace::meta_ints(Tm);
  const std::int64_t KT = checked_add(K, Tm, "workspace: kept + batch tokens");  // rows of a sample's keys
  WorkspaceBuffers b;  // copied into *w at the end
  b.x = dev.take<bf16>({Tm, H});
  b.h = dev.take<bf16>({Tm, H});
  b.delta = dev.take<bf16>({Tm, H});
  if (!s.mla) {
    b.qkv = dev.take<bf16>({Tm, s.qkv_dim()});
    b.ctx = dev.take<bf16>({Tm, s.q_dim()});
    if (K > 0) b.keys = dev.take<bf16>({KT, Workspace::kept_row(s)});
  } else {
    const std::int64_t nh = s.heads, qk = s.mla_qk();
    b.mla_q = dev.take<bf16>({Tm, nh, qk});
    b.mla_qa = dev.take<bf16>({Tm, s.q_lora});
    b.mla_ckv = dev.take<bf16>({Tm, s.kv_lora + s.rope_dim});
    b.mla_latent = dev.take<bf16>({KT, s.kv_lora});
    b.mla_kv = dev.take<bf16>({KT, nh, s.nope + s.v_dim});
    b.mla_k = dev.take<bf16>({KT, nh, qk});
    b.mla_v = dev.take<bf16>({KT, nh, s.v_dim});
    b.ctx = dev.take<bf16>({Tm, nh, s.v_dim});
  }
  b.kept = dev.take<bf16>({s.layers, K, Workspace::kept_row(s)});
  const std::int64_t I = std::max(s.any_dense_ffn() ? s.inter : 0, s.any_moe() ? s.shared_inter : 0);
  b.gate_up = dev.take<bf16>({Tm, 2, I});
  b.act = dev.take<bf16>({Tm, I});
  if (s.any_moe()) {
    const std::int64_t E = s.experts, k = s.top_k, n = s.local_experts, R = s.max_routed_rows(Tm);
    b.logits = dev.take<float>({Tm, E});
    b.choice = dev.take<float>({Tm, E});
    b.route_experts = dev.take<std::int32_t>({Tm, k});
    b.route_weights = dev.take<float>({Tm, k});
    b.slot = dev.take<std::int32_t>({Tm, k});
    b.perm_token = dev.take<std::int32_t>(R);
    b.counts = dev.take<std::int32_t>(n);
    b.offsets = dev.take<std::int32_t>(n + 1);
    b.x_perm = dev.take<bf16>({R, H});
    b.gu_perm = dev.take<bf16>({R, 2, s.expert_inter});
    b.act_perm = dev.take<bf16>({R, s.expert_inter});
    b.y_perm = dev.take<bf16>({R, H});
    if (s.shared_inter > 0) b.shared_out = dev.take<bf16>({Tm, H});
    b.logit_offset = dev.take<float>(E);
    if (s.experts_grouped)
      b.expert_parts = dev.take<kernels::GroupedWeightPart>({s.moe_layers_before(s.layers), n, kGroupedPartsPerExpert});
    b.host_counts = host.take<std::int32_t>({s.moe_layers_before(s.layers), n});
  }
  b.snapshots = dev.take<bf16>({P, Tm, H});
  b.meta = dev.take<std::int32_t>(meta);
  b.bad_token = dev.take<std::int32_t>(1);
  b.inv_freq = dev.take<float>({s.layers, s.rope_freqs()});  // each layer's RoPE (LayerConfig::rope)
  b.gemm = dev.take<std::byte>(std::int64_t(Gemm::kWorkspaceBytes));
  b.host_meta = host.take<std::int32_t>(meta);
  b.host_bad_token = host.take<std::int32_t>(1);
  b.host_states = host.take<std::uint16_t>({P, Tm, H});
  // The capturing rank's record of every MoE layer's choices (the output's /routed_experts).
  if (P > 0 && s.any_moe()) b.host_routes = host.take<std::int32_t>({s.moe_layers_before(s.layers), Tm, s.top_k});
  if (w == nullptr) return;
  *static_cast<WorkspaceBuffers*>(w) = b;
}
}  // namespace

std::int64_t Workspace::meta_ints(std::int64_t max_tokens) {
  return 2 * max_tokens + 2 * kernels::max_flash_tiles(max_tokens);
}

std::int64_t Workspace::kept_row(const LocalShape& s) {
  return s.mla ? s.kv_lora + s.rope_dim : 2 * s.kv_heads * s.head_dim;
}

std::size_t Workspace::device_bytes(const LocalShape& s, const WorkspaceSize& size) {
  Arena dev, host;
  layout(dev, host, s, size, nullptr);
  return dev.used();
}

std::size_t Workspace::pinned_bytes(const LocalShape& s, const WorkspaceSize& size) {
  Arena dev, host;
  layout(dev, host, s, size, nullptr);
  return host.used();
}

Workspace::Workspace(const LocalShape& s, const WorkspaceSize& size)
    : device_(device_bytes(s, size)), pinned_(pinned_bytes(s, size)) {
  Arena dev(device_.data(), device_.bytes()), host(pinned_.data(), pinned_.bytes());
  layout(dev, host, s, size, this);
}

}  // namespace layertap::cuda
