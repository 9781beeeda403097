// The cost report's instrument (simulated-GPU builds only): a cost-only device records exactly
// the calls an executing device makes for the same forward, so the report's counts are the real
// ones; every kernel states its work; and the projection's timeline arithmetic on a hand-made
// call list. The executing forward routes by forced choices that give every expert the same
// rows, the cost-only one assumes those rows (CudaProbe::cost_only).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <exception>
#include <map>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/device.hpp"
#include "bench/card_model.hpp"
#include "bench/cost_report.hpp"
#include "bench/measure.hpp"
#include "bench/model_catalog.hpp"
#include "core/text.hpp"
#include "gpu_test.hpp"
#include "host_check.hpp"
#include "model/capture.hpp"
#include "sim/cost.hpp"

namespace {

using namespace layertap;
using test::check;

struct Forward {
  std::vector<sim::Call> calls;
};

// One forward of synthetic `model` (rank 0 of `tp`) over T tokens on `device`, recorded. Forced
// routing: token t's j-th choice is expert (t k + j) mod E, weight 1/k.
std::vector<sim::Call> record_forward(int device, const std::string& model, int tp, MoeSplit split, std::int64_t T) {
  cuda::select_device(device);
  const ModelConfig cfg = synthetic_model_config(model);
  cuda::CudaBackendOptions bo;
  bo.max_batch_tokens = T;
  bo.max_capture_points = 4;
  bo.moe_split = split;
  cuda::CudaProbe probe;
  bo.probe = &probe;
  ModelledAllReduce comm(0, tp);
  const auto backend = cuda::CudaBackend::synthetic(cfg, comm, bo, 1);
  const cuda::LocalShape& s = backend->shape();
  if (s.any_moe()) {
    for (std::int64_t i = 0; i < cfg.num_layers; ++i) {
      std::vector<std::int32_t> experts;
      std::vector<float> weights;
      if (cfg.is_moe_layer(i))
        for (std::int64_t p = 0; p < T * s.top_k; ++p) {
          experts.push_back(std::int32_t(p % s.experts));
          weights.push_back(1.0f / float(s.top_k));
        }
      probe.forced_experts.push_back(experts);
      probe.forced_weights.push_back(weights);
    }
  }
  probe.cost_only = sim::is_cost_only(device);
  probe.assumed_expert_rows = uniform_expert_rows(s, T);  // exact under the forced routing: both runs size alike
  const CapturePlan plan = resolve_capture("eagle3", cfg.num_layers);
  const PackedBatch batch = random_batch(T, T / 2 + 1, cfg.vocab_size, 3);
  sim::record_calls(device, true);
  (void)backend->forward(batch, plan, DType::BF16);
  sim::record_calls(device, false);
  return sim::take_calls(device);
}

std::string describe(const sim::Call& c) {
  return cat(sim::call_kind_name(c.kind), " ", c.name, " [layer ", c.layer, " ", c.part, "] read ", c.work.read,
             " written ", c.work.written, " flops ", c.work.flops, " ops ", c.work.ops, " grid ", c.blocks, "x",
             c.block_threads, " mnk ", c.m, ",", c.n, ",", c.k, " ranks ", c.ranks, " threads ", c.host_threads);
}

void cost_only_matches_executing() {
  struct Case {
    std::string model;
    int tp;
    MoeSplit split;
    std::int64_t T;  // T k a multiple of the experts: forced routing gives every expert the same rows
  };
  const Case cases[] = {{"tiny", 1, MoeSplit::Experts, 40},
                        {"tiny-moe", 2, MoeSplit::Experts, 48},
                        {"tiny-moe", 2, MoeSplit::Intermediate, 48},
                        {"kimi-k2.5-mini", 4, MoeSplit::Experts, 48}};
  for (const Case& c : cases) {
    const std::string what = cat(c.model, " rank 0 of ", c.tp, " (", c.split == MoeSplit::Experts ? "experts" : "intermediate", "), T=", c.T);
    const std::vector<sim::Call> run = record_forward(0, c.model, c.tp, c.split, c.T);
    const std::vector<sim::Call> cost = record_forward(1, c.model, c.tp, c.split, c.T);
    std::map<sim::CallKind, int> counts;
    for (const sim::Call& x : run) counts[x.kind] += 1;
    check(!run.empty() && counts[sim::CallKind::Kernel] > 0 && counts[sim::CallKind::Matmul] > 0,
          cat(what, ": the executing forward recorded ", counts[sim::CallKind::Kernel], " launches, ",
              counts[sim::CallKind::Matmul], " GEMMs, ", counts[sim::CallKind::AllReduce], " all-reduces, ",
              counts[sim::CallKind::HostWait], " host waits, ", counts[sim::CallKind::Copy], " copies"));
    check(run.size() == cost.size(), cat(what, ": ", run.size(), " calls executing, ", cost.size(), " cost-only"));
    std::size_t first_difference = run.size();
    for (std::size_t i = 0; i < std::min(run.size(), cost.size()); ++i)
      if (describe(run[i]) != describe(cost[i])) {
        first_difference = i;
        break;
      }
    check(first_difference == run.size(),
          first_difference == run.size()
              ? cat(what, ": every call the same, in the same order (kind, name, scope, bytes, flops, shape)")
              : cat(what, ": call ", first_difference, " differs: executing ", describe(run[first_difference]),
                    "; cost-only ", describe(cost[first_difference])));
    int unstated = 0;
    std::string names;
    for (const sim::Call& x : run)
      if (x.kind == sim::CallKind::Kernel && !x.work.stated()) {
        ++unstated;
        if (names.find(x.name) == std::string::npos) names += " " + x.name;
      }
    check(unstated == 0, cat(what, ": every kernel launch states its work", unstated ? cat(" (not:", names, ")") : ""));
    if (c.model != "kimi-k2.5-mini") continue;
    // Kimi-K2.5's experts and top-k at width 256 (384 experts, 96 on this rank): a MoE layer is at
    // most 24 launches and 8 library GEMMs whatever the expert count, and never waits on the host;
    // the forward waits at most 3 times (the capture's copies and the batch's end).
    const ModelConfig cfg = synthetic_model_config(c.model);
    std::map<std::int64_t, std::map<sim::CallKind, int>> per_layer;
    for (const sim::Call& x : run) per_layer[x.layer][x.kind] += 1;
    int worst_launches = 0, worst_gemms = 0, layer_waits = 0;
    for (auto& [layer, k] : per_layer) {
      if (layer < 0 || !cfg.is_moe_layer(layer)) continue;
      worst_launches = std::max(worst_launches, k[sim::CallKind::Kernel]);
      worst_gemms = std::max(worst_gemms, k[sim::CallKind::Matmul]);
      layer_waits += k[sim::CallKind::HostWait];
    }
    check(worst_launches <= 24 && worst_gemms <= 8 && layer_waits == 0 && counts[sim::CallKind::HostWait] <= 3,
          cat(what, ": a MoE layer ", worst_launches, " launches (at most 24), ", worst_gemms,
              " cuBLASLt GEMMs (at most 8), ", layer_waits, " host waits in the MoE layers; the forward ",
              counts[sim::CallKind::HostWait], " host waits (at most 3)"));
  }
}

// The timeline on a hand-made list: a GEMM, a host wait, host work, a kernel, a copy to the host.
void projection_arithmetic() {
  const Card card{"test", "test card", 80, 1000, 100, 10, 100, 100, 10};
  HostModel h;
  h.launch_us = 5;
  h.kernel_floor_us = 1;
  h.host_wait_us = 10;
  h.gemm_half_rows = 0;  // full rate at any size
  h.first_touch_gbs = 1;
  std::vector<sim::Call> calls(5);
  calls[0].kind = sim::CallKind::Matmul;  // 2e9 flops at 100 TFLOP/s = 20 us (bytes 1e6 at 1000 GB/s = 1 us)
  calls[0].m = calls[0].n = calls[0].k = 1000;
  calls[0].work.flops = 2e9;
  calls[0].work.read = 1e6;
  calls[0].stream = 1;
  calls[0].part = "a";
  calls[1].kind = sim::CallKind::HostWait;  // host: max(5, 25) + 10 = 35 (stream 1 done)
  calls[1].waits_for = 1;
  calls[2].kind = sim::CallKind::HostWork;  // 1e4 bytes first-touched at 1 GB/s = 10 us: host 45
  calls[2].work.written = 1e4;
  calls[2].host_threads = 1;
  calls[3].kind = sim::CallKind::Kernel;  // issued at 50; 1e7 bytes at 1000 GB/s = 10 us: 50..60 (idle 25..50)
  calls[3].work.read = 1e7;
  calls[3].blocks = 1000;
  calls[3].block_threads = 256;
  calls[3].stream = 1;
  calls[3].part = "b";
  calls[4].kind = sim::CallKind::Copy;  // issued at 55 on the copy engine: 1e5 bytes at 10 GB/s + 2 us = 12 us: 67
  calls[4].to_host = true;
  calls[4].work.read = 1e5;
  calls[4].stream = 2;
  const Projection p = project(calls, card, h, [](std::int64_t) { return std::string("x"); });
  const auto near = [](double a, double b) { return std::fabs(a - b) < 1e-9; };
  check(near(p.forward_ms, 0.067), cat("projection: forward ", p.forward_ms, " ms (expected 0.067)"));
  check(near(p.where_ms.at("x: a"), 0.020) && near(p.where_ms.at("x: b"), 0.010),
        cat("projection: the GEMM 0.020 ms, the kernel 0.010 ms"));
  check(near(p.where_ms.at("GPU idle (the host was waiting or launching)"), 0.030),
        "projection: the GPU idles 0.005 ms before the GEMM and 0.025 ms while the host waits and works");
  double sum = 0;
  for (const auto& [k, v] : p.where_ms) sum += v;
  check(near(sum, p.forward_ms), cat("projection: the parts sum to the forward (", sum, " ms)"));

  // A host wait on an event waits for the work before the event's record, not for what the
  // stream runs after it: GEMM 5..25, the record (its work done at 25), a kernel issued at 10 that
  // runs 25..35; the host waits for the record: max(10, 25) + 10 = 35, then 2 us of host work: 37.
  std::vector<sim::Call> ev(5);
  ev[0] = calls[0];
  ev[1].kind = sim::CallKind::EventRecord;  // costs the host nothing
  ev[1].stream = 1;
  ev[1].event = 7;
  ev[2] = calls[3];
  ev[3].kind = sim::CallKind::HostWait;
  ev[3].event = 7;
  ev[4].kind = sim::CallKind::HostWork;
  ev[4].work.written = 2e3;
  ev[4].host_threads = 1;
  const Projection q = project(ev, card, h, [](std::int64_t) { return std::string("x"); });
  check(near(q.forward_ms, 0.037), cat("projection: a host wait on an event ends with the event's work: forward ",
                                       q.forward_ms, " ms (expected 0.037: the host's 35 + 2 after the GPU's 35)"));
}

}  // namespace

int main() {
  if (!gpu_test::gpu_visible()) return gpu_test::kSkip;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    if (!sim::make_cost_only(1, std::size_t(1) << 40)) throw std::runtime_error("device 1 is already in use");
    cost_only_matches_executing();
    projection_arithmetic();
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  return test::finish();
}
