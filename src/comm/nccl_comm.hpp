// The tensor-parallel all-reduce of the CUDA backend over NCCL: one communicator per TP group,
// its unique id broadcast over the group's MPI communicator. Every NCCL call is checked, the
// communicator is non-blocking, and every wait on it is bounded: on a timeout or an asynchronous
// error it is aborted (ncclCommAbort) and layertap::Error thrown, so no rank hangs on a dead peer.
// The only file of the CUDA path that includes mpi.h.
#pragma once
#include <mpi.h>

#include <cstddef>
#include <cstdint>

#include "backend/cuda/device_all_reduce.hpp"

struct ncclComm;  // nccl.h's opaque communicator (ncclComm_t = ncclComm*)

namespace layertap {

class NcclComm final : public DeviceAllReduce {
 public:
  // Collective over `tp`: every rank of it calls this, each after selecting its own GPU
  // (cuda::select_device). Rank 0 creates the unique id and broadcasts it over `tp`.
  // `timeout_s` bounds the initialisation and each later wait for NCCL. Connects every peer here
  // (NCCL_RUNTIME_CONNECT=0 unless the environment sets it), so NCCL's device buffers are taken
  // when this returns, not at the first all-reduce: a memory check after it counts them.
  //
  // NCCL 2.22 and later connect lazily by default; their buffers (NVLS ones on NVSwitch nodes,
  // about a GiB) would otherwise be allocated in the first forward, after the plan was checked.
  NcclComm(MPI_Comm tp, double timeout_s = 600);
  ~NcclComm() override;  // finalizes (bounded) and destroys; aborts instead on any error
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  // Device memory the communicator took at initialisation (free memory before minus after).
  std::size_t device_bytes() const { return device_bytes_; }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  // ncclAllReduce in place, ncclBfloat16, ncclSum, on `stream`.
  void all_reduce_sum_bf16(void* dev, std::int64_t n, cudaStream_t stream) override;
  // Throws (after aborting) if NCCL reports an asynchronous error.
  void check_async_error() override;
  void abort() noexcept override;

 private:
  // Polls ncclCommGetAsyncError while it reports ncclInProgress; throws naming `what` on an error
  // or after the timeout, aborting the communicator first.
  void wait_ready(const char* what);

  ncclComm* comm_ = nullptr;
  int rank_ = 0, size_ = 1;
  double timeout_s_;
  std::size_t device_bytes_ = 0;
};

}  // namespace layertap
