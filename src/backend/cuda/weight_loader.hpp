// Executes a load plan (load_plan.hpp): reader threads pread each window of the checkpoint into a
// small ring of staging slots, convert and check it there, and hand the slot to a target (the
// device, a host image, or nothing for a pre-read) while they read the next window. Host memory is
// the ring (threads x slots x slot_bytes, plus one conversion buffer per thread) whatever the model;
// the checkpoint is never mapped for this, so no file pages stay resident in the process.
#pragma once
#include <cstddef>
#include <cstdint>

#include "backend/cuda/load_plan.hpp"

namespace layertap::cuda {

struct LoaderOptions {
  int threads = 4;                         // reader threads
  int slots_per_thread = 2;                // a slot is refilled while the other's copy runs
  std::size_t slot_bytes = std::size_t(32) << 20;
  // Host bytes of the ring and the threads' conversion buffers.
  std::size_t host_bytes() const { return std::size_t(threads) * (std::size_t(slots_per_thread) + 1) * slot_bytes; }
};

struct LoadStats {
  std::size_t bytes_read = 0;     // from the checkpoint
  std::size_t bytes_written = 0;  // to the target
  std::size_t copies = 0;
  std::uint64_t read_calls = 0;   // pread/preadv calls (model/stored_window.hpp)
  double seconds = 0;
  std::int64_t peak_anonymous_bytes = 0;  // RssAnon sampled after each chunk
};

// Where staged chunks go. Slots are numbered per thread; wait(t, s) returns once what put(t, s, ...)
// handed over last has been consumed, so the slot can be refilled.
class LoadTarget {
 public:
  virtual ~LoadTarget() = default;
  virtual std::byte* allocate_slot(std::size_t bytes) = 0;
  virtual void free_slot(std::byte* slot) = 0;
  virtual void begin_thread(int /*thread*/) {}
  virtual void put(int thread, int slot, std::size_t dst, const std::byte* staged, std::size_t bytes) = 0;
  // `rows` rows of `width` bytes from `staged` (contiguous) to dst, dst + pitch, ... (a transposed copy).
  virtual void put_rows(int thread, int slot, std::size_t dst, std::size_t pitch, const std::byte* staged,
                        std::size_t width, std::size_t rows) = 0;
  virtual void wait(int /*thread*/, int /*slot*/) {}
};

// A host image of the resident block (tests: compared with DeviceWeights::reference_image), or,
// with a null `image`, nowhere: the pre-read of `extract --dry-run --read-weights`.
class HostTarget final : public LoadTarget {
 public:
  explicit HostTarget(std::byte* image) : image_(image) {}
  std::byte* allocate_slot(std::size_t bytes) override;
  void free_slot(std::byte* slot) override;
  void put(int thread, int slot, std::size_t dst, const std::byte* staged, std::size_t bytes) override;
  void put_rows(int thread, int slot, std::size_t dst, std::size_t pitch, const std::byte* staged, std::size_t width,
                std::size_t rows) override;

 private:
  std::byte* image_;
};

// Runs every copy of `plan` into `target`. Throws naming the tensor and file on a short read, or on a
// value that breaks its copy's ValueRule, or on a float32 weight beyond bfloat16's range where it
// is rounded to bf16; throws Stopped when a stop signal
// arrives (core/stop_request.hpp).
LoadStats run_load_plan(const LoadPlan& plan, LoadTarget& target, const LoaderOptions& options);

}  // namespace layertap::cuda
