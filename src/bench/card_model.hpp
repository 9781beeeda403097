// The cost report's model of a GPU and its host: what each recorded call (sim/cost.hpp) would
// take on a named card, and a forward's time from the order of the calls. A projection, never a
// measurement: every figure below is an assumption, printed with every projection, to be
// corrected from real runs (tools/gpu_check.sh prints the projection beside what it measures).
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

#include "sim/cost.hpp"

namespace layertap {

// What a card sustains (achievable rates, below the data-sheet peaks), with its node's links.
struct Card {
  std::string name;         // as --project takes it
  std::string description;
  double memory_gib;        // what the runtime reports as total
  double dram_gbs;          // achievable device-memory bandwidth, GB/s
  double tensor_tflops;     // achievable dense bf16 tensor rate (float32 accumulation), large GEMMs
  double lane_tops;         // CUDA-core lane instructions per second, 1e12 (SMs x 128 lanes x clock)
  int sms;
  double allreduce_gbs;     // NCCL all-reduce bus bandwidth between the node's 8 GPUs, GB/s
  double pcie_gbs;          // host <-> device copies, GB/s
};
const std::vector<Card>& known_cards();
const Card& find_card(const std::string& name);  // throws naming the known ones

// The host and the overlap rules, the same for every card.
struct HostModel {
  double launch_us = 2.5;           // host time to issue one kernel launch, library call or copy
  double kernel_floor_us = 2.0;     // the shortest a kernel or GEMM takes (launch ramp and tail)
  double host_wait_us = 10.0;       // after the awaited work ends, until the host issues again
  double allreduce_latency_us = 20.0;
  double gemm_half_rows = 128.0;    // a GEMM of r rows (its smaller side) runs at r / (r + this) of the rate
  double first_touch_gbs = 3.0;     // per host thread: new pages faulted in and zeroed
  double host_copy_gbs = 6.0;       // per host thread: memcpy and bf16 -> float32
  double host_memory_gbs = 40.0;    // all host threads together
};

// One forward's projected time on `card`: each call's duration (the roofline of its bytes, flops
// and instructions, a floor, all-reduces at the bus bandwidth), placed on a timeline where the
// host issues calls in order, each stream runs its calls in order, compute calls share the SMs
// one at a time, copies with a host side run on the copy engine beside them, a host wait holds
// the host until the awaited event's work (or stream) is done, and host work holds the host.
struct Projection {
  double forward_ms = 0;
  // Milliseconds by what the time went to; they sum to forward_ms. "where" keys: the layer kind
  // and part ("MoE layer: moe experts"), plus "GPU idle (the host was waiting or launching)" and
  // "after the last kernel (copies and host work the forward waits for)". "sink" keys: the kernel
  // or library (cuBLASLt GEMMs, all-reduces), the idle and the tail.
  std::map<std::string, double> where_ms, sink_ms;
};
// layer_kind(layer) names a decoder layer's kind ("dense layer", "MoE layer"); -1: outside.
Projection project(const std::vector<sim::Call>& calls, const Card& card, const HostModel& host,
                   const std::function<std::string(std::int64_t)>& layer_kind);

// The assumptions, as one table: the cards asked for and the host model.
void print_assumptions(std::ostream& out, const std::vector<const Card*>& cards, const HostModel& host);

// "layertap::(anonymous namespace)::int4_group_kernel" -> "int4_group_kernel"; templates kept.
std::string short_kernel_name(const std::string& name);

}  // namespace layertap
