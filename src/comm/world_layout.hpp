// Where a rank sits in the job: world = DP x TP, tensor-parallel groups of consecutive ranks
// (one node), data-parallel groups across them. Pure arithmetic, no MPI.
#pragma once

namespace layertap {

struct WorldLayout {
  int world_rank = 0, world_size = 1;
  int tp = 1, dp = 1;
  int tp_rank = 0;  // rank inside its tensor-parallel group
  int dp_rank = 0;  // index of its tensor-parallel group = its data-parallel replica

  bool is_writer() const { return tp_rank == 0; }  // TP rank 0 of each group writes its shards
};

// Throws naming both numbers when tp does not divide the world size.
WorldLayout make_world_layout(int world_rank, int world_size, int tp);

}  // namespace layertap
