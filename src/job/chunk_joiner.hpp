// Puts chunked samples back together (chunked prefill: model/packed_batch.hpp). The backend returns
// a batch's states per segment; the writer takes whole samples. A sample's rows are held here until
// its last chunk has run, so an interrupted run never writes part of a sample.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "job/batch_plan.hpp"

namespace layertap::job {

class ChunkJoiner {
 public:
  // `row_bytes`: one token's state at one capture point (H elements of the batch's dtype).
  explicit ChunkJoiner(int64_t row_bytes) : row_bytes_(row_bytes) {}

  // `states` [P][T, H]: the batch's captured states in segment order (empty on ranks that do not
  // capture). Returns [P][T', H]: the states of the samples that end in this batch, whole and in
  // order (the rows of the sample in flight's earlier chunks in front; an unfinished last
  // segment's rows held back).
  std::vector<std::vector<std::byte>> join(const Batch& batch, const std::vector<int64_t>& lengths,
                                           std::vector<std::vector<std::byte>> states);

 private:
  int64_t row_bytes_;
  std::vector<std::vector<std::byte>> held_;  // [P][rows so far, H] of the sample in flight
};

// The samples (positions in the rank's share) that end in `batch`, in order.
std::vector<std::size_t> samples_ending_in(const Batch& batch, const std::vector<int64_t>& lengths);

}  // namespace layertap::job
