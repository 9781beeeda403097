#include "core/failpoint.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/stop_request.hpp"

namespace layertap {
namespace {

struct Spec {
  std::string name;
  long count = 0;
  bool pause = false;  // ":pause": wait for a stop signal instead of dying
  long delay_ms = 0;   // ":delay=<ms>": sleep in every pass from the count-th on instead of dying
  bool nan = false;    // ":nan": failpoint_poisons(name, count) is true; failpoint(name) does nothing
};

// One entry of LAYERTAP_FAILPOINT; nullopt when it is armed on another rank.
std::optional<Spec> parse(std::string text) {
  Spec out;
  if (const auto at = text.find('@'); at != std::string::npos) {
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (!rank) rank = std::getenv("PMIX_RANK");
    if (!rank || text.substr(at + 1) != rank) return std::nullopt;
    text.resize(at);
  }
  if (text.size() > 4 && text.ends_with(":nan")) {
    out.nan = true;
    text.resize(text.size() - 4);
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
}

// The comma-separated entries of LAYERTAP_FAILPOINT armed on this rank.
const std::vector<Spec>& specs() {
  static const std::vector<Spec> all = [] {
    std::vector<Spec> out;
    const char* env = std::getenv("LAYERTAP_FAILPOINT");
    if (!env) return out;
    std::string text = env;
    for (std::size_t begin = 0; begin <= text.size();) {
      const std::size_t end = std::min(text.find(',', begin), text.size());
      if (end > begin)
        if (std::optional<Spec> s = parse(text.substr(begin, end - begin))) out.push_back(*s);
      begin = end + 1;
    }
    return out;
  }();
  return all;
}

std::atomic<long> g_hits[8];  // per entry (a test arms one or two)

}  // namespace

void failpoint(const char* name) {
  const std::vector<Spec>& all = specs();
  for (std::size_t i = 0; i < all.size() && i < 8; ++i) {
    const Spec& s = all[i];
    if (s.nan || s.name != name) continue;
    const long hit = ++g_hits[i];
    if (s.delay_ms > 0) {
      if (hit >= s.count) std::this_thread::sleep_for(std::chrono::milliseconds(s.delay_ms));
      continue;
    }
    if (hit != s.count) continue;
    if (!s.pause) std::raise(SIGKILL);
    // The stop tests: the phase is held here until a stop signal arrives (at most two minutes).
    std::fprintf(stderr, "[layertap] failpoint %s: paused\n", name);
    std::fflush(stderr);
    for (int k = 0; k < 12000 && !stop_requested(); ++k) std::this_thread::sleep_for(std::chrono::milliseconds(10));
    if (!stop_requested()) std::raise(SIGKILL);
    stop_point(StopPhase::current() != nullptr ? StopPhase::current() : name);
  }
}

bool failpoint_poisons(const char* name, long key) {
  for (const Spec& s : specs())
    if (s.nan && s.count == key && s.name == name) return true;
  return false;
}

}  // namespace layertap
