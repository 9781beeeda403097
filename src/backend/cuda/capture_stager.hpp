// Capture with overlap: each captured state is copied device-to-host on a separate copy stream
// while the compute stream runs the following layers, and the host copies it into the result as
// soon as it lands. Per batch and point: at most one device-to-device snapshot (for states the
// next layers overwrite in place) and exactly one device-to-host copy; no per-sample syncs.
#pragma once
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <vector>

#include "backend/cuda/cuda_resources.hpp"
#include "backend/cuda/device_all_reduce.hpp"
#include "core/buffer_pool.hpp"
#include "core/dtype.hpp"
#include "model/capture.hpp"

namespace layertap::cuda {

class CaptureStager {
 public:
  // Slots for up to `max_points` distinct points of (max_tokens, hidden) bf16 states each:
  //   snapshots   (max_points, max_tokens, hidden)  device
  //   host_states (max_points, max_tokens, hidden)  pinned host
  CaptureStager(std::int64_t max_points, std::int64_t max_tokens, std::int64_t hidden, __nv_bfloat16* snapshots,
                std::uint16_t* host_states);
  ~CaptureStager();  // waits for copies still in flight: their targets are about to be freed
  CaptureStager(const CaptureStager&) = delete;
  CaptureStager& operator=(const CaptureStager&) = delete;

  // Starts a batch of T tokens capturing the points of `plan` (none when `plan` is null): one slot
  // per distinct point id. Throws when there are more distinct points than slots.
  void begin(const CapturePlan* plan, std::int64_t T);
  bool wants(std::int64_t id) const;
  // Captures `state` (T, hidden), produced by the work enqueued so far on `compute`, as point
  // `id`. `overwritten_later`: the compute stream will modify `state` in place after this, so it
  // is first snapshotted device-to-device (on `compute`, at memory bandwidth) and the slow copy
  // to the host reads the snapshot.
  void capture(std::int64_t id, const __nv_bfloat16* state, bool overwritten_later, cudaStream_t compute);
  // Ends the batch's work: after everything queued so far on `compute` and every capture copy,
  // done() completes. One host wait on it covers the forward (collect's last wait is that one).
  void end_batch(cudaStream_t compute);
  cudaEvent_t done() const { return done_.get(); }
  // The captured states in plan order as `dtype` (BF16 as is, F32 widened on the host). Takes
  // the results' buffers first (from `pool` when set, else new ones), while the GPU still runs,
  // then fills each as soon as its copy completes.
  std::vector<std::vector<std::byte>> collect(DType dtype, DeviceAllReduce& comm, double timeout_s, int threads);
  void set_pool(BufferPool* pool) { pool_ = pool; }

 private:
  struct Slot {
    std::int64_t id = -1;
    bool done = false;  // its copy has been enqueued
    Event ready, copied;
  };
  std::int64_t tokens_ = 0, max_tokens_, hidden_;
  __nv_bfloat16* snapshots_;
  std::uint16_t* host_states_;
  Stream copy_;
  Event compute_done_, done_;  // end_batch: the compute stream's end, then the copy stream's
  std::vector<Slot> slots_;               // (max_points)
  std::vector<std::int64_t> plan_ids_;    // this batch's point ids, in plan order
  std::vector<std::size_t> order_;        // slots in the order their copies were enqueued
  BufferPool* pool_ = nullptr;
};

}  // namespace layertap::cuda
