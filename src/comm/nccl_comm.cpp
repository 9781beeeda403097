#include "comm/nccl_comm.hpp"

#include <chrono>
#include <cstdlib>
#include <thread>

#include "comm/mpi_groups.hpp"
#include "core/error.hpp"
#include "core/stop_request.hpp"
#include "core/log.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/nccl_check.hpp"

#define LT_MPI_OK(call) LT_CHECK((call) == MPI_SUCCESS, "MPI call failed: ", #call)

namespace layertap {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

}  // namespace

NcclComm::NcclComm(MPI_Comm tp, double timeout_s) : timeout_s_(timeout_s) {
  LT_CHECK(timeout_s > 0, "NCCL communicator: timeout must be positive");
  LT_MPI_OK(MPI_Comm_rank(tp, &rank_));
  LT_MPI_OK(MPI_Comm_size(tp, &size_));
  ncclUniqueId id{};
  if (rank_ == 0) LT_NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_Request request;
  LT_MPI_OK(MPI_Ibcast(&id, int(sizeof id), MPI_BYTE, 0, tp, &request));
  wait_for(request);  // polled at start-up: a stop signal ends a rank waiting for a slower peer
  ::setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);  // connect at init (see the header)
  std::size_t free_before = 0, free_after = 0, total = 0;
  LT_CUDA_CHECK(cudaMemGetInfo(&free_before, &total));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // calls return ncclInProgress instead of blocking: every wait is ours to bound
  ncclComm_t comm = nullptr;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, size_, id, rank_, &config);
  comm_ = comm;
  if (r != ncclInProgress) {
    if (r != ncclSuccess) abort();
    LT_NCCL_CHECK(r);
  }
  wait_ready("initialisation (are all ranks of the tensor-parallel group running?)");
  LT_CUDA_CHECK(cudaMemGetInfo(&free_after, &total));
  device_bytes_ = free_before > free_after ? free_before - free_after : 0;
}

NcclComm::~NcclComm() {
  if (comm_ == nullptr) return;
  // Flush and release; a communicator that fails or outlasts the timeout is aborted instead.
  ncclResult_t r = ncclCommFinalize(comm_);
  const auto t0 = Clock::now();
  while (r == ncclInProgress && seconds_since(t0) < timeout_s_) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    if (ncclCommGetAsyncError(comm_, &r) != ncclSuccess) r = ncclInternalError;
  }
  if (r == ncclSuccess) r = ncclCommDestroy(comm_);
  if (r != ncclSuccess) {
    log_warn("NCCL communicator: finalize failed (", ncclGetErrorString(r), "); aborting it");
    (void)ncclCommAbort(comm_);
  }
  comm_ = nullptr;
}

void NcclComm::wait_ready(const char* what) {
  const auto t0 = Clock::now();
  for (;;) {
    LT_CHECK(comm_ != nullptr, "NCCL communicator was aborted; ", what, " cannot proceed");
    ncclResult_t state = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
    if (r != ncclSuccess) {
      abort();
      LT_NCCL_CHECK(r);
    }
    if (state == ncclSuccess) return;
    if (stop_requested() && StopPhase::current() != nullptr) {  // start-up: stop now (the batch loop stops itself)
      abort();
      stop_point(StopPhase::current());
    }
    if (state != ncclInProgress) {
      const char* last = ncclGetLastError(comm_);
      abort();
      LT_FAIL("NCCL ", what, " failed: ", ncclGetErrorString(state), " (", last != nullptr ? last : "", ")");
    }
    if (seconds_since(t0) > timeout_s_) {
      abort();
      LT_FAIL("NCCL ", what, ": no progress after ", timeout_s_, " s; communicator aborted");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(100));
  }
}

void NcclComm::all_reduce_sum_bf16(void* dev, std::int64_t n, cudaStream_t stream) {
  LT_CHECK(comm_ != nullptr, "NCCL all-reduce on an aborted communicator");
  LT_CHECK(n >= 0, "NCCL all-reduce: negative count ", n);
  const ncclResult_t r = ncclAllReduce(dev, dev, std::size_t(n), ncclBfloat16, ncclSum, comm_, stream);
  if (r == ncclInProgress) {
    wait_ready("all-reduce enqueue");
    return;
  }
  if (r != ncclSuccess) abort();
  LT_NCCL_CHECK(r);
}

void NcclComm::check_async_error() {
  if (comm_ == nullptr) LT_FAIL("NCCL communicator was aborted");
  ncclResult_t state = ncclSuccess;
  const ncclResult_t r = ncclCommGetAsyncError(comm_, &state);
  if (r == ncclSuccess && (state == ncclSuccess || state == ncclInProgress)) return;
  const ncclResult_t err = r != ncclSuccess ? r : state;
  abort();
  LT_FAIL("NCCL reported an asynchronous error: ", ncclGetErrorString(err),
          " (a tensor-parallel peer may have failed); communicator aborted");
}

void NcclComm::abort() noexcept {
  if (comm_ == nullptr) return;
  (void)ncclCommAbort(comm_);
  comm_ = nullptr;
}

}  // namespace layertap
