// The CUDA runtime calls the project makes, on simulated devices (see sim/sim.hpp):
//   devices   per-thread current device (a new thread starts on device 0), properties, memory
//             bounded by a settable capacity, cudaMemGetInfo consistent with what is allocated;
//   memory    device allocations are host allocations of the exact size (so AddressSanitizer
//             sees every out-of-bounds access) filled with 0xff bytes, a NaN in bf16 and float32:
//             memory read before it is written shows up as NaN;
//   streams   in-order queues, each run by a worker thread after a random delay per operation;
//             events, cudaStreamWaitEvent, synchronisation;
//   misuse    a pointer of another device or outside any allocation, a stream of another device,
//             a free while queued work uses the memory, a pinned source changed while its copy
//             is pending: reported on stderr naming the call, returned as an error.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include <sys/mman.h>

#include "sim/simulator.hpp"

namespace layertap::sim {
namespace {

using Clock = std::chrono::steady_clock;

std::int64_t env_int(const char* name, std::int64_t fallback, std::int64_t lo, std::int64_t hi) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  char* end = nullptr;
  const long long x = std::strtoll(v, &end, 10);
  if (*end != '\0' || x < lo || x > hi) {
    std::fprintf(stderr, "layertap-sim: %s=%s is not an integer in %lld..%lld\n", name, v, (long long)lo,
                 (long long)hi);
    std::exit(2);
  }
  return x;
}

struct Machine {
  Settings settings;
  std::vector<std::unique_ptr<Device>> devices;
  std::mutex alloc_m;
  std::map<std::uintptr_t, AllocationRef> allocations;  // by base address
  std::atomic<std::uint64_t> next_stream_id{1};
  std::atomic<std::uint64_t> next_record_id{1};

  Machine() {
    settings.physical_devices = int(env_int("LAYERTAP_SIM_DEVICES", 4, 0, 64));
    settings.device_bytes = std::size_t(env_int("LAYERTAP_SIM_DEVICE_MIB", 16384, 1, 1 << 24)) << 20;
    settings.max_delay_us = int(env_int("LAYERTAP_SIM_MAX_DELAY_US", 50, 0, 1000000));
    settings.seed = std::uint64_t(env_int("LAYERTAP_SIM_SEED", 1, 0, INT64_MAX));
    // CUDA_VISIBLE_DEVICES: a comma-separated list of physical indices; as CUDA does, the list
    // ends at the first entry that is not a valid index.
    std::vector<int> visible;
    if (const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES"); cvd != nullptr) {
      std::stringstream ss(cvd);
      std::string item;
      while (std::getline(ss, item, ',')) {
        char* end = nullptr;
        const long d = std::strtol(item.c_str(), &end, 10);
        if (item.empty() || *end != '\0' || d < 0 || d >= settings.physical_devices ||
            std::find(visible.begin(), visible.end(), int(d)) != visible.end())
          break;
        visible.push_back(int(d));
      }
    } else {
      for (int d = 0; d < settings.physical_devices; ++d) visible.push_back(d);
    }
    for (std::size_t i = 0; i < visible.size(); ++i) {
      auto d = std::make_unique<Device>();
      d->index = int(i);
      d->physical = visible[i];
      d->capacity = settings.device_bytes;
      devices.push_back(std::move(d));
    }
  }
};

Machine& machine() {
  static Machine* m = new Machine();  // never destroyed: stream workers may outlive static destructors
  return *m;
}

thread_local int current_index = 0;
thread_local cudaError_t last_error = cudaSuccess;

const char* kind_name(cudaMemcpyKind k) {
  switch (k) {
    case cudaMemcpyHostToHost: return "HostToHost";
    case cudaMemcpyHostToDevice: return "HostToDevice";
    case cudaMemcpyDeviceToHost: return "DeviceToHost";
    case cudaMemcpyDeviceToDevice: return "DeviceToDevice";
    case cudaMemcpyDefault: return "Default";
  }
  return "unknown";
}

std::string ptr(const void* p) {
  char b[32];
  std::snprintf(b, sizeof b, "%p", p);
  return b;
}

}  // namespace

const Settings& settings() { return machine().settings; }

std::uint64_t next_random(std::uint64_t& s) {
  std::uint64_t z = (s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

void report(const std::string& line) {
  const std::string s = "layertap-sim: " + line + "\n";
  std::fwrite(s.data(), 1, s.size(), stderr);
}

cudaError_t misuse(cudaError_t error, const std::string& call, const std::string& message) {
  report(call + ": " + message);
  last_error = error;
  return error;
}

void device_fault(int device, const std::string& what, const std::string& message) {
  report("device " + std::to_string(device) + ": " + what + ": " + message +
         " (the device is now in an error state: every later call returns it)");
  int expected = cudaSuccess;
  sim::device(device).sticky.compare_exchange_strong(expected, cudaErrorLaunchFailure);
}

int device_count() { return int(machine().devices.size()); }
Device& device(int index) { return *machine().devices.at(std::size_t(index)); }
int current_device() { return current_index; }
Device& current() { return device(current_index); }

AllocationRef find_allocation(const void* p, std::size_t bytes) {
  Machine& mc = machine();
  const auto v = reinterpret_cast<std::uintptr_t>(p);
  std::lock_guard lock(mc.alloc_m);
  auto it = mc.allocations.upper_bound(v);
  if (it == mc.allocations.begin()) return nullptr;
  --it;
  const Allocation& a = *it->second;
  const auto base = reinterpret_cast<std::uintptr_t>(a.base);
  const bool inside = bytes == 0 ? v <= base + a.bytes : v + bytes <= base + a.bytes;
  return inside ? it->second : nullptr;
}

cudaStream_t resolve_stream(cudaStream_t s, Device& dev, const char* call) {
  if (s == nullptr || s == cudaStreamLegacy || s == cudaStreamPerThread) {
    std::lock_guard lock(dev.m);
    if (dev.legacy == nullptr) dev.legacy = new CUstream_st(dev.index, true);
    return dev.legacy;
  }
  if (s->device != dev.index) {
    misuse(cudaErrorInvalidResourceHandle, call,
           "stream " + std::to_string(s->id) + " belongs to device " + std::to_string(s->device) +
               " but the calling thread's current device is " + std::to_string(dev.index) + " (cudaSetDevice?)");
    return nullptr;
  }
  return s;
}

Counters counters(int d) {
  Device& dev = device(d);
  Counters c;
  c.kernel_launches = dev.count.kernel_launches;
  c.matmuls = dev.count.matmuls;
  c.all_reduces = dev.count.all_reduces;
  c.host_syncs = dev.count.host_syncs;
  c.copies = dev.count.copies;
  c.device_bytes = dev.allocated;
  c.peak_device_bytes = dev.peak;
  return c;
}

std::string describe(const Counters& c) {
  char b[256];
  std::snprintf(b, sizeof b,
                "kernels %llu, matmuls %llu, all-reduces %llu, host syncs %llu, copies %llu, device %.1f MiB "
                "(peak %.1f MiB)",
                (unsigned long long)c.kernel_launches, (unsigned long long)c.matmuls,
                (unsigned long long)c.all_reduces, (unsigned long long)c.host_syncs, (unsigned long long)c.copies,
                double(c.device_bytes) / 1048576.0, double(c.peak_device_bytes) / 1048576.0);
  return b;
}

namespace {

// Every call on a device first returns its sticky fault, as after a real kernel fault.
cudaError_t sticky(const Device& d) { return static_cast<cudaError_t>(d.sticky.load()); }

AllocationRef allocate(std::size_t bytes, int device) {
  auto a = std::make_shared<Allocation>();
  if (device != kPinnedHost && sim::device(device).cost_only) {
    // Address space only: never touched, so the pages are never made (sim/cost.hpp).
    void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    a->base = static_cast<std::byte*>(p);
    a->reserved = true;
  } else {
    a->base = static_cast<std::byte*>(::operator new(bytes, std::align_val_t(256), std::nothrow));
    if (a->base == nullptr) return nullptr;
    std::memset(a->base, 0xff, bytes);  // 0xffff is a bf16 NaN, 0xffffffff a float32 NaN
  }
  a->bytes = bytes;
  a->device = device;
  std::lock_guard lock(machine().alloc_m);
  machine().allocations[reinterpret_cast<std::uintptr_t>(a->base)] = a;
  return a;
}

// Frees `p` (the base of an allocation of `want_device`, or pinned memory with kPinnedHost).
cudaError_t release(void* p, bool pinned, const char* call) {
  if (p == nullptr) return cudaSuccess;
  Machine& mc = machine();
  AllocationRef a;
  {
    std::lock_guard lock(mc.alloc_m);
    auto it = mc.allocations.find(reinterpret_cast<std::uintptr_t>(p));
    if (it == mc.allocations.end() || (it->second->device == kPinnedHost) != pinned) {
      return misuse(cudaErrorInvalidValue, call,
                    ptr(p) + " is not the start of a " + (pinned ? "pinned host" : "device") + " allocation");
    }
    a = it->second;
    if (a->pending.load() != 0) {
      return misuse(cudaErrorIllegalState, call,
                    ptr(p) + ": " + std::to_string(a->pending.load()) +
                        " queued operation(s) still use this allocation (synchronize first)");
    }
    mc.allocations.erase(it);
  }
  if (a->device != kPinnedHost) device(a->device).allocated -= a->bytes;
  if (a->reserved)
    munmap(a->base, a->bytes);
  else
    ::operator delete(a->base, std::align_val_t(256));
  a->base = nullptr;
  return cudaSuccess;
}

// The range [p, p + bytes) must lie in one allocation of `dev` (device memory) or outside every
// device allocation (host memory); returns the allocation (null for host memory).
bool check_range(const void* p, std::size_t bytes, bool device_side, int dev, const char* call, const char* role,
                 AllocationRef& out) {
  out = find_allocation(p, 0);
  if (!device_side) {
    if (out && out->device != kPinnedHost) {
      misuse(cudaErrorInvalidValue, call,
             std::string(role) + " " + ptr(p) + " is device memory of device " + std::to_string(out->device) +
                 " but the copy kind says host memory");
      return false;
    }
    if (out) {
      AllocationRef whole = find_allocation(p, bytes);
      if (!whole) {
        misuse(cudaErrorInvalidValue, call,
               std::string(role) + " " + ptr(p) + ": " + std::to_string(bytes) +
                   " bytes run past the end of its pinned allocation");
        return false;
      }
    }
    return true;
  }
  if (!out || out->device == kPinnedHost) {
    misuse(cudaErrorInvalidValue, call, std::string(role) + " " + ptr(p) + " is not device memory");
    return false;
  }
  if (out->device != dev) {
    misuse(cudaErrorInvalidValue, call,
           std::string(role) + " " + ptr(p) + " belongs to device " + std::to_string(out->device) +
               " but the calling thread's current device is " + std::to_string(dev) + " (cudaSetDevice?)");
    return false;
  }
  if (!find_allocation(p, bytes)) {
    const auto off = static_cast<const std::byte*>(p) - out->base;
    misuse(cudaErrorInvalidValue, call,
           std::string(role) + " " + ptr(p) + ": " + std::to_string(bytes) + " bytes at offset " +
               std::to_string(off) + " run past the end of its " + std::to_string(out->bytes) + "-byte allocation");
    return false;
  }
  return true;
}

bool device_side(cudaMemcpyKind kind, bool dst, const void* p) {
  switch (kind) {
    case cudaMemcpyHostToDevice: return dst;
    case cudaMemcpyDeviceToHost: return !dst;
    case cudaMemcpyDeviceToDevice: return true;
    case cudaMemcpyHostToHost: return false;
    default: {
      AllocationRef a = find_allocation(p, 0);
      return a && a->device != kPinnedHost;
    }
  }
}

}  // namespace

// ---- events ---------------------------------------------------------------------------------

struct EventState {
  int device = 0;
  bool timing = true;
  std::mutex m;
  std::condition_variable cv;
  std::uint64_t recorded = 0, completed = 0, polled = 0;
  std::uint64_t stream = 0;  // of the latest record
  std::uint64_t record_id = 0;  // of the latest record, unique on the machine (the call record's event)
  Clock::time_point when{};
};

namespace {
// Until the record `gen` has run, or the event's device has faulted (its queued work, the record
// included, is then skipped, and the waiter gets the fault).
void wait_event_state(EventState& e, std::uint64_t gen) {
  std::unique_lock lock(e.m);
  while (!e.cv.wait_for(lock, std::chrono::milliseconds(10), [&] { return e.completed >= gen; }))
    if (device(e.device).sticky.load() != cudaSuccess) return;
}
}  // namespace

}  // namespace layertap::sim

struct CUevent_st {
  std::shared_ptr<layertap::sim::EventState> state = std::make_shared<layertap::sim::EventState>();
};

// ---- streams --------------------------------------------------------------------------------

CUstream_st::CUstream_st(int dev, bool is_legacy)
    : device(dev), legacy(is_legacy), id(layertap::sim::machine().next_stream_id++) {
  rng_ = layertap::sim::settings().seed * 1000003u + id;
  worker_ = std::thread([this] { work(); });
  if (!legacy) {
    auto& d = layertap::sim::device(device);
    std::lock_guard lock(d.m);
    d.streams.push_back(this);
  }
}

CUstream_st::~CUstream_st() {
  {
    std::lock_guard lock(m_);
    stop_ = true;
  }
  cv_.notify_all();
  worker_.join();
  if (!legacy) {
    auto& d = layertap::sim::device(device);
    std::lock_guard lock(d.m);
    std::erase(d.streams, this);
  }
}

void CUstream_st::enqueue(layertap::sim::Op op) {
  for (auto& a : op.uses) a->pending++;
  {
    std::lock_guard lock(m_);
    queue_.push_back(std::move(op));
  }
  cv_.notify_all();
}

void CUstream_st::synchronize() {
  std::unique_lock lock(m_);
  cv_.wait(lock, [&] { return queue_.empty() && !running_; });
}

bool CUstream_st::idle() {
  std::lock_guard lock(m_);
  return queue_.empty() && !running_;
}

void CUstream_st::work() {
  layertap::sim::current_index = device;  // the worker's own device, for what ops look up
  const int max_delay = layertap::sim::settings().max_delay_us;
  for (;;) {
    layertap::sim::Op op;
    {
      std::unique_lock lock(m_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, all work done
      op = std::move(queue_.front());
      queue_.pop_front();
      running_ = true;
    }
    if (max_delay > 0) {
      const auto us = layertap::sim::next_random(rng_) % std::uint64_t(max_delay + 1);
      if (us > 0) std::this_thread::sleep_for(std::chrono::microseconds(us));
    }
    if (layertap::sim::device(device).sticky.load() == cudaSuccess) {
      try {
        op.run();
      } catch (const std::exception& e) {
        layertap::sim::device_fault(device, op.what, e.what());
      }
    }
    for (auto& a : op.uses) a->pending--;
    {
      std::lock_guard lock(m_);
      running_ = false;
    }
    cv_.notify_all();
  }
}

using namespace layertap::sim;

// ---- errors and versions --------------------------------------------------------------------

extern "C" {

cudaError_t cudaGetLastError() {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  if (e != cudaSuccess) return e;
  return device_count() > 0 ? sticky(current()) : cudaSuccess;
}

cudaError_t cudaPeekAtLastError() {
  if (last_error != cudaSuccess) return last_error;
  return device_count() > 0 ? sticky(current()) : cudaSuccess;
}

const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorNotReady: return "cudaErrorNotReady";
    case cudaErrorLaunchFailure: return "cudaErrorLaunchFailure";
    case cudaErrorNotSupported: return "cudaErrorNotSupported";
    default: return "cudaErrorUnknown";
  }
}

const char* cudaGetErrorString(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorLaunchFailure: return "unspecified launch failure";
    case cudaErrorNotSupported: return "operation not supported";
    default: return "unknown error";
  }
}

cudaError_t cudaDriverGetVersion(int* v) {
  if (v == nullptr) return misuse(cudaErrorInvalidValue, "cudaDriverGetVersion", "null pointer");
  *v = CUDART_VERSION;
  return cudaSuccess;
}

cudaError_t cudaRuntimeGetVersion(int* v) {
  if (v == nullptr) return misuse(cudaErrorInvalidValue, "cudaRuntimeGetVersion", "null pointer");
  *v = CUDART_VERSION;
  return cudaSuccess;
}

// ---- devices --------------------------------------------------------------------------------

cudaError_t cudaGetDeviceCount(int* count) {
  if (count == nullptr) return misuse(cudaErrorInvalidValue, "cudaGetDeviceCount", "null pointer");
  *count = device_count();
  if (*count == 0) {
    last_error = cudaErrorNoDevice;
    return cudaErrorNoDevice;
  }
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int d) {
  if (d < 0 || d >= device_count()) {
    return misuse(cudaErrorInvalidDevice, "cudaSetDevice(" + std::to_string(d) + ")",
                  std::to_string(device_count()) + " device(s) are visible");
  }
  current_index = d;
  return cudaSuccess;
}

cudaError_t cudaGetDevice(int* d) {
  if (d == nullptr) return misuse(cudaErrorInvalidValue, "cudaGetDevice", "null pointer");
  if (device_count() == 0) return misuse(cudaErrorNoDevice, "cudaGetDevice", "no device is visible");
  *d = current_index;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d) {
  if (p == nullptr || d < 0 || d >= device_count()) {
    return misuse(cudaErrorInvalidDevice, "cudaGetDeviceProperties(" + std::to_string(d) + ")", "no such device");
  }
  const Device& dev = device(d);
  std::memset(p, 0, sizeof *p);
  std::snprintf(p->name, sizeof p->name, "layertap simulated GPU %d", dev.physical);
  p->totalGlobalMem = dev.capacity;
  p->sharedMemPerBlock = 48 * 1024;
  p->sharedMemPerBlockOptin = 227 * 1024;
  p->sharedMemPerMultiprocessor = 228 * 1024;
  p->regsPerBlock = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsDim[0] = 1024;
  p->maxThreadsDim[1] = 1024;
  p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647;
  p->maxGridSize[1] = 65535;
  p->maxGridSize[2] = 65535;
  p->major = 9;
  p->minor = 0;
  p->multiProcessorCount = 4;
  p->pciBusID = 0x10 + dev.physical;
  p->pciDeviceID = 0;
  p->pciDomainID = 0;
  p->unifiedAddressing = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int d) {
  cudaDeviceProp p;
  if (value == nullptr) return misuse(cudaErrorInvalidValue, "cudaDeviceGetAttribute", "null pointer");
  if (const cudaError_t e = cudaGetDeviceProperties(&p, d); e != cudaSuccess) return e;
  switch (attr) {
    case cudaDevAttrComputeCapabilityMajor: *value = p.major; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = p.minor; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = p.multiProcessorCount; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock: *value = p.maxThreadsPerBlock; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = int(p.sharedMemPerBlock); return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = int(p.sharedMemPerBlockOptin); return cudaSuccess;
    case cudaDevAttrWarpSize: *value = p.warpSize; return cudaSuccess;
    case cudaDevAttrPciBusId: *value = p.pciBusID; return cudaSuccess;
    default:
      return misuse(cudaErrorNotSupported, "cudaDeviceGetAttribute(" + std::to_string(int(attr)) + ")",
                    "this attribute is not simulated");
  }
}

cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int d) {
  cudaDeviceProp p;
  if (bus_id == nullptr || len <= 0) return misuse(cudaErrorInvalidValue, "cudaDeviceGetPCIBusId", "no buffer");
  if (const cudaError_t e = cudaGetDeviceProperties(&p, d); e != cudaSuccess) return e;
  std::snprintf(bus_id, std::size_t(len), "0000:%02x:00.0", p.pciBusID);
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize() {
  if (device_count() == 0) return cudaErrorNoDevice;
  Device& dev = current();
  std::vector<cudaStream_t> streams;
  {
    std::lock_guard lock(dev.m);
    streams = dev.streams;
    if (dev.legacy != nullptr) streams.push_back(dev.legacy);
  }
  for (cudaStream_t s : streams) s->synchronize();
  count_host_wait(dev, "cudaDeviceSynchronize", 0);
  return sticky(dev);
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (free_bytes == nullptr || total_bytes == nullptr) return misuse(cudaErrorInvalidValue, "cudaMemGetInfo", "null");
  if (device_count() == 0) return cudaErrorNoDevice;
  const Device& dev = current();
  *total_bytes = dev.capacity;
  *free_bytes = dev.capacity - std::min(dev.capacity, dev.allocated.load());
  return sticky(dev);
}

// ---- memory ---------------------------------------------------------------------------------

cudaError_t cudaMalloc(void** p, size_t bytes) {
  if (p == nullptr) return misuse(cudaErrorInvalidValue, "cudaMalloc", "null pointer");
  *p = nullptr;
  if (device_count() == 0) return cudaErrorNoDevice;
  Device& dev = current();
  if (const cudaError_t e = sticky(dev); e != cudaSuccess) return e;
  if (bytes == 0) return cudaSuccess;
  std::size_t now = dev.allocated.load();
  do {
    if (bytes > dev.capacity - std::min(dev.capacity, now)) {
      return misuse(cudaErrorMemoryAllocation, "cudaMalloc(" + std::to_string(bytes) + ")",
                    "device " + std::to_string(dev.index) + " has " + std::to_string(dev.capacity - now) +
                        " of its " + std::to_string(dev.capacity) + " bytes free (LAYERTAP_SIM_DEVICE_MIB)");
    }
  } while (!dev.allocated.compare_exchange_weak(now, now + bytes));
  std::size_t peak = dev.peak.load();
  while (now + bytes > peak && !dev.peak.compare_exchange_weak(peak, now + bytes)) {
  }
  AllocationRef a = allocate(bytes, dev.index);
  if (!a) {
    dev.allocated -= bytes;
    return misuse(cudaErrorMemoryAllocation, "cudaMalloc(" + std::to_string(bytes) + ")", "host memory exhausted");
  }
  *p = a->base;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) { return release(p, false, "cudaFree"); }

cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attr, const void* p) {
  if (attr == nullptr) return misuse(cudaErrorInvalidValue, "cudaPointerGetAttributes", "null pointer");
  std::memset(attr, 0, sizeof *attr);
  attr->type = cudaMemoryTypeUnregistered;
  attr->device = -2;
  if (AllocationRef a = find_allocation(p, 1)) {
    attr->type = a->device == kPinnedHost ? cudaMemoryTypeHost : cudaMemoryTypeDevice;
    attr->device = a->device == kPinnedHost ? current_index : a->device;
    attr->devicePointer = const_cast<void*>(p);
    if (a->device == kPinnedHost) attr->hostPointer = const_cast<void*>(p);
  }
  return cudaSuccess;
}

cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned int flags) {
  if (p == nullptr) return misuse(cudaErrorInvalidValue, "cudaHostAlloc", "null pointer");
  if (flags != cudaHostAllocDefault) {
    return misuse(cudaErrorNotSupported, "cudaHostAlloc", "only cudaHostAllocDefault is simulated");
  }
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  AllocationRef a = allocate(bytes, kPinnedHost);
  if (!a) return misuse(cudaErrorMemoryAllocation, "cudaHostAlloc(" + std::to_string(bytes) + ")", "out of memory");
  *p = a->base;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** p, size_t bytes) { return cudaHostAlloc(p, bytes, cudaHostAllocDefault); }

cudaError_t cudaFreeHost(void* p) { return release(p, true, "cudaFreeHost"); }

}  // extern "C"

namespace {

// One queued or immediate copy: checks, then either runs now (synchronous) or enqueues.
cudaError_t copy(void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind, cudaStream_t stream,
                 bool async) {
  const std::string call = std::string(async ? "cudaMemcpyAsync(" : "cudaMemcpy(") + kind_name(kind) + ", " +
                           std::to_string(bytes) + " bytes)";
  if (device_count() == 0) return cudaErrorNoDevice;
  Device& dev = current();
  if (const cudaError_t e = sticky(dev); e != cudaSuccess) return e;
  dev.count.copies++;
  if (bytes == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return misuse(cudaErrorInvalidValue, call, "null pointer");
  const bool dst_dev = device_side(kind, true, dst), src_dev = device_side(kind, false, src);
  AllocationRef da, sa;
  if (!check_range(dst, bytes, dst_dev, dev.index, call.c_str(), "destination", da) ||
      !check_range(src, bytes, src_dev, dev.index, call.c_str(), "source", sa))
    return last_error;
  cudaStream_t s = resolve_stream(async ? stream : nullptr, dev, call.c_str());
  if (s == nullptr) return last_error;
  {
    Call c;
    c.kind = CallKind::Copy;
    c.name = std::string(async ? "cudaMemcpyAsync(" : "cudaMemcpy(") + kind_name(kind) + ")";
    c.work.read = src_dev ? double(bytes) : 0;
    c.work.written = dst_dev ? double(bytes) : 0;
    c.to_host = !dst_dev;
    c.from_host = !src_dev;
    c.stream = s->id;
    record(dev, std::move(c));
  }
  const bool wait = !async || (!dst_dev && !(da && da->device == kPinnedHost));  // pageable destination: synchronous
  if (dev.cost_only) {
    if (wait) count_host_wait(dev, "a synchronous copy", s->id);
    return cudaSuccess;
  }
  Op op;
  op.what = call + " on stream " + std::to_string(s->id);
  if (da) op.uses.push_back(da);
  if (sa) op.uses.push_back(sa);
  const bool pinned_src = sa && sa->device == kPinnedHost, pinned_dst = da && da->device == kPinnedHost;
  if (!src_dev && !pinned_src) {
    // Pageable source: the runtime stages it before the call returns, so a snapshot is what the
    // device receives.
    auto snapshot = std::make_shared<std::vector<std::byte>>(static_cast<const std::byte*>(src),
                                                             static_cast<const std::byte*>(src) + bytes);
    op.run = [dst, snapshot] { std::memcpy(dst, snapshot->data(), snapshot->size()); };
  } else if (!src_dev) {
    // Pinned source: the device reads it when the copy runs. The host must not change it before
    // then; the simulator compares it with a snapshot taken at the call.
    auto snapshot = std::make_shared<std::vector<std::byte>>(static_cast<const std::byte*>(src),
                                                             static_cast<const std::byte*>(src) + bytes);
    const int d = dev.index;
    op.run = [dst, src, snapshot, d, what = op.what] {
      if (std::memcmp(src, snapshot->data(), snapshot->size()) != 0) {
        device_fault(d, what, "the pinned source " + ptr(src) + " changed while the copy was pending");
        return;
      }
      std::memcpy(dst, src, snapshot->size());
    };
  } else {
    // Device source. A pinned destination holds 0xff bytes until the copy runs: a host read
    // before the copy's completion is awaited sees NaNs, not a stale but plausible value.
    if (pinned_dst && async) std::memset(dst, 0xff, bytes);
    op.run = [dst, src, bytes] { std::memmove(dst, src, bytes); };
  }
  s->enqueue(std::move(op));
  if (wait) {
    s->synchronize();
    count_host_wait(dev, "a synchronous copy", s->id);
  }
  return sticky(dev);
}

// cudaMemcpy2DAsync between device buffers (the backend's strided row copies) or from host memory
// to a device (the loader's transposed weights): `height` rows of `width` bytes, rows `dpitch` /
// `spitch` bytes apart. Each side's whole span must lie in one allocation (a host side may be
// pageable); the rows must not overlap (CUDA leaves overlapping copies undefined).
cudaError_t copy_2d(void* dst, std::size_t dpitch, const void* src, std::size_t spitch, std::size_t width,
                    std::size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
  const std::string call = std::string("cudaMemcpy2DAsync(") + kind_name(kind) + ", " + std::to_string(height) +
                           " rows of " + std::to_string(width) + " bytes)";
  if (device_count() == 0) return cudaErrorNoDevice;
  Device& dev = current();
  if (const cudaError_t e = sticky(dev); e != cudaSuccess) return e;
  dev.count.copies++;
  if (width == 0 || height == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return misuse(cudaErrorInvalidValue, call, "null pointer");
  if (width > dpitch || width > spitch) return misuse(cudaErrorInvalidPitchValue, call, "width exceeds a pitch");
  if (!device_side(kind, true, dst) || (kind != cudaMemcpyHostToDevice && !device_side(kind, false, src)))
    return misuse(cudaErrorNotSupported, call,
                  "the simulator runs 2D copies between device buffers and from the host to a device only");
  const std::size_t dspan = dpitch * (height - 1) + width, sspan = spitch * (height - 1) + width;
  AllocationRef da, sa;
  if (!check_range(dst, dspan, true, dev.index, call.c_str(), "destination", da) ||
      !check_range(src, sspan, device_side(kind, false, src), dev.index, call.c_str(), "source", sa))
    return last_error;
  const auto* d0 = static_cast<const std::byte*>(dst);
  const auto* s0 = static_cast<const std::byte*>(src);
  if (d0 < s0 + sspan && s0 < d0 + dspan)
    return misuse(cudaErrorInvalidValue, call, "source and destination overlap");
  cudaStream_t s = resolve_stream(stream, dev, call.c_str());
  if (s == nullptr) return last_error;
  {
    Call c;
    c.kind = CallKind::Copy;
    c.name = std::string("cudaMemcpy2DAsync(") + kind_name(kind) + ")";
    c.work.read = c.work.written = double(width * height);
    c.stream = s->id;
    record(dev, std::move(c));
  }
  if (dev.cost_only) return cudaSuccess;
  Op op;
  op.what = call + " on stream " + std::to_string(s->id);
  op.uses = {da};
  if (sa) op.uses.push_back(sa);
  if (kind == cudaMemcpyHostToDevice) {
    // A host source: what it holds at the call is what the device receives (the loader refills a
    // staging slot only after the copy's event).
    auto snapshot = std::make_shared<std::vector<std::byte>>(static_cast<const std::byte*>(src),
                                                             static_cast<const std::byte*>(src) + sspan);
    op.run = [dst, dpitch, snapshot, spitch, width, height] {
      for (std::size_t r = 0; r < height; ++r)
        std::memcpy(static_cast<std::byte*>(dst) + r * dpitch, snapshot->data() + r * spitch, width);
    };
  } else {
    op.run = [dst, dpitch, src, spitch, width, height] {
      for (std::size_t r = 0; r < height; ++r)
        std::memcpy(static_cast<std::byte*>(dst) + r * dpitch, static_cast<const std::byte*>(src) + r * spitch, width);
    };
  }
  s->enqueue(std::move(op));
  return sticky(dev);
}

cudaError_t fill(void* dst, int value, std::size_t bytes, cudaStream_t stream, bool async) {
  const std::string call = std::string(async ? "cudaMemsetAsync(" : "cudaMemset(") + std::to_string(bytes) + " bytes)";
  if (device_count() == 0) return cudaErrorNoDevice;
  Device& dev = current();
  if (const cudaError_t e = sticky(dev); e != cudaSuccess) return e;
  dev.count.copies++;
  if (bytes == 0) return cudaSuccess;
  AllocationRef da;
  if (!check_range(dst, bytes, true, dev.index, call.c_str(), "destination", da)) return last_error;
  cudaStream_t s = resolve_stream(async ? stream : nullptr, dev, call.c_str());
  if (s == nullptr) return last_error;
  {
    Call c;
    c.kind = CallKind::Memset;
    c.name = async ? "cudaMemsetAsync" : "cudaMemset";
    c.work.written = double(bytes);
    c.stream = s->id;
    record(dev, std::move(c));
  }
  if (!dev.cost_only)
    s->enqueue(Op{call + " on stream " + std::to_string(s->id), [dst, value, bytes] { std::memset(dst, value, bytes); },
                  {da}});
  if (!async) {
    if (!dev.cost_only) s->synchronize();
    count_host_wait(dev, "cudaMemset", s->id);
  }
  return sticky(dev);
}

}  // namespace

extern "C" {

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return copy(dst, src, bytes, kind, nullptr, false);
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t stream) {
  return copy(dst, src, bytes, kind, stream, true);
}

cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height,
                              cudaMemcpyKind kind, cudaStream_t stream) {
  return copy_2d(dst, dpitch, src, spitch, width, height, kind, stream);
}

cudaError_t cudaMemset(void* dst, int value, size_t bytes) { return fill(dst, value, bytes, nullptr, false); }

cudaError_t cudaMemsetAsync(void* dst, int value, size_t bytes, cudaStream_t stream) {
  return fill(dst, value, bytes, stream, true);
}

// ---- streams and events ---------------------------------------------------------------------

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned int flags) {
  if (s == nullptr) return misuse(cudaErrorInvalidValue, "cudaStreamCreateWithFlags", "null pointer");
  if (flags != cudaStreamNonBlocking) {
    // A blocking stream synchronises implicitly with the legacy default stream, which the
    // simulator does not model; the project creates only non-blocking streams.
    return misuse(cudaErrorNotSupported, "cudaStreamCreateWithFlags",
                  "only cudaStreamNonBlocking streams are simulated");
  }
  if (device_count() == 0) return cudaErrorNoDevice;
  *s = new CUstream_st(current_index, false);
  return cudaSuccess;
}

cudaError_t cudaStreamCreate(cudaStream_t* s) { return cudaStreamCreateWithFlags(s, cudaStreamDefault); }

cudaError_t cudaStreamDestroy(cudaStream_t s) {
  if (s == nullptr || s->legacy) return misuse(cudaErrorInvalidResourceHandle, "cudaStreamDestroy", "not a stream");
  delete s;  // its queued work completes first, as on a device
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  if (device_count() == 0) return cudaErrorNoDevice;
  // A stream may be synchronised from any device.
  Device& dev = device(stream != nullptr ? stream->device : current_index);
  cudaStream_t s = resolve_stream(stream, dev, "cudaStreamSynchronize");
  s->synchronize();
  count_host_wait(dev, "cudaStreamSynchronize", s->id);
  return sticky(dev);
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  if (device_count() == 0) return cudaErrorNoDevice;
  Device& dev = device(stream != nullptr ? stream->device : current_index);
  cudaStream_t s = resolve_stream(stream, dev, "cudaStreamQuery");
  if (const cudaError_t e = sticky(dev); e != cudaSuccess) return e;
  return s->idle() ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned int flags) {
  if (e == nullptr) return misuse(cudaErrorInvalidValue, "cudaEventCreateWithFlags", "null pointer");
  if ((flags & ~unsigned(cudaEventDisableTiming)) != 0) {
    return misuse(cudaErrorNotSupported, "cudaEventCreateWithFlags", "only cudaEventDisableTiming is simulated");
  }
  if (device_count() == 0) return cudaErrorNoDevice;
  *e = new CUevent_st();
  (*e)->state->device = current_index;
  (*e)->state->timing = (flags & cudaEventDisableTiming) == 0;
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* e) { return cudaEventCreateWithFlags(e, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t e) {
  if (e == nullptr) return misuse(cudaErrorInvalidResourceHandle, "cudaEventDestroy", "null event");
  delete e;  // queued records and waits hold its state
  return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t stream) {
  if (e == nullptr) return misuse(cudaErrorInvalidResourceHandle, "cudaEventRecord", "null event");
  if (device_count() == 0) return cudaErrorNoDevice;
  Device& dev = current();
  if (const cudaError_t err = sticky(dev); err != cudaSuccess) return err;
  auto st = e->state;
  if (st->device != dev.index) {
    return misuse(cudaErrorInvalidResourceHandle, "cudaEventRecord",
                  "the event was created on device " + std::to_string(st->device) +
                      " but the calling thread's current device is " + std::to_string(dev.index));
  }
  cudaStream_t s = resolve_stream(stream, dev, "cudaEventRecord");
  if (s == nullptr) return last_error;
  std::uint64_t gen;
  {
    std::lock_guard lock(st->m);
    gen = ++st->recorded;
    st->stream = s->id;
    st->record_id = machine().next_record_id++;
  }
  {
    Call c;
    c.kind = CallKind::EventRecord;
    c.name = "cudaEventRecord";
    c.stream = s->id;
    c.event = st->record_id;
    record(dev, std::move(c));
  }
  s->enqueue(Op{"cudaEventRecord on stream " + std::to_string(s->id),
                [st, gen] {
                  {
                    std::lock_guard lock(st->m);
                    st->completed = std::max(st->completed, gen);
                    st->when = Clock::now();
                  }
                  st->cv.notify_all();
                },
                {}});
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t e, unsigned int flags) {
  if (e == nullptr || flags != 0) return misuse(cudaErrorInvalidValue, "cudaStreamWaitEvent", "null event or flags");
  if (device_count() == 0) return cudaErrorNoDevice;
  Device& dev = current();
  cudaStream_t s = resolve_stream(stream, dev, "cudaStreamWaitEvent");
  if (s == nullptr) return last_error;
  auto st = e->state;
  std::uint64_t gen, record_id;
  {
    std::lock_guard lock(st->m);
    gen = st->recorded;  // the most recent record at the call; none: no wait
    record_id = st->record_id;
  }
  if (gen == 0) return cudaSuccess;
  {
    Call c;
    c.kind = CallKind::StreamWait;
    c.name = "cudaStreamWaitEvent";
    c.stream = s->id;
    c.event = record_id;
    record(dev, std::move(c));
  }
  s->enqueue(Op{"cudaStreamWaitEvent on stream " + std::to_string(s->id), [st, gen] { wait_event_state(*st, gen); }, {}});
  return cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t e) {
  if (e == nullptr) return misuse(cudaErrorInvalidResourceHandle, "cudaEventSynchronize", "null event");
  auto st = e->state;
  std::uint64_t gen;
  {
    std::lock_guard lock(st->m);
    gen = st->recorded;
  }
  wait_event_state(*st, gen);
  Device& dev = device(st->device);
  count_host_wait(dev, "cudaEventSynchronize", st->stream, st->record_id);
  return sticky(dev);
}

cudaError_t cudaEventQuery(cudaEvent_t e) {
  if (e == nullptr) return misuse(cudaErrorInvalidResourceHandle, "cudaEventQuery", "null event");
  auto st = e->state;
  Device& dev = device(st->device);
  if (const cudaError_t err = sticky(dev); err != cudaSuccess) return err;
  std::lock_guard lock(st->m);
  if (st->completed < st->recorded) return cudaErrorNotReady;
  if (st->polled < st->recorded) {  // a host wait on this record, counted once
    st->polled = st->recorded;
    count_host_wait(dev, "cudaEventQuery until done", st->stream, st->record_id);
  }
  return cudaSuccess;
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr || start == nullptr || end == nullptr) {
    return misuse(cudaErrorInvalidValue, "cudaEventElapsedTime", "null argument");
  }
  auto a = start->state, b = end->state;
  if (!a->timing || !b->timing) {
    return misuse(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime",
                  "an event was created with cudaEventDisableTiming");
  }
  std::scoped_lock lock(a->m, b->m);
  if (a->recorded == 0 || b->recorded == 0) {
    return misuse(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime", "an event was never recorded");
  }
  if (a->completed < a->recorded || b->completed < b->recorded) return cudaErrorNotReady;
  *ms = std::chrono::duration<float, std::milli>(b->when - a->when).count();
  return cudaSuccess;
}

}  // extern "C"
