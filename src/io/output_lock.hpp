// One job per output directory: a kernel-held flock(2) lock on "<--out>/.layertap.lock".
//   layertap extract (world rank 0) holds it exclusively from before it reads or writes --out until
//   the process ends (any exit, kill -9 included: the kernel drops it with the process) and records
//   who holds it (host, pid, Slurm job id, start time) in the file, so a second job is refused
//   naming the holder;
//   layertap inspect and verify hold it shared while they read, so they refuse an output that a
//   job is writing, and a job does not start writing under them.
// The file itself stays (removing it would race with a process that has it open and waits); it is
// layertap's own bookkeeping: no run, resume or --overwrite counts it as an output or a foreign file.
// Where the file system cannot lock (NFSv3 without lockd, Lustre mounted without "flock"), extract
// refuses naming the problem (--no-lock runs without it); inspect and verify warn and read on.
#pragma once
#include <filesystem>
#include <optional>
#include <string>

namespace layertap::io {

inline constexpr const char* kLockFileName = ".layertap.lock";

class OutputLock {
 public:
  // layertap extract: `dir` must exist. Creates the lock file if needed, takes the exclusive lock
  // without waiting and records this process in it. Throws layertap::Error naming the holder (a
  // job: host, pid, Slurm job, since when; or a reader: inspect/verify) when another process holds
  // it, or the file system's failure to lock (the errno text, what to do, --no-lock).
  static OutputLock exclusive(const std::filesystem::path& dir);

  // layertap inspect and verify: the shared lock, without waiting. Nothing when `dir` holds no lock
  // file (no job has locked it: an older layertap's output, or a read-only copy) or when the file
  // system cannot lock (a warning says so). Throws naming the job that holds it exclusively.
  static std::optional<OutputLock> shared(const std::filesystem::path& dir);

  OutputLock(OutputLock&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  OutputLock& operator=(OutputLock&&) = delete;
  OutputLock(const OutputLock&) = delete;
  ~OutputLock();

  // Keeps the lock until the process ends, whatever path it ends by (the descriptor is never
  // closed): a rank that fails stays the holder while the launcher ends the job's other ranks.
  void hold_until_exit() { fd_ = -1; }

 private:
  explicit OutputLock(int fd) : fd_(fd) {}
  int fd_ = -1;
};

// --dry-run: why a real run could not take the lock on `dir` now, or nothing (empty `why`) when it
// could, as far as can be told without creating the lock file: `held` with the holder (a job:
// host, pid, Slurm job, since when), or the file system's failure to lock an existing lock file.
// Creates and writes nothing.
struct LockProbe {
  bool held = false;
  std::string why;
};
LockProbe probe_output_lock(const std::filesystem::path& dir);

}  // namespace layertap::io
