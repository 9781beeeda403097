// Fault injection for the crash tests: LAYERTAP_FAILPOINT=<name>:<n>[@<rank>] makes the n-th pass
// through failpoint("<name>") kill the process with SIGKILL, as a node failure would; with @rank
// only on that MPI rank (OMPI_COMM_WORLD_RANK or PMIX_RANK). <name>:<n>:pause[@rank] instead holds
// the process there, printing "failpoint <name>: paused", until a stop signal arrives, then throws
// Stopped for the current phase (the tests of stopping during start-up). <name>:<n>:delay=<ms>[@rank]
// neither dies nor stops: every pass from the n-th on sleeps <ms> milliseconds (a slow job whose
// length a test can bound: the tests of two jobs on one --out). <name>:<key>:nan[@rank] is asked
// for by failpoint_poisons(name, key) instead: the job then makes that sample's states NaN (the
// tests of --on-nonfinite, which need non-finite states from finite weights). Unset in normal runs,
// where a failpoint costs a look at an empty list. Several entries are separated by commas.
#pragma once

namespace layertap {

void failpoint(const char* name);

// True when LAYERTAP_FAILPOINT is <name>:<key>:nan (on this rank).
bool failpoint_poisons(const char* name, long key);

}  // namespace layertap
