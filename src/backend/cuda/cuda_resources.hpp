// RAII owners of CUDA runtime resources: device memory, pinned host memory, streams, events.
// Each is created on the current device, checked, and released without throwing.
#pragma once
#include <cuda_runtime_api.h>

#include <cstddef>
#include <utility>

#include "kernels/cuda_check.hpp"

namespace layertap::cuda {

// Frees with `release` when owning; movable, not copyable.
template <typename T, void (*Release)(T)>
class Owned {
 public:
  Owned() = default;
  explicit Owned(T v) : v_(v) {}
  Owned(Owned&& o) noexcept : v_(std::exchange(o.v_, T{})) {}
  Owned& operator=(Owned&& o) noexcept {
    if (this != &o) {
      reset();
      v_ = std::exchange(o.v_, T{});
    }
    return *this;
  }
  Owned(const Owned&) = delete;
  Owned& operator=(const Owned&) = delete;
  ~Owned() { reset(); }
  T get() const { return v_; }

 private:
  void reset() {
    if (v_ != T{}) Release(v_);
    v_ = T{};
  }
  T v_{};
};

// Release errors are ignored: they can only repeat an error already reported by a checked call.
inline void free_device(void* p) { (void)cudaFree(p); }
inline void free_pinned(void* p) { (void)cudaFreeHost(p); }
inline void destroy_stream(cudaStream_t s) { (void)cudaStreamDestroy(s); }
inline void destroy_event(cudaEvent_t e) { (void)cudaEventDestroy(e); }

class DeviceMemory {
 public:
  DeviceMemory() = default;
  explicit DeviceMemory(std::size_t bytes) : bytes_(bytes) {
    void* p = nullptr;
    if (bytes > 0) LT_CUDA_CHECK(cudaMalloc(&p, bytes));
    mem_ = Owned<void*, free_device>(p);
  }
  std::byte* data() const { return static_cast<std::byte*>(mem_.get()); }
  std::size_t bytes() const { return bytes_; }

 private:
  Owned<void*, free_device> mem_;
  std::size_t bytes_ = 0;
};

// Page-locked host memory: the target of asynchronous device-to-host copies.
class PinnedMemory {
 public:
  PinnedMemory() = default;
  explicit PinnedMemory(std::size_t bytes) : bytes_(bytes) {
    void* p = nullptr;
    if (bytes > 0) LT_CUDA_CHECK(cudaHostAlloc(&p, bytes, cudaHostAllocDefault));
    mem_ = Owned<void*, free_pinned>(p);
  }
  std::byte* data() const { return static_cast<std::byte*>(mem_.get()); }
  std::size_t bytes() const { return bytes_; }

 private:
  Owned<void*, free_pinned> mem_;
  std::size_t bytes_ = 0;
};

// A non-blocking stream: no implicit synchronisation with the legacy default stream.
class Stream {
 public:
  Stream() {
    cudaStream_t s = nullptr;
    LT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    s_ = Owned<cudaStream_t, destroy_stream>(s);
  }
  cudaStream_t get() const { return s_.get(); }

 private:
  Owned<cudaStream_t, destroy_stream> s_;
};

// An event for ordering and completion queries (timing disabled), or for timing.
class Event {
 public:
  explicit Event(bool timing = false) {
    cudaEvent_t e = nullptr;
    LT_CUDA_CHECK(cudaEventCreateWithFlags(&e, timing ? cudaEventDefault : cudaEventDisableTiming));
    e_ = Owned<cudaEvent_t, destroy_event>(e);
  }
  cudaEvent_t get() const { return e_.get(); }

 private:
  Owned<cudaEvent_t, destroy_event> e_;
};

}  // namespace layertap::cuda
