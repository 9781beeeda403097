// The simulated GPU's shared state (internal to sim/): devices, allocations, streams and the
// error reporting every simulated library uses. The public face is sim/sim.hpp.
#pragma once
#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sim/cost.hpp"
#include "sim/sim.hpp"

namespace layertap::sim {

// A device allocation (device >= 0) or pinned host memory (device == kPinnedHost).
inline constexpr int kPinnedHost = -1;
struct Allocation {
  std::byte* base = nullptr;
  std::size_t bytes = 0;
  int device = kPinnedHost;
  bool reserved = false;        // a cost-only device's: mapped address space, never touched
  std::atomic<int> pending{0};  // queued operations that use it
};
using AllocationRef = std::shared_ptr<Allocation>;

// The allocation holding [p, p + bytes) (bytes 0: p itself, or its end), or null.
AllocationRef find_allocation(const void* p, std::size_t bytes = 0);

// One queued operation of a stream: `run` executes on the stream's worker thread.
struct Op {
  std::string what;  // "cudaMemcpyAsync(HostToDevice, 4096 bytes)", "kernel rmsnorm_kernel"
  std::function<void()> run;
  std::vector<AllocationRef> uses;  // pending counts held until `run` returns
};

}  // namespace layertap::sim

// cudaStream_t: an in-order queue executed by its own worker thread, after a random delay.
struct CUstream_st {
  CUstream_st(int device, bool legacy);
  ~CUstream_st();
  void enqueue(layertap::sim::Op op);
  void synchronize();
  bool idle();

  const int device;
  const bool legacy;  // the device's default stream (stream 0)
  std::uint64_t id;

 private:
  void work();
  std::mutex m_;
  std::condition_variable cv_;
  std::deque<layertap::sim::Op> queue_;
  bool running_ = false, stop_ = false;
  std::uint64_t rng_;
  std::thread worker_;
};

namespace layertap::sim {

struct Device {
  int index = 0;       // as the process sees it (after CUDA_VISIBLE_DEVICES)
  int physical = 0;    // the simulated machine's GPU: its PCI bus id
  std::size_t capacity = 0;
  std::atomic<std::size_t> allocated{0}, peak{0};
  std::atomic<int> sticky{cudaSuccess};  // an asynchronous fault: every later call returns it
  std::mutex m;
  std::vector<cudaStream_t> streams;     // live streams, for cudaDeviceSynchronize
  cudaStream_t legacy = nullptr;
  struct {
    std::atomic<std::uint64_t> kernel_launches{0}, matmuls{0}, all_reduces{0}, host_syncs{0}, copies{0};
  } count;
  std::atomic<bool> cost_only{false};  // sim/cost.hpp: calls recorded, nothing executed
  std::atomic<bool> recording{false};
  std::mutex calls_m;
  std::vector<Call> calls;
};

// Appends `call` to `dev`'s record when it is recording, tagged with the calling thread's scope
// (sim/cost.cpp).
void record(Device& dev, Call&& call);
// A host wait on `dev` for an event's record (`event`, its recording number), else for `stream`'s
// work (0: every stream): counted, and recorded as `what`.
void count_host_wait(Device& dev, const char* what, std::uint64_t stream, std::uint64_t event = 0);

int device_count();
Device& device(int index);
int current_device();                 // the calling thread's (0 for a new thread)
Device& current();
// The stream a handle names on `dev` (nullptr: its default stream), or null when it is another
// device's (the error is reported).
cudaStream_t resolve_stream(cudaStream_t s, Device& dev, const char* call);

// A misuse of a call: printed as "layertap-sim: CALL: message", kept for cudaGetLastError.
cudaError_t misuse(cudaError_t error, const std::string& call, const std::string& message);
// An asynchronous fault inside queued work (a kernel's, a copy's): printed, and sticky.
void device_fault(int device, const std::string& what, const std::string& message);
void report(const std::string& line);  // one line on stderr, whole

// Settings read once from the environment (sim/sim.hpp lists them).
struct Settings {
  int physical_devices = 4;
  std::size_t device_bytes = std::size_t(16) << 30;
  int max_delay_us = 50;
  std::uint64_t seed = 1;
};
const Settings& settings();
std::uint64_t next_random(std::uint64_t& state);  // splitmix64

// Runs one kernel launch's grid on the calling thread (a stream worker): sim/block_runner.cpp.
struct KernelLaunch;
void run_grid(const KernelLaunch& launch, std::uint64_t seed, int device);

}  // namespace layertap::sim
