// The simulated GPU's record of what the project asks of a device, call by call, and its
// cost-only mode: the instrument of the cost report (src/bench/cost_report.hpp).
//
// Recording (off until record_calls): every kernel launch with the work its launcher states
// (kernels/work.hpp), every cuBLASLt product with its shape, every NCCL all-reduce, copy and
// memset with its bytes, every host wait, and host work a caller declares, each tagged with the
// calling thread's scope (set_scope: which layer and which part of it).
//
// Cost-only devices (make_cost_only, before the device's first allocation): calls are checked and
// recorded as on any device but nothing executes. Device allocations are address space reserved
// and never touched, so a full-size rank share (72.6 GiB of Kimi-K2.5 weights at TP 8) fits on a
// machine with a third of that memory; copies, products and kernels do nothing, so whatever the
// host reads back from the device is meaningless (CudaProbe::cost_only tells the backend so).
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>

#include "kernels/work.hpp"

namespace layertap::sim {

enum class CallKind { Kernel, Matmul, AllReduce, Copy, Memset, EventRecord, StreamWait, HostWait, HostWork };
const char* call_kind_name(CallKind k);  // "kernel", "matmul", ...

struct Call {
  CallKind kind = CallKind::Kernel;
  std::string name;         // the kernel; "cublasLtMatmul"; "cudaMemcpyAsync(DeviceToHost)"; the host work
  std::int64_t layer = -1;  // the scope at the call (-1: outside the layers)
  std::string part;         // "attention", "moe", "capture", ... ("" when none was set)
  kernels::Work work;       // bytes read and written, flops, other instructions
  std::int64_t blocks = 0, block_threads = 0;  // kernels: grid and block size
  std::int64_t m = 0, n = 0, k = 0;             // matmuls: D (m, n) = A (m, k) B (k, n)
  int ranks = 0;                                // all-reduces: the communicator's size
  int host_threads = 0;                         // host work: the threads sharing it
  std::uint64_t stream = 0;     // the stream it is queued on (ids as the simulator numbers them)
  std::uint64_t waits_for = 0;  // host waits without an event: the stream waited for (0: every stream)
  std::uint64_t event = 0;      // event records and the stream and host waits on one: the event's record
  bool to_host = false, from_host = false;      // copies: a side in host memory
};

// Scope of the calling thread's later calls, until it sets another: layer -1 is outside the layers.
void set_scope(std::int64_t layer, const char* part);
// Host work the caller does that a forward waits for (filling and copying the captured states),
// recorded on the calling thread's current device: bytes read and written by `threads` threads
// (nothing read: first touches of new memory).
void record_host_work(const char* what, double read, double written, int threads);
// An all-reduce a benchmark models instead of running (one rank of a larger group): counted and
// recorded as the NCCL call on `stream` would be.
void record_modelled_all_reduce(double bytes, int ranks, cudaStream_t stream);

// Starts (or stops) recording `device`'s calls; take_calls returns them and clears the record.
void record_calls(int device, bool on);
std::vector<Call> take_calls(int device);

// Turns `device` into a cost-only device of `capacity` bytes (before its first allocation;
// returns false, changing nothing, after one).
bool make_cost_only(int device, std::size_t capacity);
bool is_cost_only(int device);

}  // namespace layertap::sim
