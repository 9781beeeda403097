// The simulated GPU (LAYERTAP_CUDA_SIM builds): what tests and `layertap bench` may ask of it.
//
// The simulator stands in for libcudart, libcublasLt and libnccl under the project's own CUDA
// code (kernels/, src/backend/cuda/), compiled by g++; docs/TESTING.md describes what it checks.
// Settings, read once from the environment:
//   LAYERTAP_SIM_DEVICES      GPUs of the simulated machine (4); CUDA_VISIBLE_DEVICES selects
//                             among them as on a real machine
//   LAYERTAP_SIM_DEVICE_MIB   memory per device (16384): cudaMalloc fails beyond it
//   LAYERTAP_SIM_MAX_DELAY_US the longest random delay before each queued operation (50)
//   LAYERTAP_SIM_SEED         seed of the delays and of the thread and block orders (1)
#pragma once
#include <cstdint>
#include <string>

namespace layertap::sim {

// Counts since the process started, for one device (as the process numbers them).
struct Counters {
  std::uint64_t kernel_launches = 0;
  std::uint64_t matmuls = 0;            // cublasLtMatmul calls
  std::uint64_t all_reduces = 0;        // ncclAllReduce calls
  std::uint64_t host_syncs = 0;         // host waits: stream/event/device synchronize, a synchronous
                                        // copy or memset, an event polled until done (once per record)
  std::uint64_t copies = 0;             // cudaMemcpy*/cudaMemset* calls
  std::uint64_t device_bytes = 0;       // allocated now
  std::uint64_t peak_device_bytes = 0;
};
Counters counters(int device);
// "kernels 123, matmuls 45, all-reduces 6, host syncs 7, copies 8, device 1.2 MiB (peak 3.4 MiB)"
std::string describe(const Counters& c);

}  // namespace layertap::sim
