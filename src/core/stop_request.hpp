// Graceful stop: SIGTERM, SIGUSR1 (Slurm's --signal and time-limit warning) and SIGINT (Ctrl-C)
// only set a flag; a second SIGINT, or a SIGTERM after a SIGINT, ends the process at once (the
// signal's default action: the exit status names it). The batch loop polls the flag, finishes the
// batch in flight, closes complete shards and exits with kExitInterrupted so a requeued job
// resumes. Before the batch loop (parsing, indexing, opening, reading weights, waiting for other
// ranks) the long loops call stop_point, which throws Stopped: the run ends within seconds with
// kExitInterrupted, having written no shard or manifest.
#pragma once
#include <string>

#include "core/error.hpp"

namespace layertap {

inline constexpr int kExitInterrupted = 75;  // EX_TEMPFAIL: "try again"

void install_stop_handlers();  // SIGTERM, SIGUSR1, SIGINT
bool stop_requested();
const char* stop_signal_name();  // "SIGTERM", "SIGUSR1", "SIGINT" or "" when none arrived

// A stop signal that arrived before the batch loop, while `phase` ran.
class Stopped : public Error {
 public:
  explicit Stopped(const std::string& phase);
};

// Throws Stopped(phase) when a stop signal has arrived.
void stop_point(const char* phase);

// Names the start-up phase this rank is in, for the waits of collectives (comm/mpi_groups): while
// one is set they poll and call stop_point(phase); without one (the batch loop) they block and the
// loop's own stop check applies. Not nested across threads: the main thread's phase.
class StopPhase {
 public:
  explicit StopPhase(const char* phase);
  ~StopPhase() { end(); }
  StopPhase(const StopPhase&) = delete;
  StopPhase& operator=(const StopPhase&) = delete;
  void enter(const char* phase);  // the next phase (a string literal)
  void end();                     // back to what was current before (the batch loop: none)
  static const char* current();   // null outside any phase

 private:
  const char* previous_;
  bool ended_ = false;
};

}  // namespace layertap
