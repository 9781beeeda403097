#include "core/log.hpp"

#include <cstdio>
#include <mutex>

namespace layertap {
namespace {
int g_rank = -1;
LogLevel g_level = LogLevel::Info;
std::mutex g_mutex;

const char* level_tag(LogLevel l) {
  switch (l) {
    case LogLevel::Debug: return "debug";
    case LogLevel::Info: return "info";
    case LogLevel::Warn: return "warning";
    case LogLevel::Error: return "error";
  }
  return "";
}
}  // namespace

void set_log_rank(int rank) { g_rank = rank; }
void set_log_level(LogLevel level) { g_level = level; }

void log_line(LogLevel level, const std::string& msg) {
  if (level < g_level) return;
  std::lock_guard lock(g_mutex);
  if (g_rank >= 0)
    std::fprintf(stderr, "[layertap rank %d] %s: %s\n", g_rank, level_tag(level), msg.c_str());
  else
    std::fprintf(stderr, "[layertap] %s: %s\n", level_tag(level), msg.c_str());
  std::fflush(stderr);
}

}  // namespace layertap
