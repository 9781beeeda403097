#include "core/host_memory.hpp"

#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <string>

namespace layertap {
namespace {

// A cgroup limit file's value in bytes, or -1 when absent or "max" (unlimited).
int64_t cgroup_limit(const char* path) {
  std::ifstream in(path);
  std::string v;
  if (!(in >> v) || v == "max") return -1;
  try {
    return int64_t(std::stoll(v));
  } catch (...) {
    return -1;
  }
}

}  // namespace

int64_t host_memory_bytes() {
  int64_t bytes = int64_t(::sysconf(_SC_PHYS_PAGES)) * int64_t(::sysconf(_SC_PAGESIZE));
  for (const char* limit : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"})
    if (const int64_t l = cgroup_limit(limit); l > 0) bytes = std::min(bytes, l);
  return bytes;
}

int64_t anonymous_resident_bytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  int64_t kib = 0;
  while (in >> key) {
    if (key == "RssAnon:") return (in >> kib) ? kib * 1024 : 0;
    in.ignore(1 << 12, '\n');
  }
  return 0;
}

}  // namespace layertap
