// Choosing the GPU of a rank, and describing it.
#pragma once
#include <string>
#include <vector>

namespace layertap::cuda {

// GPUs the CUDA runtime can use in this process (after CUDA_VISIBLE_DEVICES); 0 when there is
// no driver, no device or any other runtime error. Never throws: `--backend auto` asks it.
int visible_device_count();

// The GPU of the rank with `local_rank` (0-based) on its node, among the `visible` GPUs this
// process sees: device local_rank mod visible. So with every GPU of the node visible, device =
// local rank; with one visible (Slurm's --gpus-per-task=1, --gpu-bind=single:1 or closest set
// CUDA_VISIBLE_DEVICES per task), that one. Whether two ranks then share a GPU only their PCI bus
// ids tell (shared_gpu). Throws layertap::Error when no GPU is visible.
int rank_device(int local_rank, int visible);

// Two ranks of one node on one GPU: "local ranks 0 and 2 would share the GPU at 0000:1b:00.0",
// from each local rank's PCI bus id (index = local rank); "" when every rank has its own.
std::string shared_gpu(const std::vector<std::string>& bus_ids);

// cudaDeviceGetPCIBusId of `device`: "0000:1b:00.0".
std::string pci_bus_id(int device);

// cudaSetDevice, checked.
void select_device(int device);

// "NVIDIA H200 (device 0, sm_90, 139.8 GiB)".
std::string describe_device(int device);

}  // namespace layertap::cuda
