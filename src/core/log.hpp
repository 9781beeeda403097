// Rank-aware logging to stderr: every line carries the MPI rank so worker output is never ambiguous.
#pragma once
#include <string>

#include "core/error.hpp"

namespace layertap {

enum class LogLevel { Debug, Info, Warn, Error };

void set_log_rank(int rank);          // -1 (default) prints no rank
void set_log_level(LogLevel level);   // messages below it are dropped
void log_line(LogLevel level, const std::string& msg);

template <typename... Args> void log_info(Args&&... a) { log_line(LogLevel::Info, cat(std::forward<Args>(a)...)); }
template <typename... Args> void log_warn(Args&&... a) { log_line(LogLevel::Warn, cat(std::forward<Args>(a)...)); }
template <typename... Args> void log_error(Args&&... a) { log_line(LogLevel::Error, cat(std::forward<Args>(a)...)); }
template <typename... Args> void log_debug(Args&&... a) { log_line(LogLevel::Debug, cat(std::forward<Args>(a)...)); }

}  // namespace layertap
