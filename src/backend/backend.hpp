// The backend interface: a loaded model that runs a packed batch and returns captured states.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/buffer_pool.hpp"
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
  // The MoE routing of the last forward (model/routing_record.hpp): [T, M, k] global expert ids of
  // each token at each of the model's M MoE layers; empty for a dense model and on ranks that do
  // not capture.
  virtual std::vector<int16_t> routed_experts() const = 0;
  // Later forwards take their states' buffers from `pool` (whoever consumes the states gives them
  // back to it); null: new buffers each forward. A backend may ignore it (the CPU backend does).
  virtual void set_result_pool(BufferPool* pool) { (void)pool; }
};

}  // namespace layertap
