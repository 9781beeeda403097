#include "bench/projection.hpp"

#include <algorithm>
#include <cmath>

namespace layertap {

TpProjection project_tp(std::int64_t tokens, std::int64_t hidden, std::int64_t layers, int ranks, double bus_gbs,
                        double rank_forward_ms) {
  TpProjection p;
  const double bytes = double(tokens) * double(hidden) * 2.0;  // bf16
  p.allreduce_ms = ranks > 1 ? 2.0 * double(ranks - 1) / double(ranks) * bytes / (bus_gbs * 1e9) * 1e3 : 0.0;
  p.step_ms = rank_forward_ms + 2.0 * double(layers) * p.allreduce_ms;
  p.tokens_per_s = double(tokens) / (p.step_ms * 1e-3);
  return p;
}

const char* bus_label(double gbs) {
  if (gbs >= 200) return "NVLink-class";
  if (gbs >= 40) return "PCIe Gen5 x16";
  return "slower bus";
}

std::vector<float> zipf_logit_offsets(std::int64_t experts, double s) {
  std::vector<float> o(std::size_t(std::max<std::int64_t>(experts, 0)));
  for (std::size_t e = 0; e < o.size(); ++e) o[e] = float(-s * std::log(double(e) + 1.0));
  return o;
}

}  // namespace layertap
