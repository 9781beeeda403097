// How much memory this process's host may use: physical memory, or less under a cgroup limit
// (Slurm and containers set one).
#pragma once
#include <cstdint>

namespace layertap {

int64_t host_memory_bytes();

// This process's anonymous resident memory (RssAnon of /proc/self/status; 0 where unknown): what a
// rank really holds, unlike RSS, which also counts mapped file pages that the kernel can drop.
int64_t anonymous_resident_bytes();

}  // namespace layertap
