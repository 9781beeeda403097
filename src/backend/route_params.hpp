// The router's parameters as kernels::route_token takes them, from the checkpoint's MoE config:
// one translation for the CUDA backend's LocalShape and the tests that compare the shared router
// with cpu::route. Needs the project root on the include path (kernels/).
#pragma once
#include <cstdint>

#include "kernels/moe_routing.hpp"
#include "model/hf_config.hpp"

namespace layertap {

inline kernels::RouteParams route_params(const MoeConfig& m) {
  kernels::RouteParams p;
  switch (m.routing) {
    case MoeConfig::Routing::SigmoidGroupedTopk: p.kind = kernels::RouteParams::SigmoidGroupedTopk; break;
    case MoeConfig::Routing::SoftmaxTopk: p.kind = kernels::RouteParams::SoftmaxTopk; break;
    case MoeConfig::Routing::TopkSoftmax: p.kind = kernels::RouteParams::TopkSoftmax; break;
    case MoeConfig::Routing::TopkSigmoid: p.kind = kernels::RouteParams::TopkSigmoid; break;
  }
  p.num_experts = std::int32_t(m.num_experts);
  p.top_k = std::int32_t(m.experts_per_token);
  p.n_group = std::int32_t(m.n_group);
  p.topk_group = std::int32_t(m.topk_group);
  p.norm_topk_prob = m.norm_topk_prob ? 1 : 0;
  p.routed_scaling_factor = float(m.routed_scaling_factor);
  return p;
}

}  // namespace layertap
