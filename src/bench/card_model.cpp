#include "bench/card_model.hpp"

#include <algorithm>
#include <cstdio>

#include "core/error.hpp"
#include "core/text.hpp"

namespace layertap {

const std::vector<Card>& known_cards() {
  // Achievable rates: HBM about 83% of peak, the bf16 rate cuBLASLt reached on the first H200
  // run (700-785 TFLOP/s on Llama-3.1-8B's shapes, docs/GPU.md) and the same fraction of peak
  // elsewhere; lane rate = SMs x 4 schedulers x 32 lanes x boost clock; all-reduce bus bandwidth
  // as nccl-tests report for 8 GPUs on the node's links.
  static const std::vector<Card> cards = {
      {"h200", "NVIDIA H200 SXM (141 GB HBM3e 4.8 TB/s, NVLink 4)", 139, 4000, 720, 33.4, 132, 400, 50},
      {"h100", "NVIDIA H100 SXM (80 GB HBM3 3.35 TB/s, NVLink 4)", 79, 2800, 680, 33.4, 132, 400, 50},
      {"b200", "NVIDIA B200 (180 GB HBM3e 8 TB/s, NVLink 5)", 178, 6600, 1600, 37.2, 148, 750, 50},
      {"rtx-pro-6000", "NVIDIA RTX PRO 6000 Blackwell Server (96 GB GDDR7 1.79 TB/s, PCIe Gen5, no NVLink)", 95,
       1500, 360, 63.0, 188, 30, 50},
  };
  return cards;
}

const Card& find_card(const std::string& name) {
  std::string names;
  for (const Card& c : known_cards()) {
    if (c.name == name) return c;
    names += (names.empty() ? "" : ", ") + c.name;
  }
  LT_FAIL("bench: no card '", name, "' in the cost model (", names, ")");
}

std::string short_kernel_name(const std::string& name) {
  // Drop namespace qualifiers outside template arguments: the last "::" at depth 0.
  int depth = 0;
  std::size_t cut = 0;
  for (std::size_t i = 0; i < name.size(); ++i) {
    if (name[i] == '<') ++depth;
    if (name[i] == '>') --depth;
    if (depth == 0 && name.compare(i, 2, "::") == 0) cut = i + 2;
  }
  return name.substr(cut);
}

namespace {

bool host_side(const sim::Call& c) { return c.to_host || c.from_host; }

// A call's time on the device, milliseconds.
double duration_ms(const sim::Call& c, const Card& card, const HostModel& h) {
  const double bytes = c.work.read + c.work.written;
  switch (c.kind) {
    case sim::CallKind::Kernel: {
      // Few threads cannot fill the card: rates scale with threads / (SMs x 1024).
      const double threads = double(c.blocks) * double(c.block_threads);
      const double fill = std::min(1.0, threads / (double(card.sms) * 1024.0));
      const double s = std::max({bytes / (card.dram_gbs * 1e9 * fill), c.work.flops / (card.tensor_tflops * 1e12 * fill),
                                 c.work.ops / (card.lane_tops * 1e12 * fill)});
      return std::max(s * 1e3, h.kernel_floor_us * 1e-3);
    }
    case sim::CallKind::Matmul: {
      const double rows = double(std::min(c.m, c.n));
      const double rate = card.tensor_tflops * 1e12 * rows / (rows + h.gemm_half_rows);
      return std::max({c.work.flops / rate * 1e3, bytes / (card.dram_gbs * 1e9) * 1e3, h.kernel_floor_us * 1e-3});
    }
    case sim::CallKind::AllReduce:
      if (c.ranks <= 1) return 0;
      return 2.0 * (c.ranks - 1) / c.ranks * c.work.read / (card.allreduce_gbs * 1e9) * 1e3 +
             h.allreduce_latency_us * 1e-3;
    case sim::CallKind::Copy:
    case sim::CallKind::Memset:
      if (host_side(c)) return std::max(c.work.read, c.work.written) / (card.pcie_gbs * 1e9) * 1e3 + 2e-3;
      return std::max(bytes / (card.dram_gbs * 1e9) * 1e3, h.kernel_floor_us * 1e-3);
    default: return 0;
  }
}

double host_work_ms(const sim::Call& c, const HostModel& h) {
  const double threads = std::max(1, c.host_threads);
  if (c.work.read == 0) return c.work.written / (h.first_touch_gbs * 1e9 * threads) * 1e3;
  const double rate = std::min(h.host_copy_gbs * threads, h.host_memory_gbs) * 1e9;
  return (c.work.read + c.work.written) / rate * 1e3;
}

std::string sink_of(const sim::Call& c) {
  switch (c.kind) {
    case sim::CallKind::Kernel: return short_kernel_name(c.name);
    case sim::CallKind::Matmul: return "cuBLASLt GEMMs (" + (c.part.empty() ? std::string("other") : c.part) + ")";
    case sim::CallKind::AllReduce: return "all-reduces";
    case sim::CallKind::Copy: return host_side(c) ? "host copies" : "device copies";
    case sim::CallKind::Memset: return "memsets";
    default: return c.name;
  }
}

}  // namespace

Projection project(const std::vector<sim::Call>& calls, const Card& card, const HostModel& h,
                   const std::function<std::string(std::int64_t)>& layer_kind) {
  const std::string idle = "GPU idle (the host was waiting or launching)";
  const std::string tail = "after the last kernel (copies and host work the forward waits for)";
  Projection p;
  std::map<std::uint64_t, double> done;   // per stream: when its last queued call ends
  std::map<std::uint64_t, double> event;  // per event record: when the work before it on its stream ends
  double host = 0, sm = 0, copy_engine = 0;
  const auto all_done = [&] {
    double t = 0;
    for (const auto& [s, d] : done) t = std::max(t, d);
    return t;
  };
  for (const sim::Call& c : calls) {
    const std::string where = layer_kind(c.layer) + (c.part.empty() ? "" : ": " + c.part);
    switch (c.kind) {
      case sim::CallKind::EventRecord: event[c.event] = done[c.stream]; break;
      case sim::CallKind::StreamWait: done[c.stream] = std::max(done[c.stream], event[c.event]); break;
      case sim::CallKind::HostWait: {
        const double until = c.event != 0 ? event[c.event] : c.waits_for != 0 ? done[c.waits_for] : all_done();
        host = std::max(host, until) + h.host_wait_us * 1e-3;
        break;
      }
      case sim::CallKind::HostWork: host += host_work_ms(c, h); break;
      default: {
        host += h.launch_us * 1e-3;
        const double d = duration_ms(c, card, h);
        double& engine = host_side(c) ? copy_engine : sm;
        const double start = std::max({host, done[c.stream], engine});
        if (&engine == &sm && start > sm) {
          p.where_ms[idle] += start - sm;
          p.sink_ms[idle] += start - sm;
        }
        engine = done[c.stream] = start + d;
        if (&engine == &sm) {
          p.where_ms[where] += d;
          p.sink_ms[sink_of(c)] += d;
        }
      }
    }
  }
  p.forward_ms = std::max({host, all_done(), sm, copy_engine});
  if (p.forward_ms > sm) {
    p.where_ms[tail] += p.forward_ms - sm;
    p.sink_ms[tail] += p.forward_ms - sm;
  }
  return p;
}

void print_assumptions(std::ostream& out, const std::vector<const Card*>& cards, const HostModel& h) {
  out << "Assumptions of the projection (a model, not a measurement; src/bench/card_model.cpp):\n"
         " card         | memory GiB | DRAM GB/s | bf16 tensor TFLOP/s | lane Tinstr/s | SMs | all-reduce bus GB/s | "
         "PCIe GB/s\n";
  for (const Card* c : cards) {
    char line[256];
    std::snprintf(line, sizeof line, " %-12s | %10.0f | %9.0f | %19.0f | %13.1f | %3d | %19.0f | %9.0f\n",
                  c->name.c_str(), c->memory_gib, c->dram_gbs, c->tensor_tflops, c->lane_tops, c->sms,
                  c->allreduce_gbs, c->pcie_gbs);
    out << line;
  }
  out << "Rates are achievable ones, below the data-sheet peaks. Per call: a kernel takes the longest of its stated "
         "bytes / DRAM rate, tensor flops / tensor rate and lane instructions / lane rate, each rate scaled by "
         "min(1, threads / (SMs x 1024)), at least "
      << fixed(h.kernel_floor_us, 1) << " us; a cuBLASLt GEMM of r rows (its smaller side) runs at r / (r + "
      << fixed(h.gemm_half_rows, 0) << ") of the tensor rate, at least its bytes / DRAM rate; an all-reduce of B bytes "
         "over n ranks takes 2 (n - 1) / n B / bus + "
      << fixed(h.allreduce_latency_us, 0) << " us; device copies and memsets move their bytes at the DRAM rate, "
         "host copies at the PCIe rate. Overlap: the host issues calls in order, "
      << fixed(h.launch_us, 1) << " us each; each stream runs its calls in order; compute calls (kernels, GEMMs, "
         "all-reduces, device copies) share the SMs one at a time; copies with a host side run on the copy engine "
         "beside them; a host wait holds the host until the awaited stream is done, plus "
      << fixed(h.host_wait_us, 0) << " us; host work holds the host (first touches of new memory at "
      << fixed(h.first_touch_gbs, 0) << " GB/s per thread, copies at " << fixed(h.host_copy_gbs, 0)
      << " GB/s per thread, at most " << fixed(h.host_memory_gbs, 0) << " GB/s). The group's tokens/s = tokens / "
         "forward time (every rank of a tensor-parallel group works on the same batch).\n";
}

}  // namespace layertap
