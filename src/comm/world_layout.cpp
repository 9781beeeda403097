#include "comm/world_layout.hpp"

#include "core/error.hpp"

namespace layertap {

WorldLayout make_world_layout(int world_rank, int world_size, int tp) {
  LT_CHECK(world_size >= 1 && world_rank >= 0 && world_rank < world_size, "invalid rank ", world_rank, " of ",
           world_size);
  LT_CHECK(tp >= 1, "--tp must be at least 1, got ", tp);
  LT_CHECK(world_size % tp == 0, "--tp ", tp, " does not divide the number of ranks ", world_size,
           " (start a multiple of ", tp, " ranks, or change --tp)");
  WorldLayout w;
  w.world_rank = world_rank;
  w.world_size = world_size;
  w.tp = tp;
  w.dp = world_size / tp;
  w.tp_rank = world_rank % tp;
  w.dp_rank = world_rank / tp;
  return w;
}

}  // namespace layertap
