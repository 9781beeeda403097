// The tensor-parallel communicator seen by the model: the group's rank and size and one in-place
// sum all-reduce. Header-only so the compute core stays free of MPI and NCCL; implementations
// live beside the code that owns the transport.
#pragma once
#include <cstddef>

namespace layertap {

class TpComm {
 public:
  virtual ~TpComm() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual void all_reduce_sum(float* data, std::size_t n) = 0;  // in place, every rank of the group
};

// A group of one: the all-reduce is the identity.
class SoloComm final : public TpComm {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void all_reduce_sum(float*, std::size_t) override {}
};

}  // namespace layertap
