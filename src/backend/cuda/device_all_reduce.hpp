// The tensor-parallel all-reduce seen by the CUDA backend: an in-place sum of bf16 device data,
// ordered on a stream. Header-only and free of MPI and NCCL: NcclComm (src/comm/nccl_comm.hpp)
// implements it over NCCL; SoloDeviceAllReduce is the group of one.
#pragma once
#include <cuda_runtime_api.h>

#include <cstdint>

namespace layertap {

class DeviceAllReduce {
 public:
  virtual ~DeviceAllReduce() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Enqueues dev[i] = sum over the group's ranks of dev[i], i < n, on `stream` (returns before it
  // runs). bf16 in and out: NCCL adds in float32 and rounds to bf16 after each step, so a sum over
  // `size` ranks carries up to size - 1 bf16 roundings (what vLLM and SGLang do too; an float32
  // reduction would double the bytes on the wire for a few 2^-9 relative roundings).
  virtual void all_reduce_sum_bf16(void* dev, std::int64_t n, cudaStream_t stream) = 0;
  // Throws layertap::Error when the transport failed asynchronously (a peer died, a network
  // error). Called repeatedly while the backend waits for the GPU.
  virtual void check_async_error() {}
  // Makes pending and later collectives fail instead of hanging; called before the backend throws
  // on a timeout. Must not throw.
  virtual void abort() noexcept {}
};

// One rank: the all-reduce is the identity.
class SoloDeviceAllReduce final : public DeviceAllReduce {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum_bf16(void*, std::int64_t, cudaStream_t) override {}
};

}  // namespace layertap
