// NCCL with ranks as threads of one process, one GPU each (as the tensor-parallel GPU tests run
// their groups), nccl-tests style: every rank fills a buffer whose all-reduced sum is exact in
// bf16 and counts its wrong elements; a second all-reduce on the same stream must see the first's
// result (stream order). Groups of 2 and of every visible GPU. Exit 77 with fewer than 2 GPUs.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <thread>
#include <vector>

#include "core/dtype.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/nccl_check.hpp"

namespace {

// Element i of rank r: small integers, so every partial sum is exact in bf16.
float value(int rank, std::int64_t i) { return float((rank + 1) * ((i % 3) + 1)); }

// Wrong elements over all ranks of a group of `size` threads after two all-reduces of n values.
std::int64_t run_group(int size, std::int64_t n) {
  ncclUniqueId id;
  LT_NCCL_CHECK(ncclGetUniqueId(&id));
  std::vector<std::int64_t> wrong(std::size_t(size), 0);
  std::vector<std::thread> ranks;
  for (int r = 0; r < size; ++r) {
    ranks.emplace_back([&, r] {
      try {
        LT_CUDA_CHECK(cudaSetDevice(r));
        ncclComm_t comm = nullptr;
        LT_NCCL_CHECK(ncclCommInitRank(&comm, size, id, r));
        cudaStream_t s = nullptr;
        LT_CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
        std::vector<std::uint16_t> host(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) host[std::size_t(i)] = layertap::float_to_bf16(value(r, i));
        void* dev = nullptr;
        LT_CUDA_CHECK(cudaMalloc(&dev, std::size_t(n) * 2));
        LT_CUDA_CHECK(cudaMemcpy(dev, host.data(), std::size_t(n) * 2, cudaMemcpyHostToDevice));
        // Twice in place: the second sums the first's results, size * sum over ranks.
        for (int k = 0; k < 2; ++k) LT_NCCL_CHECK(ncclAllReduce(dev, dev, std::size_t(n), ncclBfloat16, ncclSum, comm, s));
        LT_CUDA_CHECK(cudaStreamSynchronize(s));
        LT_CUDA_CHECK(cudaMemcpy(host.data(), dev, std::size_t(n) * 2, cudaMemcpyDeviceToHost));
        for (std::int64_t i = 0; i < n; ++i) {
          float want = 0;
          for (int q = 0; q < size; ++q) want += value(q, i);
          wrong[std::size_t(r)] += layertap::bf16_to_float(host[std::size_t(i)]) != want * float(size);
        }
        LT_CUDA_CHECK(cudaFree(dev));
        LT_CUDA_CHECK(cudaStreamDestroy(s));
        LT_NCCL_CHECK(ncclCommDestroy(comm));
      } catch (const std::exception& e) {
        std::printf("FAIL rank %d of %d: %s\n", r, size, e.what());
        wrong[std::size_t(r)] += 1;
      }
    });
  }
  for (std::thread& t : ranks) t.join();
  std::int64_t total = 0;
  for (const std::int64_t w : wrong) total += w;
  std::printf("%s %d ranks as threads: two all-reduces of %lld bf16 values, %lld wrong\n", total == 0 ? "ok  " : "FAIL",
              size, (long long)n, (long long)total);
  return total;
}

}  // namespace

int main() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) {
    std::printf("SKIP: fewer than 2 GPUs visible\n");
    return 77;
  }
  std::int64_t wrong = 0;
  for (const std::int64_t n : {std::int64_t(1), std::int64_t(1000), std::int64_t(1) << 20}) wrong += run_group(2, n);
  wrong += run_group(count, 4097);
  std::printf(wrong == 0 ? "PASS\n" : "FAILED\n");
  return wrong == 0 ? 0 : 1;
}
