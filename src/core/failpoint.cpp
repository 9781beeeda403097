#include "core/failpoint.hpp"

#include <atomic>
#include <csignal>
#include <cstdlib>
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
    const char* env = std::getenv("LAYERTAP_FAILPOINT");
    if (!env) return out;
    std::string text = env;
    if (const auto at = text.find('@'); at != std::string::npos) {
      const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
      if (!rank) rank = std::getenv("PMIX_RANK");
      if (!rank || text.substr(at + 1) != rank) return out;  // armed on another rank
      text.resize(at);
    }
    const auto colon = text.find(':');
    out.name = text.substr(0, colon);
    out.count = colon == std::string::npos ? 1 : std::atol(text.c_str() + colon + 1);
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
