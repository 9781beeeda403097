// Where the device calls that follow belong, and host work a forward waits for: marks for the
// simulated GPU's call record (sim/cost.hpp), which the cost report groups by layer kind and
// part. nvcc builds: nothing.
#pragma once
#include <cstdint>

#if defined(LAYERTAP_CUDA_SIM)
#include "sim/cost.hpp"
#endif

namespace layertap::cuda {

// The calling thread's calls from here on belong to `part` ("attention", "moe", ...) of decoder
// layer `layer` (-1: outside the layers).
inline void cost_scope([[maybe_unused]] std::int64_t layer, [[maybe_unused]] const char* part) {
#if defined(LAYERTAP_CUDA_SIM)
  sim::set_scope(layer, part);
#endif
}

// Host work the forward waits for: bytes read and written by `threads` host threads (nothing
// read: first touches of new memory).
inline void cost_host_work([[maybe_unused]] const char* what, [[maybe_unused]] double read,
                           [[maybe_unused]] double written, [[maybe_unused]] int threads) {
#if defined(LAYERTAP_CUDA_SIM)
  sim::record_host_work(what, read, written, threads);
#endif
}

}  // namespace layertap::cuda
