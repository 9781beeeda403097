#include "core/stop_request.hpp"

#include <csignal>

#include "core/log.hpp"

namespace layertap {
namespace {
volatile std::sig_atomic_t g_signal = 0;
const char* g_phase = nullptr;
extern "C" void on_stop_signal(int sig) {
  const int first = g_signal;
  if (first == 0) {
    g_signal = sig;  // the stop, and the name the log and the manifest give it
    return;
  }
  // Stopping already. A second Ctrl-C, or a SIGTERM after a Ctrl-C (kill from another terminal),
  // ends the process now, as Ctrl-C does elsewhere: the default action, so the exit status names
  // the signal. After a SIGTERM or SIGUSR1 (a scheduler's graceful stop) nothing does: Slurm and
  // srun may each deliver one for the same cancellation, and a Ctrl-C then is the first Ctrl-C.
  if (first == SIGINT && (sig == SIGINT || sig == SIGTERM)) {
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    sigemptyset(&dfl.sa_mask);
    sigaction(sig, &dfl, nullptr);
    raise(sig);  // blocked while this handler runs: delivered, with the default action, as it returns
  }
}
}  // namespace

void install_stop_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // interrupted system calls (file writes) resume
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGUSR1, &sa, nullptr);
  sigaction(SIGINT, &sa, nullptr);
}

bool stop_requested() { return g_signal != 0; }

const char* stop_signal_name() {
  switch (g_signal) {
    case SIGTERM: return "SIGTERM";
    case SIGUSR1: return "SIGUSR1";
    case SIGINT: return "SIGINT";
    default: return "";
  }
}

Stopped::Stopped(const std::string& phase)
    : Error(cat("stopped by ", stop_signal_name(), " while ", phase, ", before any shard or manifest was written "
                "(exit code ", kExitInterrupted, "; run it again with --resume)",
                // mpirun and srun end a job's other ranks with SIGTERM when one rank fails
                g_signal == SIGTERM ? "; a SIGTERM also comes from mpirun or srun ending the job after another rank "
                                      "failed: if another rank printed an error, that is the cause"
                                    : "")) {}

void stop_point(const char* phase) {
  if (g_signal != 0) throw Stopped(phase);
}

// Each rank logs its start-up phases at debug level: where a start that hangs waits, rank by rank.
StopPhase::StopPhase(const char* phase) : previous_(g_phase) { enter(phase); }
void StopPhase::enter(const char* phase) {
  if (ended_) return;
  g_phase = phase;
  log_debug("start-up: ", phase);
}
void StopPhase::end() {
  if (!ended_) g_phase = previous_;
  ended_ = true;
}
const char* StopPhase::current() { return g_phase; }

}  // namespace layertap
