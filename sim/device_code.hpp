// Device-code prelude of the simulated GPU (LAYERTAP_CUDA_SIM builds): force-included (-include)
// before every kernels/*.cu file, which g++ then compiles as host C++. It supplies what nvcc
// would: the built-in index variables, shared memory, barriers, warp collectives and atomics,
// each with CUDA's semantics as sim/block_runner.cpp executes a block (every CUDA thread a fiber,
// a randomised order between barriers). Kernels launch through kernels/launch.cuh.
#pragma once

// Static shared memory: one copy per OS thread, and the simulator runs all of a block's threads
// (fibers) on one OS thread, one block at a time: per-block storage, as on the device.
#define __shared__ static thread_local
#define __launch_bounds__(...)

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <bit>
#include <cmath>  // the math functions nvcc provides to device code (expf, fmaf, ...)
#include <cstdint>

namespace layertap::sim {

// The CUDA thread a fiber runs: what threadIdx, blockIdx, blockDim and gridDim read.
struct ThreadContext {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
};
// Set by the block runner before it resumes a fiber (fibers of a block share one OS thread).
extern thread_local const ThreadContext* current_thread;
inline const ThreadContext& this_thread() { return *current_thread; }

// The block's dynamic shared memory (the launch's smem bytes, NaN-filled at block start).
void* dynamic_shared_memory();

// Barriers and warp collectives: the calling fiber yields until its block or warp has arrived.
void sync_threads(const char* call);
void sync_warp(unsigned mask);
std::uint32_t shfl_xor_u32(unsigned mask, std::uint32_t value, int lane_mask, int width);
unsigned ballot(unsigned mask, bool predicate);

// The tensor-core instructions kernels/tensor_core.cuh wraps (for attention.cu, grouped_gemm.cu), emulated from the PTX
// ISA's fragment layouts (warp collectives: every lane passes its fragments, each receives its own result).
//   mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32: d (16x8 f32) += a (16x16) * b (16x8)
void mma_m16n8k16_bf16_f32(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1);
//   ldmatrix.sync.aligned.m8n8.{x1,x2,x4}{,.trans}.shared.b16: `count` 8x8 b16 matrices; lane 8i+j
//   gives the address of row j of matrix i (lanes 8 * count and up give none); register i of lane l
//   receives matrix i's (row l / 4, columns 2 (l % 4), +1), or with .trans (rows 2 (l % 4), +1; column l / 4)
void ldmatrix(std::uint32_t* r, int count, bool trans, const void* row_address);

// cp.async (sm_80; not a collective: per thread, in its own order):
//   cp.async.{ca,cg}.shared.global [dst], [src], cp_size, src_size: cp_size bytes (4, 8, 16; both
//   addresses aligned to it) of which the first src_size are read from src, the rest zero-filled.
//   The simulator performs the copy only when a later cp.async.wait_group covers its group: until
//   then dst holds 0xff bytes (NaN in bf16 and float, an FP8 NaN code), so a read before the wait
//   shows up, and src is read at the wait, as the ISA allows. Copies still pending when their
//   thread ends are dropped (no thread could wait for them).
//   cp.async.commit_group: the thread's uncommitted copies become one group (possibly empty).
//   cp.async.wait_group n: waits until at most the n most recent groups are pending.
void cp_async(void* dst, const void* src, int cp_size, int src_size);
void cp_async_commit_group();
void cp_async_wait_group(int n);

[[noreturn]] void trap(const char* where);

}  // namespace layertap::sim

#define threadIdx (::layertap::sim::this_thread().thread_idx)
#define blockIdx (::layertap::sim::this_thread().block_idx)
#define blockDim (::layertap::sim::this_thread().block_dim)
#define gridDim (::layertap::sim::this_thread().grid_dim)
#define __trap() ::layertap::sim::trap(__func__)
// kernels write `LT_DYNAMIC_SHARED(float, smem);` (nvcc: extern __shared__ float smem[];)
#define LT_DYNAMIC_SHARED(type, name) type* name = static_cast<type*>(::layertap::sim::dynamic_shared_memory())

inline void __syncthreads() { ::layertap::sim::sync_threads("__syncthreads"); }
inline void __syncwarp(unsigned mask = 0xffffffffu) { ::layertap::sim::sync_warp(mask); }
inline unsigned __ballot_sync(unsigned mask, int predicate) { return ::layertap::sim::ballot(mask, predicate != 0); }

template <class T>
inline T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
  static_assert(sizeof(T) == 4, "the simulator's __shfl_xor_sync exchanges 32-bit values");
  return std::bit_cast<T>(::layertap::sim::shfl_xor_u32(mask, std::bit_cast<std::uint32_t>(value), lane_mask, width));
}

// Intrinsics the kernels use, with the device's results.
inline int __popc(unsigned x) { return std::popcount(x); }
inline float __fmaf_rn(float a, float b, float c) { return std::fma(a, b, c); }

// Atomics: blocks of one launch run one after another, but other streams' kernels run on other
// OS threads, so these are real atomic read-modify-writes.
inline int atomicAdd(int* address, int value) { return std::atomic_ref<int>(*address).fetch_add(value); }
inline unsigned atomicAdd(unsigned* address, unsigned value) {
  return std::atomic_ref<unsigned>(*address).fetch_add(value);
}
inline int atomicMin(int* address, int value) {
  std::atomic_ref<int> a(*address);
  int old = a.load();
  while (value < old && !a.compare_exchange_weak(old, value)) {
  }
  return old;
}
