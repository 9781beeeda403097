// How much memory this process's host may use: physical memory, or less under a cgroup limit
// (Slurm and containers set one).
#pragma once
#include <cstdint>

namespace layertap {

int64_t host_memory_bytes();

}  // namespace layertap
