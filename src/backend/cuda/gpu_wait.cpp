#include "backend/cuda/gpu_wait.hpp"

#include <chrono>
#include <thread>

#include "core/error.hpp"
#include "kernels/cuda_check.hpp"

namespace layertap::cuda {

void wait_for_event(cudaEvent_t event, DeviceAllReduce& comm, double timeout_s, std::string_view what) {
  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  for (int polls = 0;; ++polls) {
    const cudaError_t st = cudaEventQuery(event);
    if (st == cudaSuccess) return;
    if (st != cudaErrorNotReady) LT_CUDA_CHECK(st);
    comm.check_async_error();
    const double waited = std::chrono::duration<double>(Clock::now() - start).count();
    if (waited > timeout_s) {
      comm.abort();
      LT_FAIL("timed out after ", waited, " s waiting for the GPU (", what,
              "); a tensor-parallel peer may have failed or the device hung. The wait limit is the backend's "
              "timeout_s (", timeout_s, " s)");
    }
    // Spin briefly (short waits are common at the end of a batch), then sleep between polls.
    if (polls < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    }
  }
}

}  // namespace layertap::cuda
