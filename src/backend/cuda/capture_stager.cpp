#include "backend/cuda/capture_stager.hpp"

#include <algorithm>

#include "backend/cuda/cost_scope.hpp"
#include "backend/cuda/gpu_wait.hpp"
#include "backend/cuda/host_copy.hpp"
#include "core/error.hpp"
#include "kernels/cuda_check.hpp"

namespace layertap::cuda {

CaptureStager::CaptureStager(std::int64_t max_points, std::int64_t max_tokens, std::int64_t hidden,
                             __nv_bfloat16* snapshots, std::uint16_t* host_states)
    : max_tokens_(max_tokens), hidden_(hidden), snapshots_(snapshots), host_states_(host_states),
      slots_(std::size_t(max_points)) {}

CaptureStager::~CaptureStager() { (void)cudaStreamSynchronize(copy_.get()); }

void CaptureStager::begin(const CapturePlan* plan, std::int64_t T) {
  LT_CHECK(T <= max_tokens_, "capture: batch of ", T, " tokens, buffers hold ", max_tokens_);
  tokens_ = T;
  plan_ids_.clear();
  order_.clear();
  for (Slot& s : slots_) {
    s.id = -1;
    s.done = false;
  }
  if (plan == nullptr) return;
  std::size_t used = 0;
  for (const CapturePoint& p : plan->points) {
    plan_ids_.push_back(p.id);
    if (wants(p.id)) continue;  // a repeated point: one slot, one copy, several results
    LT_CHECK(used < slots_.size(), "capture plan '", plan->request, "' has more than ", slots_.size(),
             " distinct points; the CUDA backend was built for at most ", slots_.size(),
             " (raise max_capture_points)");
    slots_[used++].id = p.id;
  }
}

bool CaptureStager::wants(std::int64_t id) const {
  return std::any_of(slots_.begin(), slots_.end(), [&](const Slot& s) { return s.id == id; });
}

void CaptureStager::capture(std::int64_t id, const __nv_bfloat16* state, bool overwritten_later, cudaStream_t compute) {
  const auto it = std::find_if(slots_.begin(), slots_.end(), [&](const Slot& s) { return s.id == id; });
  if (it == slots_.end()) return;
  LT_CHECK(!it->done, "capture point ", id, " captured twice in one batch");
  const std::size_t slot = std::size_t(it - slots_.begin());
  const std::size_t elems = std::size_t(tokens_ * hidden_), stride = std::size_t(max_tokens_ * hidden_);
  const std::size_t bytes = elems * sizeof(std::uint16_t);
  const void* src = state;
  if (overwritten_later) {
    __nv_bfloat16* snap = snapshots_ + slot * stride;  // (T, H)
    LT_CUDA_CHECK(cudaMemcpyAsync(snap, state, bytes, cudaMemcpyDeviceToDevice, compute));
    src = snap;
  }
  LT_CUDA_CHECK(cudaEventRecord(it->ready.get(), compute));
  LT_CUDA_CHECK(cudaStreamWaitEvent(copy_.get(), it->ready.get(), 0));
  LT_CUDA_CHECK(cudaMemcpyAsync(host_states_ + slot * stride, src, bytes, cudaMemcpyDeviceToHost, copy_.get()));
  LT_CUDA_CHECK(cudaEventRecord(it->copied.get(), copy_.get()));
  it->done = true;
  order_.push_back(slot);
}

void CaptureStager::end_batch(cudaStream_t compute) {
  LT_CUDA_CHECK(cudaEventRecord(compute_done_.get(), compute));
  LT_CUDA_CHECK(cudaStreamWaitEvent(copy_.get(), compute_done_.get(), 0));
  LT_CUDA_CHECK(cudaEventRecord(done_.get(), copy_.get()));
}

std::vector<std::vector<std::byte>> CaptureStager::collect(DType dtype, DeviceAllReduce& comm, double timeout_s,
                                                           int threads) {
  LT_CHECK(dtype == DType::BF16 || dtype == DType::F32, "cuda backend: cannot return states as ", dtype_name(dtype),
           " (bfloat16 or float32)");
  for (const std::int64_t id : plan_ids_)
    LT_CHECK(std::any_of(slots_.begin(), slots_.end(), [&](const Slot& s) { return s.id == id && s.done; }),
             "capture point ", id, " was requested but never reached by the forward pass");
  const std::size_t elems = std::size_t(tokens_ * hidden_), stride = std::size_t(max_tokens_ * hidden_);
  const std::size_t bytes = elems * dtype_size(dtype);
  std::vector<std::vector<std::byte>> out(plan_ids_.size());
  cost_scope(-1, "capture");
  for (auto& v : out) {  // page faults and zeroing of new buffers overlap the GPU's work
    bool fresh = true;
    v = pool_ != nullptr ? pool_->take(bytes, &fresh) : std::vector<std::byte>(bytes);
    if (fresh) cost_host_work("capture: a new result buffer faulted in and zero-filled", 0, double(bytes), 1);
  }
  for (const std::size_t slot : order_) {
    // The last copy is waited for with the batch's end (end_batch): one host wait fewer.
    wait_for_event(slot == order_.back() ? done_.get() : slots_[slot].copied.get(), comm, timeout_s,
                   cat("copy of capture point ", slots_[slot].id));
    const std::uint16_t* src = host_states_ + slot * stride;
    for (std::size_t p = 0; p < plan_ids_.size(); ++p) {
      if (plan_ids_[p] != slots_[slot].id) continue;
      cost_host_work("capture: a state copied out of the pinned staging", double(elems * 2), double(bytes), threads);
      if (dtype == DType::BF16) {
        parallel_copy(out[p].data(), src, elems * sizeof(std::uint16_t), threads);
      } else {
        parallel_bf16_to_f32(reinterpret_cast<float*>(out[p].data()), src, elems, threads);
      }
    }
  }
  return out;
}

}  // namespace layertap::cuda
