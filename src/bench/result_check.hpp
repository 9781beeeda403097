// The benchmark's one check of each timed configuration, as nccl-tests check each size once:
// the captured states are finite, and two captured forwards of the same batch give the same
// states bit for bit. Speed is measured, never asserted; a wrong result is an error, not a figure.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.hpp"
#include "model/capture.hpp"
#include "model/packed_batch.hpp"

namespace layertap {

// `first` and `second`: the states two forwards of one batch returned, one (T, hidden) bf16
// tensor per name in `points` (none on a rank that is not its group's writer). Throws
// layertap::Error naming `what` (the configuration), the point and the first token and element at
// fault when a state has the wrong size, holds a NaN or Inf, or the two differ in any bit.
void check_captured_states(const std::vector<std::vector<std::byte>>& first,
                           const std::vector<std::vector<std::byte>>& second, const std::vector<std::string>& points,
                           std::int64_t T, std::int64_t hidden, const std::string& what);

// Runs `batch` twice under `plan` (bf16 states) and checks the results as above; returns what was
// checked, for the report ("4 points of (T, H) bf16 finite, bitwise equal in two forwards").
std::string check_forward(cuda::CudaBackend& backend, const PackedBatch& batch, const CapturePlan& plan,
                          const std::string& what);

}  // namespace layertap
