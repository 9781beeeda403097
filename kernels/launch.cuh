// The one way kernels/ launches a kernel:
//
//   launch<rmsnorm_kernel>(Grid{grid, kBlock, smem_bytes, stream, work}, out, in, n);
//
// nvcc: `rmsnorm_kernel<<<grid, kBlock, smem_bytes, stream>>>(out, in, n)`. The simulated GPU
// (LAYERTAP_CUDA_SIM, sim/): the arguments are converted to the kernel's parameter types and
// copied once, as a launch copies them, and the grid is queued on the stream, where every CUDA
// thread of a block runs as a fiber. Launch-configuration errors surface through
// cudaGetLastError() in both (LT_CUDA_CHECK_LAUNCH).
#pragma once
#include <cstddef>
#include <utility>

#include <cuda_runtime_api.h>

#include "kernels/work.hpp"

#if defined(LAYERTAP_CUDA_SIM)
#include "sim/kernel_launch.hpp"
#endif

namespace layertap::kernels {

struct Grid {
  dim3 grid;
  dim3 block;
  std::size_t shared_bytes = 0;  // dynamic shared memory per block
  cudaStream_t stream = nullptr;
  Work work;  // what the launch moves and computes (kernels/work.hpp); the simulated GPU records it
};

template <auto Kernel, class... Args>
void launch(const Grid& g, Args&&... args) {
#if defined(LAYERTAP_CUDA_SIM)
  ::layertap::sim::launch<Kernel>(g.grid, g.block, g.shared_bytes, g.stream, g.work, std::forward<Args>(args)...);
#else
  Kernel<<<g.grid, g.block, g.shared_bytes, g.stream>>>(std::forward<Args>(args)...);
#endif
}

}  // namespace layertap::kernels

#if !defined(LAYERTAP_CUDA_SIM)
// nvcc: a kernel's dynamic shared memory (the simulator's prelude defines its own).
#define LT_DYNAMIC_SHARED(type, name) extern __shared__ type name[]
#endif
