#include "io/output_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

namespace layertap::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;


int flock_retrying(int fd, int op) {
  int rc;
  do rc = ::flock(fd, op);
  while (rc != 0 && errno == EINTR);
  return rc;
}

// What the holder recorded in the lock file: "host H, pid P, Slurm job J, since T".
std::string recorded_holder(int fd) {
  char buf[4096];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return "the holder has not recorded itself yet";
  try {
    const json j = json::parse(std::string(buf, std::size_t(n)));
    const auto field = [&](const char* key) {
      if (!j.is_object() || !j.contains(key)) return std::string("?");
      const json& v = j.at(key);
      return excerpt(v.is_string() ? v.get<std::string>() : v.dump(), 200);
    };
    const bool slurm = j.is_object() && j.contains("slurm_job_id") && j.at("slurm_job_id").is_string() &&
                       !j.at("slurm_job_id").get<std::string>().empty();
    return cat("host ", field("host"), ", pid ", field("pid"),
               slurm ? cat(", Slurm job ", field("slurm_job_id")) : std::string(", no Slurm job"), ", since ",
               field("started"));
  } catch (const json::exception&) {
    return "the lock file's record is unreadable";
  }
}

// The lock file's descriptor, or -1 (errno set) where it cannot be opened. Never blocks: a FIFO
// planted at the name would hold open() until a writer came (O_NONBLOCK), and a link is not
// followed (O_NOFOLLOW). Throws when the name holds something other than a regular file.
int open_lock_file(const fs::path& file, int flags) {
  const int fd = ::open(file.c_str(), flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (fd < 0) return fd;
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    LT_FAIL("the lock file '", file.string(), "' is not a regular file; remove it (layertap creates it)");
  }
  // Back to blocking mode for flock's sake (flock ignores it; reads and writes of a regular file too).
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  return fd;
}

std::string unsupported(const fs::path& file, int err) {
  return cat("cannot lock '", file.string(), "': ", std::strerror(err),
             ": the file system holding --out does not hold flock(2) locks (NFSv3 without lockd, Lustre mounted "
             "without -o flock, some FUSE file systems), so layertap cannot make sure that no other job writes this "
             "--out; mount it with locking (Lustre: -o flock; NFS: NFSv4 or lockd running), choose an --out on a "
             "file system that locks, or pass --no-lock and make sure yourself that one job at a time uses it");
}

}  // namespace

OutputLock::~OutputLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the last descriptor releases the lock
}

OutputLock OutputLock::exclusive(const fs::path& dir) {
  const fs::path file = dir / kLockFileName;
  const int fd = open_lock_file(file, O_RDWR | O_CREAT);
  LT_CHECK(fd >= 0, "cannot open the lock file '", file.string(), "': ", std::strerror(errno));
  OutputLock lock(fd);
  if (flock_retrying(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    LT_CHECK(err == EWOULDBLOCK, unsupported(file, err));
    // Held. A shared lock still being available means readers hold it, not a job.
    if (flock_retrying(fd, LOCK_SH | LOCK_NB) == 0) {
      flock_retrying(fd, LOCK_UN);
      LT_FAIL("--out '", dir.string(), "' is being read by layertap inspect, verify or a --dry-run (a shared lock "
              "on '", file.string(), "'); start the job once they have finished");
    }
    LT_FAIL("--out '", dir.string(), "' is in use by another layertap job (", recorded_holder(fd),
            "; recorded in '", file.string(), "'); one job at a time writes an output directory: wait for that "
            "job to end or stop it, then pass --resume (or choose another --out)");
  }
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const char* job = std::getenv("SLURM_JOB_ID");
  const std::string record =
      json{{"host", host}, {"pid", int64_t(::getpid())}, {"slurm_job_id", job ? job : ""}, {"started", utc_timestamp()}}
          .dump() +
      "\n";
  // The record is for messages only: a failure to write it leaves the lock held and is no error.
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, record.data(), record.size(), 0) != ssize_t(record.size()))
    log_warn("cannot record this job in the lock file '", file.string(), "': ", std::strerror(errno));
  return lock;
}

std::optional<OutputLock> OutputLock::shared(const fs::path& dir) {
  const fs::path file = dir / kLockFileName;
  const int fd = open_lock_file(file, O_RDONLY);
  if (fd < 0) {
    if (errno != ENOENT && errno != ENOTDIR)
      log_warn("cannot open the lock file '", file.string(), "' (", std::strerror(errno),
               "): whether a job is writing this output is not checked");
    return std::nullopt;
  }
  OutputLock lock(fd);
  if (flock_retrying(fd, LOCK_SH | LOCK_NB) != 0) {
    const int err = errno;
    LT_CHECK(err != EWOULDBLOCK, "'", dir.string(), "' is being written by a layertap job (", recorded_holder(fd),
             "; recorded in '", file.string(), "'); check it once that job has ended");
    log_warn("cannot take a shared lock on '", file.string(), "' (", std::strerror(err),
             "): this file system does not hold flock(2) locks, so whether a job is writing this output is not "
             "checked");
    return std::nullopt;
  }
  return lock;
}

LockProbe probe_output_lock(const fs::path& dir) {
  const fs::path file = dir / kLockFileName;
  int fd = -1;
  try {
    fd = open_lock_file(file, O_RDONLY);
  } catch (const Error& e) {
    return {false, e.what()};  // a real run would refuse it
  }
  if (fd < 0) return {};
  LockProbe probe;
  if (flock_retrying(fd, LOCK_SH | LOCK_NB) != 0) {
    const int err = errno;
    probe.held = err == EWOULDBLOCK;
    probe.why = probe.held ? cat("--out is in use by another layertap job (", recorded_holder(fd), "; recorded in '",
                                 file.string(), "')")
                           : unsupported(file, err);
  }
  ::close(fd);  // releases the shared lock if it was taken
  return probe;
}

}  // namespace layertap::io
