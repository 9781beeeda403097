// MPI from construction to the end of the process (RAII; `layertap extract` starts it, the other
// commands run without MPI). A binary started without mpirun runs as a world of one.
#pragma once

namespace layertap {

class MpiEnv {
 public:
  MpiEnv(int& argc, char**& argv);
  ~MpiEnv();
  MpiEnv(const MpiEnv&) = delete;
  MpiEnv& operator=(const MpiEnv&) = delete;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Ends every rank of the job with `code`, so peers never wait on a rank that failed.
  [[noreturn]] void abort(int code) const;

 private:
  int rank_ = 0;
  int size_ = 1;
};

}  // namespace layertap
