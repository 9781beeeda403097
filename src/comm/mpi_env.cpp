#include "comm/mpi_env.hpp"

#include <mpi.h>

#include <cstdlib>

#include "core/error.hpp"

namespace layertap {

MpiEnv::MpiEnv(int& argc, char**& argv) {
  int provided = 0;
  // Only the main thread calls MPI; the writer thread never does.
  LT_CHECK(MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided) == MPI_SUCCESS, "MPI_Init_thread failed");
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
}

MpiEnv::~MpiEnv() { MPI_Finalize(); }

void MpiEnv::abort(int code) const {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::exit(code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

}  // namespace layertap
