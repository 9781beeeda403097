// What the benchmark models instead of running: a tensor-parallel group's step from one rank's
// forward time, and a skewed (Zipf) expert load on a synthetic router.
#pragma once
#include <cstdint>
#include <vector>

namespace layertap {

// The projection of a tensor-parallel group's step from one rank's forward time: each of the
// 2 * layers all-reduces of (tokens, hidden) bf16 takes 2 (n - 1) / n * bytes / bus (ring
// all-reduce bus bandwidth), not overlapped with compute; every rank of the group works on the
// same batch, so the group's tokens/s is tokens / step.
struct TpProjection {
  double allreduce_ms = 0;  // one all-reduce
  double step_ms = 0;       // rank forward + all the all-reduces
  double tokens_per_s = 0;  // of the whole group
};
TpProjection project_tp(std::int64_t tokens, std::int64_t hidden, std::int64_t layers, int ranks, double bus_gbs,
                        double rank_forward_ms);

// The class of bus a bandwidth stands for, as the projection table labels it: NVLink-class,
// PCIe Gen5 x16, slower bus.
const char* bus_label(double gbs);

// Router logit offsets of a Zipf(s) expert load: -s ln(e + 1) for expert e (expert 0 the hottest).
std::vector<float> zipf_logit_offsets(std::int64_t experts, double s);

}  // namespace layertap
