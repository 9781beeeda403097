// The typed hand-off from the forward pass to the writer: one packed batch of samples and the
// residual-stream states captured at each point. Validated where it is received.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/dtype.hpp"

namespace layertap {

struct CapturedBatch {
  std::vector<int64_t> sample_index;  // [S]   position of each sample in the input dataset
  std::vector<int64_t> offsets;       // [S+1] token offsets; offsets[0] = 0, offsets[S] = T
  std::vector<int32_t> input_ids;     // [T]
  std::vector<uint8_t> loss_mask;     // [T]
  int64_t hidden = 0;                 // H
  DType dtype = DType::BF16;          // element type of `states` (BF16 or F32)
  std::vector<std::vector<std::byte>> states;  // [P] tensors, each [T, H] of `dtype`
  // MoE models: [T, routed_width] expert ids, routed_width = M layers x top-k (model/routing_record.hpp)
  std::vector<int16_t> routed_experts;
  int64_t routed_width = 0;

  int64_t num_samples() const { return int64_t(sample_index.size()); }
  int64_t num_tokens() const { return int64_t(input_ids.size()); }
  int64_t num_points() const { return int64_t(states.size()); }

  // Positions (0..S-1) of the samples with a NaN or Inf in any state, with the first bad point.
  struct NonFinite {
    int64_t sample;  // position in this batch
    int64_t point;   // first capture point (0..P-1) holding a non-finite value
  };
  std::vector<NonFinite> nonfinite_samples() const;

  // Removes the samples at the given positions (increasing) from every field.
  void drop_samples(const std::vector<int64_t>& positions);

  // Throws an Error naming both sides on any mismatch: point count, hidden size, dtype, offsets
  // that are not increasing from 0 to T, mask length, byte sizes of each state tensor, the
  // routing record's width and length.
  void validate(int64_t expected_points, int64_t expected_hidden, DType expected_dtype,
                int64_t expected_routed_width = 0) const;
};

}  // namespace layertap
