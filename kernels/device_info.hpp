// What the CUDA stack of this process sees: driver and runtime versions, each device, cuBLAS
// and NCCL versions. Also proves at link time that cuBLAS and NCCL are linked in.
#pragma once
#include <string>

namespace layertap::kernels {

// Multi-line summary. Throws layertap::Error when the CUDA runtime cannot be used or reports no
// device (cuBLAS needs a device to create a handle).
std::string cuda_runtime_summary();

}  // namespace layertap::kernels
