// Fault injection for the crash tests: LAYERTAP_FAILPOINT=<name>:<n> makes the n-th pass through
// failpoint("<name>") kill the process with SIGKILL, as a node failure would. Unset in normal
// runs, where a failpoint costs one branch on a cached flag.
#pragma once

namespace layertap {

void failpoint(const char* name);

}  // namespace layertap
