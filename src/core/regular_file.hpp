// Opening input files that may be hostile: only regular files are read (a FIFO would block the
// open or the read forever, a device would never end), and whole-file reads are size-bounded.
#pragma once
#include <cstddef>
#include <string>

namespace layertap {

// A read-only descriptor of a regular file, closed on destruction. Throws naming `what` and the
// path when it is missing, unreadable, a directory, or not a regular file. Never blocks on a FIFO.
class RegularFile {
 public:
  RegularFile(const std::string& path, const std::string& what);
  ~RegularFile();
  RegularFile(const RegularFile&) = delete;
  RegularFile& operator=(const RegularFile&) = delete;
  int fd() const { return fd_; }
  std::size_t size() const { return size_; }  // at open time

 private:
  int fd_ = -1;
  std::size_t size_ = 0;
};

// The whole content of a regular file of at most `max_bytes` (`what` names it in errors:
// "model config", "manifest").
std::string read_regular_file(const std::string& path, const std::string& what,
                              std::size_t max_bytes = std::size_t(64) << 20);

}  // namespace layertap
