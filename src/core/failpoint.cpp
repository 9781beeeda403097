#include "core/failpoint.hpp"

#include <atomic>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <string>

namespace layertap {
namespace {

struct Spec {
  std::string name;
  long count = 0;
};

const Spec& spec() {
  static const Spec s = [] {
    Spec out;
    if (const char* env = std::getenv("LAYERTAP_FAILPOINT")) {
      const char* colon = std::strchr(env, ':');
      out.name = colon ? std::string(env, colon) : std::string(env);
      out.count = colon ? std::atol(colon + 1) : 1;
    }
    return out;
  }();
  return s;
}

std::atomic<long> g_hits{0};

}  // namespace

void failpoint(const char* name) {
  const Spec& s = spec();
  if (s.name.empty() || s.name != name) return;
  if (++g_hits == s.count) std::raise(SIGKILL);
}

}  // namespace layertap
