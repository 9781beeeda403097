// NcclComm (src/comm/nccl_comm.*) under MPI, nccl-tests style: every rank fills a buffer whose
// all-reduced sum is known exactly in bf16, counts its own errors, and the counts are summed over
// MPI so that the exit code is the global result. Run as one process (a group of one) by ctest;
// `mpirun -np N` on a machine with N GPUs tests a real group. Exit 77 without enough GPUs.
#include <mpi.h>

#include <cstdint>
#include <cstdio>
#include <exception>
#include <vector>

#include "backend/cuda/cuda_resources.hpp"
#include "backend/cuda/device.hpp"
#include "comm/nccl_comm.hpp"
#include "core/dtype.hpp"
#include "kernels/cuda_check.hpp"

namespace {

// Value of element i on `rank`: small integers, so every partial sum is exact in bf16.
float value(int rank, std::int64_t i) { return float((rank + 1) * ((i % 5) + 1)); }

std::int64_t run(int rank, int size) {
  layertap::NcclComm comm(MPI_COMM_WORLD, 120.0);
  std::int64_t errors = (comm.rank() != rank) + (comm.size() != size);
  layertap::cuda::Stream stream;
  for (const std::int64_t n : {std::int64_t(1), std::int64_t(1000), std::int64_t(1) << 22}) {
    std::vector<std::uint16_t> host(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) host[std::size_t(i)] = layertap::float_to_bf16(value(rank, i));
    layertap::cuda::DeviceMemory dev(std::size_t(n) * 2);
    LT_CUDA_CHECK(cudaMemcpy(dev.data(), host.data(), host.size() * 2, cudaMemcpyHostToDevice));
    LT_CUDA_CHECK(cudaDeviceSynchronize());  // the pageable copy has landed before NCCL's stream reads it
    comm.all_reduce_sum_bf16(dev.data(), n, stream.get());
    LT_CUDA_CHECK(cudaStreamSynchronize(stream.get()));
    comm.check_async_error();  // healthy: must not throw
    LT_CUDA_CHECK(cudaMemcpy(host.data(), dev.data(), host.size() * 2, cudaMemcpyDeviceToHost));
    std::int64_t wrong = 0;
    const float ranks_sum = float(size * (size + 1) / 2);
    for (std::int64_t i = 0; i < n; ++i)
      wrong += layertap::bf16_to_float(host[std::size_t(i)]) != ranks_sum * float((i % 5) + 1);
    std::printf("%s rank %d/%d: all-reduce of %lld bf16 values, %lld wrong\n", wrong == 0 ? "ok  " : "FAIL", rank, size,
                (long long)n, (long long)wrong);
    errors += wrong;
  }
  return errors;
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1, local_rank = 0, local_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  // Every rank must agree to skip, or the ones with a GPU would wait in NCCL's initialisation.
  int have = layertap::cuda::visible_device_count() >= local_size ? 1 : 0, all_have = 0;
  MPI_Allreduce(&have, &all_have, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all_have == 0) {
    if (rank == 0) std::printf("SKIP: fewer visible GPUs than ranks on a node\n");
    MPI_Finalize();
    return 77;
  }
  std::int64_t errors = 0;
  try {
    layertap::cuda::select_device(layertap::cuda::rank_device(local_rank, layertap::cuda::visible_device_count()));
    errors = run(rank, size);
  } catch (const std::exception& e) {
    std::printf("FAIL rank %d: %s\n", rank, e.what());
    errors = 1;
  }
  long long total = 0, mine = errors;
  MPI_Allreduce(&mine, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf(total == 0 ? "PASS\n" : "FAILED (%lld errors over all ranks)\n", total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
