// The call record and cost-only devices (sim/cost.hpp).
#include <mutex>
#include <utility>

#include "sim/simulator.hpp"

namespace layertap::sim {
namespace {
thread_local std::int64_t scope_layer = -1;
thread_local const char* scope_part = "";
}  // namespace

const char* call_kind_name(CallKind k) {
  switch (k) {
    case CallKind::Kernel: return "kernel";
    case CallKind::Matmul: return "matmul";
    case CallKind::AllReduce: return "all-reduce";
    case CallKind::Copy: return "copy";
    case CallKind::Memset: return "memset";
    case CallKind::EventRecord: return "event record";
    case CallKind::StreamWait: return "stream wait";
    case CallKind::HostWait: return "host wait";
    case CallKind::HostWork: return "host work";
  }
  return "?";
}

void set_scope(std::int64_t layer, const char* part) {
  scope_layer = layer;
  scope_part = part != nullptr ? part : "";
}

void record(Device& dev, Call&& call) {
  if (!dev.recording.load()) return;
  call.layer = scope_layer;
  call.part = scope_part;
  std::lock_guard lock(dev.calls_m);
  dev.calls.push_back(std::move(call));
}

void count_host_wait(Device& dev, const char* what, std::uint64_t stream, std::uint64_t event) {
  dev.count.host_syncs++;
  Call c;
  c.kind = CallKind::HostWait;
  c.name = what;
  c.waits_for = stream;
  c.event = event;
  record(dev, std::move(c));
}

void record_host_work(const char* what, double read, double written, int threads) {
  if (device_count() == 0) return;
  Call c;
  c.kind = CallKind::HostWork;
  c.name = what;
  c.work.read = read;
  c.work.written = written;
  c.host_threads = threads;
  record(current(), std::move(c));
}

void record_modelled_all_reduce(double bytes, int ranks, cudaStream_t stream) {
  if (device_count() == 0) return;
  Device& dev = current();
  cudaStream_t s = resolve_stream(stream, dev, "all-reduce (modelled)");
  if (s == nullptr) return;
  dev.count.all_reduces++;
  Call c;
  c.kind = CallKind::AllReduce;
  c.name = "all-reduce (modelled)";
  c.work.read = c.work.written = bytes;
  c.ranks = ranks;
  c.stream = s->id;
  record(dev, std::move(c));
}

void record_calls(int d, bool on) {
  Device& dev = device(d);
  std::lock_guard lock(dev.calls_m);
  dev.recording = on;
}

std::vector<Call> take_calls(int d) {
  Device& dev = device(d);
  std::lock_guard lock(dev.calls_m);
  return std::exchange(dev.calls, {});
}

bool make_cost_only(int d, std::size_t capacity) {
  Device& dev = device(d);
  if (dev.allocated.load() != 0 || dev.peak.load() != 0) return false;
  dev.capacity = capacity;
  dev.cost_only = true;
  return true;
}

bool is_cost_only(int d) { return device(d).cost_only.load(); }

}  // namespace layertap::sim
