// Choosing the GPU of a rank, and describing it.
#pragma once
#include <string>

namespace layertap::cuda {

// GPUs the CUDA runtime can use in this process (after CUDA_VISIBLE_DEVICES); 0 when there is
// no driver, no device or any other runtime error. Never throws: `--backend auto` asks it.
int visible_device_count();

// The GPU of the rank with `local_rank` (0-based) among the `local_size` ranks of its node: one
// GPU per rank, device index = local rank. Throws layertap::Error naming both counts when the
// node has fewer visible GPUs than ranks.
int local_rank_device(int local_rank, int local_size);

// cudaSetDevice, checked.
void select_device(int device);

// "NVIDIA H200 (device 0, sm_90, 139.8 GiB)".
std::string describe_device(int device);

}  // namespace layertap::cuda
