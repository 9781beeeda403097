// Graceful stop: SIGTERM and SIGUSR1 (Slurm's --signal and time-limit warning) only set a flag;
// the batch loop polls it, finishes the batch in flight, closes complete shards and exits with
// kExitInterrupted so a requeued job resumes.
#pragma once

namespace layertap {

inline constexpr int kExitInterrupted = 75;  // EX_TEMPFAIL: "try again"

void install_stop_handlers();  // SIGTERM, SIGUSR1
bool stop_requested();
const char* stop_signal_name();  // "SIGTERM", "SIGUSR1" or "" when none arrived

}  // namespace layertap
