#include "bench/cost_report.hpp"

#include <algorithm>
#include <cstdio>
#include <map>

#include "core/error.hpp"

#if defined(LAYERTAP_CUDA_SIM)
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/device.hpp"
#include "bench/card_model.hpp"
#include "bench/measure.hpp"
#include "bench/model_catalog.hpp"
#include "core/text.hpp"
#include "model/capture.hpp"
#include "sim/sim.hpp"
#endif

namespace layertap {

std::vector<std::int32_t> uniform_expert_rows(const cuda::LocalShape& s, std::int64_t T) {
  std::vector<std::int32_t> rows;
  if (!s.any_moe()) return rows;
  const std::int64_t pairs = T * s.top_k;
  for (std::int64_t e = 0; e < s.local_experts; ++e) {
    const std::int64_t g = s.moe_whole ? s.first_expert + e : e;
    rows.push_back(std::int32_t((g + 1) * pairs / s.experts - g * pairs / s.experts));
  }
  return rows;
}

#if !defined(LAYERTAP_CUDA_SIM)

int run_cost_report(const BenchOptions&, std::ostream&) {
  LT_FAIL("bench: --project needs the simulated GPU's build (cmake -DLAYERTAP_CUDA_SIM=ON): it records a forward's "
          "calls without running them");
}

#else

namespace {

std::string gb(double bytes) { return fixed(bytes / 1e9, 3); }

// Per layer kind: the calls of one forward summed, and the number of layers of that kind.
struct KindTotals {
  std::int64_t layers = 0;
  std::map<sim::CallKind, std::int64_t> calls;
  double read = 0, written = 0, flops = 0, allreduce_bytes = 0, host_copy_bytes = 0;
};

void print_counts(std::ostream& out, const std::vector<sim::Call>& calls, const ModelConfig& cfg,
                  const std::function<std::string(std::int64_t)>& kind_of) {
  std::map<std::string, KindTotals> kinds;
  for (std::int64_t i = 0; i < cfg.num_layers; ++i) kinds[kind_of(i)].layers += 1;
  kinds[kind_of(-1)].layers = 1;
  std::map<sim::CallKind, std::int64_t> total;
  for (const sim::Call& c : calls) {
    KindTotals& k = kinds[kind_of(c.layer)];
    k.calls[c.kind] += 1;
    total[c.kind] += 1;
    if (c.kind == sim::CallKind::HostWork) continue;
    if (c.kind == sim::CallKind::AllReduce) k.allreduce_bytes += c.work.read;
    if (c.to_host || c.from_host) {
      k.host_copy_bytes += std::max(c.work.read, c.work.written);
    } else {
      k.read += c.work.read;
      k.written += c.work.written;
    }
    k.flops += c.work.flops;
  }
  out << " per layer of each kind     | layers | launches | GEMMs | all-reduces (GB) | host waits | copies+memsets "
         "(host GB) | DRAM read GB | written GB | TFLOP\n";
  for (const auto& [name, k] : kinds) {
    const double n = double(k.layers);
    const auto per = [&](sim::CallKind kind) {
      const auto it = k.calls.find(kind);
      return it == k.calls.end() ? 0.0 : double(it->second) / n;
    };
    char line[320];
    std::snprintf(line, sizeof line, " %-26s | %6lld | %8.1f | %5.1f | %5.1f (%8.3f) | %10.1f | %6.1f (%8.3f)       | %12.3f | %10.3f | %6.3f\n",
                  name.c_str(), static_cast<long long>(k.layers), per(sim::CallKind::Kernel), per(sim::CallKind::Matmul),
                  per(sim::CallKind::AllReduce), k.allreduce_bytes / n / 1e9, per(sim::CallKind::HostWait),
                  per(sim::CallKind::Copy) + per(sim::CallKind::Memset), k.host_copy_bytes / n / 1e9, k.read / n / 1e9,
                  k.written / n / 1e9, k.flops / n / 1e12);
    out << line;
  }
  out << " whole forward: " << total[sim::CallKind::Kernel] << " kernel launches, " << total[sim::CallKind::Matmul]
      << " cuBLASLt GEMMs, " << total[sim::CallKind::AllReduce] << " all-reduces, " << total[sim::CallKind::HostWait]
      << " host waits, " << total[sim::CallKind::Copy] + total[sim::CallKind::Memset] << " copies and memsets\n";
}

// The full-width call list of the first layer of each kind (and outside the layers), identical
// calls folded: part, call, shape, count, bytes and flops per call.
void print_call_list(std::ostream& out, const std::vector<sim::Call>& calls, const ModelConfig& cfg,
                     const std::function<std::string(std::int64_t)>& kind_of) {
  std::map<std::string, std::int64_t> first;  // kind -> its first layer
  for (std::int64_t i = cfg.num_layers - 1; i >= 0; --i) first[kind_of(i)] = i;
  first[kind_of(-1)] = -1;
  for (const auto& [kind, layer] : first) {
    out << "\n calls of " << (layer >= 0 ? cat(kind, " (layer ", layer, ")") : kind) << ":\n";
    struct Row {
      std::string part, call, shape;
      std::int64_t count = 0;
      sim::Call sample;
    };
    std::vector<Row> rows;
    for (const sim::Call& c : calls) {
      if (c.layer != layer) continue;
      std::string call = c.kind == sim::CallKind::Kernel ? short_kernel_name(c.name) : c.name;
      std::string shape;
      if (c.kind == sim::CallKind::Kernel) shape = cat(c.blocks, " blocks x ", c.block_threads);
      if (c.kind == sim::CallKind::Matmul) shape = cat(c.m, " x ", c.n, " x ", c.k);
      if (c.kind == sim::CallKind::AllReduce) shape = cat(c.ranks, " ranks");
      if (c.kind == sim::CallKind::HostWork) shape = cat(c.host_threads, " threads");
      if (c.kind == sim::CallKind::StreamWait || c.kind == sim::CallKind::EventRecord) continue;
      const auto same = [&](const Row& r) {
        return r.part == c.part && r.call == call && r.shape == shape && r.sample.work.read == c.work.read &&
               r.sample.work.written == c.work.written && r.sample.work.flops == c.work.flops;
      };
      auto it = std::find_if(rows.begin(), rows.end(), same);
      if (it == rows.end()) {
        rows.push_back(Row{c.part, call, shape, 0, c});
        it = rows.end() - 1;
      }
      it->count += 1;
    }
    out << "  part                 | kind       | call                                     | shape                  "
           "|  count | read MB/call | written MB/call | GFLOP/call | Ginstr/call\n";
    for (const Row& r : rows) {
      char line[400];
      std::snprintf(line, sizeof line, "  %-20s | %-10s | %-40.40s | %-22.22s | %6lld | %12.3f | %15.3f | %10.3f | %11.3f\n",
                    r.part.c_str(), sim::call_kind_name(r.sample.kind), r.call.c_str(), r.shape.c_str(),
                    static_cast<long long>(r.count), r.sample.work.read / 1e6, r.sample.work.written / 1e6,
                    r.sample.work.flops / 1e9, r.sample.work.ops / 1e9);
      out << line;
    }
  }
}

void print_shares(std::ostream& out, const std::map<std::string, double>& ms, double total, std::size_t top) {
  std::vector<std::pair<std::string, double>> v(ms.begin(), ms.end());
  std::sort(v.begin(), v.end(), [](const auto& a, const auto& b) { return a.second > b.second; });
  double rest = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (i >= top) {
      rest += v[i].second;
      continue;
    }
    char line[256];
    std::snprintf(line, sizeof line, "    %-70.70s %10.2f ms %6.1f%%\n", v[i].first.c_str(), v[i].second,
                  100.0 * v[i].second / total);
    out << line;
  }
  if (rest > 0) {
    char line[256];
    std::snprintf(line, sizeof line, "    %-70s %10.2f ms %6.1f%%\n", "(the rest)", rest, 100.0 * rest / total);
    out << line;
  }
}

}  // namespace

int run_cost_report(const BenchOptions& o, std::ostream& out) {
  std::vector<const Card*> cards;
  for (const std::string& name : o.project) cards.push_back(&find_card(name));
  const int devices = cuda::visible_device_count();
  LT_CHECK(devices > o.device, "bench: simulated GPU ", o.device, " is not visible (", devices, " device(s))");
  LT_CHECK(sim::make_cost_only(o.device, std::size_t(1) << 40), "bench: --project needs an unused simulated GPU (",
           o.device, " has allocations)");
  cuda::select_device(o.device);
  const ModelConfig cfg = synthetic_model_config(o.model, o.layers);
  const TpShard shard{o.tp_rank, o.tp_shard, parse_moe_split(o.moe_split)};
  const CapturePlan plan = resolve_capture(o.capture, cfg.num_layers);
  cuda::CudaBackendOptions bo;
  bo.max_batch_tokens = *std::max_element(o.tokens.begin(), o.tokens.end());
  bo.max_capture_points = std::int64_t(plan.points.size());
  bo.attention = cuda::parse_attention_kernel(o.attention);
  bo.experts = cuda::parse_expert_kernel(o.experts);
  bo.moe_split = shard.moe_split;
  cuda::CudaProbe probe;
  probe.cost_only = true;
  bo.probe = &probe;
  ModelledAllReduce comm(o.tp_rank, o.tp_shard);
  const auto backend = cuda::CudaBackend::synthetic(cfg, comm, bo, o.seed);
  const cuda::LocalShape& shape = backend->shape();
  BufferPool result_buffers(plan.points.size());
  backend->set_result_pool(&result_buffers);
  const double device_gib = double(sim::counters(o.device).peak_device_bytes) / double(std::size_t(1) << 30);
  const auto kind_of = [&](std::int64_t layer) -> std::string {
    if (layer < 0) return "outside the layers";
    return cfg.is_moe_layer(layer) ? "MoE layer" : "dense layer";
  };
  const HostModel host;
  std::int64_t moe_layers = 0;
  for (std::int64_t i = 0; i < cfg.num_layers; ++i) moe_layers += cfg.is_moe_layer(i) ? 1 : 0;

  out << "cost report: a model, not a measurement. Synthetic " << o.model << ", rank " << o.tp_rank << " of a "
      << o.tp_shard << "-GPU tensor-parallel group (--moe-split " << o.moe_split << "), " << cfg.num_layers
      << " layers (" << moe_layers << " MoE), capture " << o.capture << ", " << backend->description()
      << "; one forward per batch recorded by the "
      << "simulated GPU without running it (a cost-only device); the rank's device memory "
      << fixed(device_gib, 2) << " GiB.\n";
  struct Result {
    std::int64_t T;
    std::vector<Projection> per_card;
  };
  std::vector<Result> results;
  for (const std::int64_t T : o.tokens) {
    const PackedBatch batch = random_batch(T, o.sample_tokens, cfg.vocab_size, o.seed + std::uint64_t(T));
    probe.assumed_expert_rows = uniform_expert_rows(shape, T);
    // The job's steady state: the states' buffers come back from the writer, so the recorded
    // forward reuses those of the one before (core/buffer_pool.hpp).
    result_buffers.give(backend->forward(batch, plan, DType::BF16));
    sim::record_calls(o.device, true);
    result_buffers.give(backend->forward(batch, plan, DType::BF16));
    sim::record_calls(o.device, false);
    const std::vector<sim::Call> calls = sim::take_calls(o.device);
    std::vector<std::string> unstated;
    for (const sim::Call& c : calls)
      if (c.kind == sim::CallKind::Kernel && !c.work.stated() &&
          std::find(unstated.begin(), unstated.end(), c.name) == unstated.end())
        unstated.push_back(c.name);
    out << "\n=== " << T << " tokens (samples of " << o.sample_tokens << ")";
    if (shape.any_moe()) {
      std::int64_t rows = 0;
      for (const std::int32_t r : probe.assumed_expert_rows) rows += r;
      out << "; every MoE layer assumes uniform routing: " << rows << " (token, expert) rows on this rank's "
          << shape.local_experts << " experts";
    }
    out << " ===\n";
    for (const std::string& k : unstated) out << " warning: kernel " << k << " states no work; the projection counts it as free\n";
    print_counts(out, calls, cfg, kind_of);
    print_call_list(out, calls, cfg, kind_of);
    Result r{T, {}};
    for (const Card* card : cards) {
      const Projection p = project(calls, *card, host, kind_of);
      r.per_card.push_back(p);
      out << "\n projected on " << card->description << " (a model, not a measurement): forward "
          << fixed(p.forward_ms, 2) << " ms, " << fixed(double(T) / (p.forward_ms * 1e-3), 0) << " tokens/s for the "
          << o.tp_shard << "-GPU group";
      if (device_gib > card->memory_gib) out << " (the rank's " << fixed(device_gib, 1) << " GiB do not fit the card's " << fixed(card->memory_gib, 0) << " GiB)";
      out << "\n  by where in the forward:\n";
      print_shares(out, p.where_ms, p.forward_ms, 12);
      out << "  by kernel or library call:\n";
      print_shares(out, p.sink_ms, p.forward_ms, 10);
    }
    results.push_back(std::move(r));
  }
  out << "\n projected tokens/s of the " << o.tp_shard << "-GPU group (a model, not a measurement)\n card         ";
  for (const Result& r : results) {
    char cell[32];
    std::snprintf(cell, sizeof cell, " | %8lld tok", static_cast<long long>(r.T));
    out << cell;
  }
  out << "\n";
  for (std::size_t c = 0; c < cards.size(); ++c) {
    char name[32];
    std::snprintf(name, sizeof name, " %-12s", cards[c]->name.c_str());
    out << name;
    for (const Result& r : results) {
      char cell[32];
      std::snprintf(cell, sizeof cell, " | %12.0f", double(r.T) / (r.per_card[c].forward_ms * 1e-3));
      out << cell;
    }
    out << "\n";
  }
  out << "\n";
  print_assumptions(out, cards, host);
  return 0;
}

#endif

}  // namespace layertap
