// `layertap bench --project CARDS` (simulated-GPU builds): one rank's forward of a synthetic
// model at full width, recorded call by call on a cost-only simulated device (sim/cost.hpp:
// nothing runs, nothing is touched, so a Kimi-K2.5 rank share fits on any machine), printed as
// the call list per layer kind (launches, GEMMs with their shapes, all-reduce bytes, host waits,
// copies, bytes and FLOPs) and projected onto named cards (bench/card_model.hpp), with every
// assumption beside it. A model, never a measurement.
#pragma once
#include <cstdint>
#include <ostream>
#include <vector>

#include "backend/cuda/local_shape.hpp"
#include "bench/run_bench.hpp"

namespace layertap {

// Runs the report for o.model, o.tp_shard/o.tp_rank/o.moe_split, each of o.tokens, o.capture, on
// the simulated GPU o.device, which must not have been used yet; projects onto o.project.
// Throws layertap::Error in builds without the simulated GPU.
int run_cost_report(const BenchOptions& o, std::ostream& out);

// Rows each of the rank's local experts takes when a batch of T tokens routes uniformly: the
// T k (token, choice) pairs spread evenly over all experts, expert g taking
// floor((g + 1) T k / E) - floor(g T k / E). The cost report's assumption (CudaProbe::cost_only).
std::vector<std::int32_t> uniform_expert_rows(const cuda::LocalShape& shape, std::int64_t T);

}  // namespace layertap
