#include "io/durable_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

#include "core/error.hpp"

namespace layertap::io {
namespace {

// Closes a POSIX file descriptor on scope exit.
struct Fd {
  int fd;
  ~Fd() {
    if (fd >= 0) ::close(fd);
  }
};

std::string errno_text() { return std::strerror(errno); }

}  // namespace

void fsync_path(const std::filesystem::path& path) {
  Fd f{::open(path.c_str(), O_RDONLY | O_CLOEXEC)};
  LT_CHECK(f.fd >= 0, "cannot open '", path.string(), "' to fsync it: ", errno_text());
  LT_CHECK(::fsync(f.fd) == 0, "fsync of '", path.string(), "' failed: ", errno_text());
}

void rename_durably(const std::filesystem::path& from, const std::filesystem::path& to) {
  LT_CHECK(::rename(from.c_str(), to.c_str()) == 0, "cannot rename '", from.string(), "' to '",
           to.string(), "': ", errno_text());
  const auto dir = to.has_parent_path() ? to.parent_path() : std::filesystem::path(".");
  fsync_path(dir);
}

void write_json_atomically(const std::filesystem::path& file, const nlohmann::json& j) {
  const std::string text = j.dump(2) + "\n";
  const std::filesystem::path tmp = file.string() + ".tmp";
  {
    Fd f{::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)};
    LT_CHECK(f.fd >= 0, "cannot create '", tmp.string(), "': ", errno_text());
    std::size_t done = 0;
    while (done < text.size()) {
      const ssize_t n = ::write(f.fd, text.data() + done, text.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const std::string why = errno_text();
        ::unlink(tmp.c_str());
        LT_FAIL("cannot write '", tmp.string(), "': ", why);
      }
      done += std::size_t(n);
    }
    if (::fsync(f.fd) != 0) {
      const std::string why = errno_text();
      ::unlink(tmp.c_str());
      LT_FAIL("fsync of '", tmp.string(), "' failed: ", why);
    }
  }
  try {
    rename_durably(tmp, file);
  } catch (...) {
    ::unlink(tmp.c_str());  // no-op once the rename has happened
    throw;
  }
}

}  // namespace layertap::io
