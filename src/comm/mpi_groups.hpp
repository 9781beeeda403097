// MPI communicators of a job: the tensor-parallel group of this rank (consecutive ranks) and the
// MPI implementation of the TP all-reduce for the CPU backend; plus job-wide agreement checks.
#pragma once
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "comm/tp_comm.hpp"
#include "comm/world_layout.hpp"

namespace layertap {

// Sum all-reduce over an MPI communicator (CPU tensor parallelism).
class MpiTpComm final : public TpComm {
 public:
  MpiTpComm(MPI_Comm comm, int rank, int size) : comm_(comm), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float* data, std::size_t n) override;

 private:
  MPI_Comm comm_;
  int rank_, size_;
};

// The TP sub-communicator of this rank, freed on destruction.
class MpiGroups {
 public:
  explicit MpiGroups(const WorldLayout& layout);
  ~MpiGroups();
  MpiGroups(const MpiGroups&) = delete;
  MpiGroups& operator=(const MpiGroups&) = delete;
  TpComm& tp() { return tp_comm_; }
  MPI_Comm tp_mpi() const { return tp_; }  // for transports that bootstrap over MPI (NCCL)
  // TP rank 0's `value`, on every rank of the group.
  int64_t broadcast_in_tp_group(int64_t value);

 private:
  MPI_Comm tp_ = MPI_COMM_NULL;
  MpiTpComm tp_comm_;
};

// Completes a non-blocking MPI request (the collectives here use one each): blocking in the batch
// loop, whose own stop check applies; polling during a start-up phase (StopPhase), so that a stop
// signal ends a rank that waits for a slower one within a millisecond (throws Stopped).
void wait_for(MPI_Request& request);

// Every rank of the world must hold the same `value` (options, model fingerprint, dataset):
// compares a hash with an all-reduced min and max. Throws on every rank when any differs.
void check_same_on_all_ranks(const std::string& what, const std::string& value);

// Gathers one string per rank on world rank 0 (empty vector elsewhere), in rank order.
std::vector<std::string> gather_strings(const std::string& mine);

// Waits for every rank of the world.
void world_barrier();

// Largest value over all ranks.
double max_over_ranks(double value);
int64_t max_over_ranks(int64_t value);
int64_t sum_over_ranks(int64_t value);

// True on every rank when `value` is true on any rank.
bool any_rank(bool value);

// World rank 0's `value`, on every rank.
int64_t broadcast_from_world_root(int64_t value);
// `f` on world rank 0 only; then every rank throws rank 0's layertap::Error, if it threw one, so
// all ranks stop alike with the same message.
void run_on_world_root(bool is_root, const std::function<void()>& f);

// World rank 0's `bytes` on every rank (any length).
void broadcast_from_world_root(std::string& bytes);

// The ranks of this rank's node (an MPI shared-memory split; collective over the world). The
// caller frees it.
MPI_Comm node_comm();
// This rank's position among the ranks of its node (collective over the world).
struct NodePosition {
  int rank = 0, size = 1;
};
NodePosition node_position();

}  // namespace layertap
