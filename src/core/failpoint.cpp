#include "core/failpoint.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "core/stop_request.hpp"

namespace layertap {
namespace {

struct Spec {
  std::string name;
  long count = 0;
  bool pause = false;  // ":pause": wait for a stop signal instead of dying
  long delay_ms = 0;   // ":delay=<ms>": sleep in every pass from the count-th on instead of dying
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
    if (text.size() > 6 && text.ends_with(":pause")) {
      out.pause = true;
      text.resize(text.size() - 6);
    }
    if (const auto delay = text.find(":delay="); delay != std::string::npos) {
      out.delay_ms = std::max(1L, std::atol(text.c_str() + delay + 7));
      text.resize(delay);
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
  const long hit = ++g_hits;
  if (s.delay_ms > 0) {
    if (hit >= s.count) std::this_thread::sleep_for(std::chrono::milliseconds(s.delay_ms));
    return;
  }
  if (hit != s.count) return;
  if (!s.pause) std::raise(SIGKILL);
  // The stop tests: the phase is held here until a stop signal arrives (at most two minutes).
  std::fprintf(stderr, "[layertap] failpoint %s: paused\n", name);
  std::fflush(stderr);
  for (int i = 0; i < 12000 && !stop_requested(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  if (!stop_requested()) std::raise(SIGKILL);
  stop_point(StopPhase::current() != nullptr ? StopPhase::current() : name);
}

}  // namespace layertap
