#include "comm/mpi_groups.hpp"

#include <algorithm>
#include <chrono>
#include <climits>
#include <thread>

#include "core/digest.hpp"
#include "core/error.hpp"
#include "core/stop_request.hpp"

namespace layertap {

#define LT_MPI_CHECK(call) LT_CHECK((call) == MPI_SUCCESS, "MPI call failed: ", #call)

void wait_for(MPI_Request& r) {
  const char* phase = StopPhase::current();
  if (phase == nullptr) {
    LT_MPI_CHECK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    return;
  }
  for (int done = 0;;) {
    LT_MPI_CHECK(MPI_Test(&r, &done, MPI_STATUS_IGNORE));
    if (done) return;
    stop_point(phase);
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

void MpiTpComm::all_reduce_sum(float* data, std::size_t n) {
  if (size_ == 1) return;
  // MPI counts are int: reduce in pieces of at most 2^30 elements.
  for (std::size_t done = 0; done < n;) {
    const std::size_t piece = std::min<std::size_t>(n - done, std::size_t(1) << 30);
    LT_MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, data + done, int(piece), MPI_FLOAT, MPI_SUM, comm_));
    done += piece;
  }
}

namespace {
MPI_Comm split_tp(const WorldLayout& w) {
  MPI_Comm c = MPI_COMM_NULL;
  LT_MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, w.dp_rank, w.tp_rank, &c));
  return c;
}
}  // namespace

MpiGroups::MpiGroups(const WorldLayout& w) : tp_(split_tp(w)), tp_comm_(tp_, w.tp_rank, w.tp) {}

int64_t MpiGroups::broadcast_in_tp_group(int64_t value) {
  MPI_Request r;
  LT_MPI_CHECK(MPI_Ibcast(&value, 1, MPI_INT64_T, 0, tp_, &r));
  wait_for(r);
  return value;
}

MpiGroups::~MpiGroups() {
  if (tp_ != MPI_COMM_NULL) MPI_Comm_free(&tp_);
}

void check_same_on_all_ranks(const std::string& what, const std::string& value) {
  const std::string digest = sha256_hex(value);
  const unsigned long long h = std::stoull(digest.substr(0, 15), nullptr, 16);
  unsigned long long lo = 0, hi = 0;
  MPI_Request r;
  LT_MPI_CHECK(MPI_Iallreduce(&h, &lo, 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, MPI_COMM_WORLD, &r));
  wait_for(r);
  LT_MPI_CHECK(MPI_Iallreduce(&h, &hi, 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, MPI_COMM_WORLD, &r));
  wait_for(r);
  LT_CHECK(lo == hi, "ranks disagree on the ", what, " (this rank: ", digest.substr(0, 16),
           "); start every rank with the same options, model and dataset");
}

std::vector<std::string> gather_strings(const std::string& mine) {
  int rank = 0, size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  LT_CHECK(mine.size() < std::size_t(INT_MAX), "gather: string too long");
  const int len = int(mine.size());
  std::vector<int> lens(static_cast<std::size_t>(size));
  MPI_Request request;
  LT_MPI_CHECK(MPI_Igather(&len, 1, MPI_INT, lens.data(), 1, MPI_INT, 0, MPI_COMM_WORLD, &request));
  wait_for(request);
  std::vector<int> displs(std::size_t(size), 0);
  std::string all;
  if (rank == 0) {
    long long total = 0;
    for (int r = 0; r < size; ++r) {
      displs[std::size_t(r)] = int(total);
      total += lens[std::size_t(r)];
    }
    LT_CHECK(total < INT_MAX, "gather: ", total, " bytes is too much for one gather");
    all.resize(std::size_t(total));
  }
  LT_MPI_CHECK(MPI_Igatherv(mine.data(), len, MPI_CHAR, all.data(), lens.data(), displs.data(), MPI_CHAR, 0,
                            MPI_COMM_WORLD, &request));
  wait_for(request);
  std::vector<std::string> out;
  if (rank == 0)
    for (int r = 0; r < size; ++r) out.push_back(all.substr(std::size_t(displs[std::size_t(r)]), std::size_t(lens[std::size_t(r)])));
  return out;
}

void world_barrier() {
  MPI_Request r;
  LT_MPI_CHECK(MPI_Ibarrier(MPI_COMM_WORLD, &r));
  wait_for(r);
}

double max_over_ranks(double value) {
  double out = value;
  MPI_Request r;
  LT_MPI_CHECK(MPI_Iallreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD, &r));
  wait_for(r);
  return out;
}

int64_t max_over_ranks(int64_t value) {
  int64_t out = value;
  MPI_Request r;
  LT_MPI_CHECK(MPI_Iallreduce(&value, &out, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD, &r));
  wait_for(r);
  return out;
}

int64_t sum_over_ranks(int64_t value) {
  int64_t out = value;
  MPI_Request r;
  LT_MPI_CHECK(MPI_Iallreduce(&value, &out, 1, MPI_INT64_T, MPI_SUM, MPI_COMM_WORLD, &r));
  wait_for(r);
  return out;
}

bool any_rank(bool value) { return max_over_ranks(int64_t(value)) != 0; }

int64_t broadcast_from_world_root(int64_t value) {
  MPI_Request r;
  LT_MPI_CHECK(MPI_Ibcast(&value, 1, MPI_INT64_T, 0, MPI_COMM_WORLD, &r));
  wait_for(r);
  return value;
}

void run_on_world_root(bool is_root, const std::function<void()>& f) {
  std::string error;
  if (is_root) {
    try {
      f();
    } catch (const Stopped&) {
      throw;  // not an error to share: this rank ends the job with the stop code (main)
    } catch (const Error& e) {
      error = e.what();
    }
  }
  broadcast_from_world_root(error);
  LT_CHECK(error.empty(), error);
}

void broadcast_from_world_root(std::string& bytes) {
  bytes.resize(std::size_t(broadcast_from_world_root(int64_t(bytes.size()))));
  // MPI counts are int: in pieces of at most 2^30 bytes.
  for (std::size_t done = 0; done < bytes.size();) {
    const std::size_t piece = std::min<std::size_t>(bytes.size() - done, std::size_t(1) << 30);
    MPI_Request r;
    LT_MPI_CHECK(MPI_Ibcast(bytes.data() + done, int(piece), MPI_BYTE, 0, MPI_COMM_WORLD, &r));
    wait_for(r);
    done += piece;
  }
}

MPI_Comm node_comm() {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm node = MPI_COMM_NULL;
  LT_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node) == MPI_SUCCESS,
           "MPI_Comm_split_type failed");
  return node;
}

NodePosition node_position() {
  MPI_Comm node = node_comm();
  NodePosition p;
  MPI_Comm_rank(node, &p.rank);
  MPI_Comm_size(node, &p.size);
  MPI_Comm_free(&node);
  return p;
}

}  // namespace layertap
