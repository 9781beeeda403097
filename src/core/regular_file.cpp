#include "core/regular_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "core/error.hpp"
#include "core/text.hpp"

namespace layertap {

RegularFile::RegularFile(const std::string& path, const std::string& what) {
  // O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer before fstat could
  // refuse it. For regular files the flag changes nothing.
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  LT_CHECK(fd_ >= 0, "cannot open ", what, " '", path, "': ", std::strerror(errno));
  struct stat st {};
  std::string problem;
  if (::fstat(fd_, &st) != 0)
    problem = cat("cannot be stat'ed: ", std::strerror(errno));
  else if (S_ISDIR(st.st_mode))
    problem = "is a directory";
  else if (!S_ISREG(st.st_mode))
    problem = "is not a regular file (a pipe, socket or device)";
  if (!problem.empty()) {
    ::close(fd_);
    LT_FAIL(what, " '", path, "' ", problem);
  }
  size_ = std::size_t(st.st_size);
}

RegularFile::~RegularFile() { ::close(fd_); }

std::string read_regular_file(const std::string& path, const std::string& what, std::size_t max_bytes) {
  const RegularFile f(path, what);
  LT_CHECK(f.size() <= max_bytes, what, " '", path, "' is ", human_bytes(int64_t(f.size())), ", more than the ",
           human_bytes(int64_t(max_bytes)), " such a file may hold");
  std::string content(f.size(), '\0');
  std::size_t got = 0;
  while (got < content.size()) {
    const ssize_t n = ::read(f.fd(), content.data() + got, content.size() - got);
    if (n < 0 && errno == EINTR) continue;
    LT_CHECK(n >= 0, "read error in ", what, " '", path, "': ", std::strerror(errno));
    if (n == 0) break;  // shrank since fstat
    got += std::size_t(n);
  }
  content.resize(got);
  return content;
}

}  // namespace layertap
