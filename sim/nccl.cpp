// NCCL on the simulated GPUs: the communicator calls src/comm/nccl_comm.cpp makes and an in-place
// sum all-reduce, ordered on a stream. Ranks meet in a POSIX shared-memory segment named by the
// unique id, so one implementation serves ranks as threads of one process and ranks as processes
// under mpirun on one node. Each all-reduce moves the data in slots of kSlotBytes: every rank
// copies its part into its slot, all wait, each adds the slots up in rank order, rounding to
// bf16 after each addition as NCCL's ring does (so every rank gets the same bits), all wait.
// Non-blocking communicators (config.blocking = 0) meet on a background thread and report
// ncclInProgress until then. A peer that never arrives times out (LAYERTAP_SIM_NCCL_TIMEOUT_S,
// 120 s) as an asynchronous error; an abort wakes every waiting peer. Like NCCL 2.22 and later, a
// communicator takes device memory for its buffers (kBufferBytes here) when it connects: at the
// first all-reduce by default, during initialisation with NCCL_RUNTIME_CONNECT=0.
#include <fcntl.h>
#include <nccl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <thread>

#include <cuda_bf16.h>

#include "sim/simulator.hpp"

namespace layertap::sim {
namespace {

constexpr std::size_t kSlotBytes = std::size_t(1) << 20;

struct Header {
  std::atomic<std::uint32_t> nranks;
  std::atomic<std::uint32_t> arrived;
  std::atomic<std::uint32_t> generation;
  std::atomic<std::uint32_t> aborted;
};
static_assert(std::atomic<std::uint32_t>::is_always_lock_free, "process-shared atomics");

double timeout_s() {
  const char* v = std::getenv("LAYERTAP_SIM_NCCL_TIMEOUT_S");
  return v != nullptr && std::atof(v) > 0 ? std::atof(v) : 120.0;
}

// The mapped segment; unmapped when the communicator and its queued collectives are all gone.
struct Segment {
  std::string name;
  void* base = nullptr;
  std::size_t bytes = 0;
  int nranks = 0, rank = 0;
  std::atomic<int> state{ncclInProgress};  // ncclCommGetAsyncError's answer
  std::string last_error;
  Header* header() const { return static_cast<Header*>(base); }
  std::byte* slot(int r) const { return static_cast<std::byte*>(base) + 64 + std::size_t(r) * kSlotBytes; }
  ~Segment() {
    if (base != nullptr) munmap(base, bytes);
  }
  // False on timeout or abort.
  bool barrier() const {
    Header* h = header();
    const std::uint32_t gen = h->generation.load();
    if (h->arrived.fetch_add(1) + 1 == std::uint32_t(nranks)) {
      h->arrived.store(0);
      h->generation.fetch_add(1);
      return true;
    }
    const auto t0 = std::chrono::steady_clock::now();
    const double limit = timeout_s();
    for (int spins = 0; h->generation.load() == gen; ++spins) {
      if (h->aborted.load() != 0) return false;
      if (spins < 100) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
        if (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > limit) return false;
      }
    }
    return true;
  }
};

std::string hex(const ncclUniqueId& id) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (int i = 0; i < 16; ++i) {
    const auto b = static_cast<unsigned char>(id.internal[i]);
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

}  // namespace
}  // namespace layertap::sim

struct ncclComm {
  std::shared_ptr<layertap::sim::Segment> segment;
  int device = 0;
  std::thread joiner;
  void* buffers = nullptr;  // device memory taken when the communicator connects
};

using namespace layertap::sim;

namespace {

void fail(Segment& s, ncclResult_t r, const std::string& why) {
  s.last_error = why;
  report("NCCL rank " + std::to_string(s.rank) + ": " + why);
  s.state.store(r);
}

void join(Segment& s) {
  Header* h = s.header();
  std::uint32_t expected = 0;
  if (!h->nranks.compare_exchange_strong(expected, std::uint32_t(s.nranks)) && expected != std::uint32_t(s.nranks)) {
    fail(s, ncclInvalidUsage,
         "the communicator's ranks disagree on its size (" + std::to_string(expected) + " vs " +
             std::to_string(s.nranks) + ")");
    return;
  }
  if (!s.barrier()) {
    fail(s, ncclSystemError, "initialisation: not every rank of " + std::to_string(s.nranks) + " arrived");
    return;
  }
  if (s.rank == 0) shm_unlink(s.name.c_str());  // every rank has it mapped now
  s.state.store(ncclSuccess);
}

std::size_t type_bytes(ncclDataType_t t) { return t == ncclFloat32 ? 4 : 2; }

constexpr std::size_t kBufferBytes = std::size_t(64) << 20;  // what a connected communicator holds

// Takes the communicator's buffers on its device (the caller's current device), once.
bool connect(ncclComm* c) {
  if (c->buffers != nullptr) return true;
  if (cudaMalloc(&c->buffers, kBufferBytes) == cudaSuccess) return true;
  c->buffers = nullptr;
  report("NCCL: cannot allocate the communicator's " + std::to_string(kBufferBytes >> 20) +
         " MiB of buffers on device " + std::to_string(c->device));
  return false;
}

void release(ncclComm* c) {
  if (c->buffers != nullptr) (void)cudaFree(c->buffers);
  c->buffers = nullptr;
}

}  // namespace

extern "C" {

ncclResult_t ncclGetVersion(int* v) {
  if (v == nullptr) return ncclInvalidArgument;
  *v = NCCL_VERSION_CODE;
  return ncclSuccess;
}

const char* ncclGetErrorString(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error";
    case ncclSystemError: return "unhandled system error (a peer did not arrive in time, or the communicator was aborted)";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

const char* ncclGetLastError(ncclComm_t c) { return c != nullptr ? c->segment->last_error.c_str() : ""; }

ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (id == nullptr) return ncclInvalidArgument;
  std::memset(id, 0, sizeof *id);
  std::random_device rd;
  for (int i = 0; i < 16; i += 4) {
    const std::uint32_t r = rd();
    std::memcpy(id->internal + i, &r, 4);
  }
  return ncclSuccess;
}

ncclResult_t ncclCommInitRankConfig(ncclComm_t* out, int nranks, ncclUniqueId id, int rank, ncclConfig_t* config) {
  if (out == nullptr || nranks < 1 || rank < 0 || rank >= nranks) {
    report("ncclCommInitRankConfig: rank " + std::to_string(rank) + " of " + std::to_string(nranks) +
           " is not a valid rank");
    return ncclInvalidArgument;
  }
  if (device_count() == 0) return ncclUnhandledCudaError;
  auto seg = std::make_shared<Segment>();
  seg->name = "/layertap-sim-nccl-" + hex(id);
  seg->nranks = nranks;
  seg->rank = rank;
  seg->bytes = 64 + std::size_t(nranks) * kSlotBytes;
  const int fd = shm_open(seg->name.c_str(), O_CREAT | O_RDWR, 0600);
  if (fd < 0 || ftruncate(fd, off_t(seg->bytes)) != 0) {
    if (fd >= 0) close(fd);
    report("ncclCommInitRankConfig: cannot create the shared-memory segment " + seg->name);
    return ncclSystemError;
  }
  seg->base = mmap(nullptr, seg->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (seg->base == MAP_FAILED) {
    seg->base = nullptr;
    return ncclSystemError;
  }
  auto* c = new ncclComm();
  c->segment = seg;
  c->device = current_device();
  *out = c;
  if (const char* eager = std::getenv("NCCL_RUNTIME_CONNECT"); eager != nullptr && std::string(eager) == "0" &&
      !connect(c))
    return ncclUnhandledCudaError;
  const bool blocking = config == nullptr || config->blocking != 0;
  if (blocking) {
    join(*seg);
    return static_cast<ncclResult_t>(seg->state.load());
  }
  c->joiner = std::thread([seg] { join(*seg); });
  return ncclInProgress;
}

ncclResult_t ncclCommInitRank(ncclComm_t* out, int nranks, ncclUniqueId id, int rank) {
  return ncclCommInitRankConfig(out, nranks, id, rank, nullptr);
}

ncclResult_t ncclCommGetAsyncError(ncclComm_t c, ncclResult_t* state) {
  if (c == nullptr || state == nullptr) return ncclInvalidArgument;
  *state = static_cast<ncclResult_t>(c->segment->state.load());
  return ncclSuccess;
}

ncclResult_t ncclCommFinalize(ncclComm_t c) {
  if (c == nullptr) return ncclInvalidArgument;
  if (c->joiner.joinable()) c->joiner.join();
  return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t c) {
  if (c == nullptr) return ncclInvalidArgument;
  if (c->joiner.joinable()) c->joiner.join();
  release(c);
  delete c;  // queued all-reduces keep the segment mapped
  return ncclSuccess;
}

ncclResult_t ncclCommAbort(ncclComm_t c) {
  if (c == nullptr) return ncclSuccess;
  c->segment->header()->aborted.store(1);  // peers waiting in a barrier give up at once
  if (c->joiner.joinable()) c->joiner.join();
  release(c);
  delete c;
  return ncclSuccess;
}

ncclResult_t ncclAllReduce(const void* send, void* recv, size_t count, ncclDataType_t type, ncclRedOp_t op,
                           ncclComm_t c, cudaStream_t stream) {
  const std::string call = "ncclAllReduce(" + std::to_string(count) + " elements)";
  if (c == nullptr) return ncclInvalidArgument;
  if (op != ncclSum || (type != ncclBfloat16 && type != ncclFloat32)) {
    report(call + ": only sums of bf16 or float32 are simulated");
    return ncclInvalidArgument;
  }
  if (c->segment->state.load() != ncclSuccess) {
    report(call + ": the communicator is not ready (state " + std::to_string(c->segment->state.load()) + ")");
    return ncclInvalidUsage;
  }
  Device& dev = current();
  if (dev.index != c->device) {
    report(call + ": the communicator belongs to device " + std::to_string(c->device) +
           " but the calling thread's current device is " + std::to_string(dev.index));
    return ncclInvalidUsage;
  }
  const std::size_t bytes = count * type_bytes(type);
  if (count == 0) return ncclSuccess;
  AllocationRef sa = find_allocation(send, bytes), ra = find_allocation(recv, bytes);
  if (!sa || !ra || sa->device != dev.index || ra->device != dev.index) {
    report(call + ": the buffers must be " + std::to_string(bytes) + " bytes of device memory of device " +
           std::to_string(dev.index));
    return ncclInvalidArgument;
  }
  cudaStream_t s = resolve_stream(stream, dev, "ncclAllReduce");
  if (s == nullptr) return ncclInvalidUsage;
  if (!connect(c)) return ncclUnhandledCudaError;
  dev.count.all_reduces++;
  {
    Call call_record;
    call_record.kind = CallKind::AllReduce;
    call_record.name = "ncclAllReduce";
    call_record.work.read = call_record.work.written = double(bytes);
    call_record.ranks = c->segment->nranks;
    call_record.stream = s->id;
    record(dev, std::move(call_record));
  }
  if (dev.cost_only) return ncclSuccess;
  std::shared_ptr<Segment> seg = c->segment;
  s->enqueue(Op{call, [seg, send, recv, count, type] {
                  const std::size_t elem = type_bytes(type), per_slot = kSlotBytes / elem;
                  Segment& sg = *seg;
                  for (std::size_t first = 0; first < count; first += per_slot) {
                    const std::size_t n = std::min(per_slot, count - first);
                    std::memcpy(sg.slot(sg.rank), static_cast<const std::byte*>(send) + first * elem, n * elem);
                    if (!sg.barrier()) {
                      fail(sg, ncclSystemError, "all-reduce: a peer did not arrive (or the communicator was aborted)");
                      return;
                    }
                    auto* out = static_cast<std::byte*>(recv) + first * elem;
                    for (std::size_t i = 0; i < n; ++i) {
                      if (type == ncclFloat32) {
                        float acc = 0.0f;
                        for (int r = 0; r < sg.nranks; ++r) {
                          float v;
                          std::memcpy(&v, sg.slot(r) + 4 * i, 4);
                          acc = r == 0 ? v : acc + v;
                        }
                        std::memcpy(out + 4 * i, &acc, 4);
                      } else {
                        __nv_bfloat16 acc;
                        std::memcpy(&acc, sg.slot(0) + 2 * i, 2);
                        for (int r = 1; r < sg.nranks; ++r) {
                          __nv_bfloat16 v;
                          std::memcpy(&v, sg.slot(r) + 2 * i, 2);
                          acc = __float2bfloat16_rn(__bfloat162float(acc) + __bfloat162float(v));
                        }
                        std::memcpy(out + 2 * i, &acc, 2);
                      }
                    }
                    if (!sg.barrier()) {
                      fail(sg, ncclSystemError, "all-reduce: a peer did not arrive (or the communicator was aborted)");
                      return;
                    }
                  }
                },
                {sa, ra}});
  return ncclSuccess;
}

}  // extern "C"
