// The tensor-core and asynchronous-copy instructions the kernels use (sm_80+), one device function
// each: PTX under nvcc, the simulator's emulation (sim/device_code.hpp) under LAYERTAP_CUDA_SIM.
// Included by .cu files only; a launcher refuses devices below sm_80 before any of them runs.
#pragma once
#include <cstdint>

#include <cuda_bf16.h>

namespace layertap::kernels {

// Two floats rounded to nearest even into one bf16 pair: lo in the low 16 bits (an mma A fragment's
// register, or two adjacent outputs).
__device__ __forceinline__ std::uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const std::uint32_t*>(&v);
}

// d (16x8 f32) += a (16x16 bf16, row) * b (16x8 bf16, col): mma.sync.aligned.m16n8k16.
__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0,
                                               std::uint32_t b1) {
#if defined(LAYERTAP_CUDA_SIM)
  ::layertap::sim::mma_m16n8k16_bf16_f32(d, a, b0, b1);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
#else
  __trap();  // the launcher refuses devices below sm_80
#endif
}

// Four 8x8 b16 matrices (transposed with Trans): lane l gives the shared address of row l % 8 of
// matrix l / 8; each lane receives its fragment of every matrix.
template <bool Trans>
__device__ __forceinline__ void ldmatrix_x4(std::uint32_t (&r)[4], const void* row_ptr) {
#if defined(LAYERTAP_CUDA_SIM)
  ::layertap::sim::ldmatrix(r, 4, Trans, row_ptr);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto addr = static_cast<std::uint32_t>(__cvta_generic_to_shared(row_ptr));
  if constexpr (Trans) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  } else {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr));
  }
#else
  (void)r;
  (void)row_ptr;
  __trap();
#endif
}

// Bytes (16 or 4) from global to shared memory, asynchronously: the first src_bytes read from src,
// the rest zero-filled (src_bytes 0 reads nothing).
template <int Bytes>
__device__ __forceinline__ void cp_async(void* dst, const void* src, int src_bytes) {
  static_assert(Bytes == 16 || Bytes == 4);
#if defined(LAYERTAP_CUDA_SIM)
  ::layertap::sim::cp_async(dst, src, Bytes, src_bytes);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  const auto d = static_cast<std::uint32_t>(__cvta_generic_to_shared(dst));
  if constexpr (Bytes == 16) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
  } else {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(d), "l"(src), "r"(src_bytes) : "memory");
  }
#else
  (void)dst;
  (void)src;
  (void)src_bytes;
  __trap();
#endif
}

__device__ __forceinline__ void cp_async_commit() {
#if defined(LAYERTAP_CUDA_SIM)
  ::layertap::sim::cp_async_commit_group();
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.commit_group;\n" ::: "memory");
#endif
}

// Until at most the `Pending` most recent groups of this thread's copies are in flight.
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
#if defined(LAYERTAP_CUDA_SIM)
  ::layertap::sim::cp_async_wait_group(Pending);
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending) : "memory");
#endif
}

}  // namespace layertap::kernels
