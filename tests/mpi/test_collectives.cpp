// The MPI tensor-parallel all-reduce on inputs whose exact sum is known in advance: rank r of a
// group of n contributes (r + 1) * (i % 1000) at element i, so element i must be exactly
// (i % 1000) * n (n + 1) / 2 (integers in float32). Several sizes, including an odd one, and
// every TP group size that divides the world. Errors are summed over the world.
#include <mpi.h>

#include <cstdio>
#include <vector>

#include "comm/mpi_groups.hpp"

using namespace layertap;

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  long errors = 0;
  for (int tp = 1; tp <= size; ++tp) {
    if (size % tp != 0) continue;
    const WorldLayout world = make_world_layout(rank, size, tp);
    MpiGroups groups(world);
    for (std::size_t n : {std::size_t(1), std::size_t(7), std::size_t(4097), std::size_t(1) << 20}) {
      std::vector<float> x(n);
      for (std::size_t i = 0; i < n; ++i) x[i] = float((world.tp_rank + 1) * int(i % 1000));
      groups.tp().all_reduce_sum(x.data(), n);
      const float factor = float(tp * (tp + 1) / 2);
      for (std::size_t i = 0; i < n; ++i) errors += x[i] != float(i % 1000) * factor;
    }
  }
  long total = 0;
  MPI_Allreduce(&errors, &total, 1, MPI_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) std::printf("[collectives] np %d: %ld wrong elements over all ranks\n", size, total);
  MPI_Finalize();
  return total == 0 ? 0 : 1;
}
