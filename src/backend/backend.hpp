// The backend interface: a loaded model that runs a packed batch and returns captured states.
#pragma once
#include <cstddef>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "model/capture.hpp"
#include "model/packed_batch.hpp"

namespace layertap {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // Runs the decoder over `batch` and returns the residual stream at each point of `plan`:
  // [P] tensors of [T, H] elements of `dtype` (BF16 or F32). Ranks other than tensor-parallel
  // rank 0 compute their share and return an empty vector.
  virtual std::vector<std::vector<std::byte>> forward(const PackedBatch& batch, const CapturePlan& plan,
                                                      DType dtype) = 0;
};

}  // namespace layertap
