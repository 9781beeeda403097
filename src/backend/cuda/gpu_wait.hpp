// Bounded waits for the GPU: poll an event instead of blocking in the driver, so that a dead
// tensor-parallel peer or a hung collective ends in an error instead of a hang.
#pragma once
#include <cuda_runtime_api.h>

#include <string_view>

#include "backend/cuda/device_all_reduce.hpp"

namespace layertap::cuda {

// Returns once `event` has completed. Between polls asks `comm` for asynchronous errors (which
// throw); after `timeout_s` seconds aborts `comm` and throws layertap::Error naming `what`.
void wait_for_event(cudaEvent_t event, DeviceAllReduce& comm, double timeout_s, std::string_view what);

}  // namespace layertap::cuda
