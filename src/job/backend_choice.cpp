#include "job/backend_choice.hpp"

#include <mpi.h>

#include <algorithm>

#include "backend/cpu/cpu_backend.hpp"
#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

#ifdef LAYERTAP_HAVE_CUDA

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/local_shape.hpp"
#include "comm/nccl_comm.hpp"
#endif

namespace layertap::job {

namespace {

// This rank's position among the ranks of its node (an MPI shared-memory split).
std::pair<int, int> local_rank_and_size() {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm node = MPI_COMM_NULL;
  LT_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node) == MPI_SUCCESS,
           "MPI_Comm_split_type failed");
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  return {local_rank, local_size};
}

}  // namespace

void check_host_memory(const ModelConfig& cfg, const TpShard& shard, int64_t max_batch_tokens, int64_t capture_points) {
  const int local_ranks = local_rank_and_size().second;
  const int64_t weights = host_weight_bytes(cfg, shard);
  // Activations of one batch (an estimate): the captured states and a few working rows of the
  // widest layer part, in float32.
  const int64_t widest = std::max({cfg.hidden_size, cfg.intermediate_size / shard.size, cfg.q_dim() / shard.size,
                                   cfg.moe ? cfg.moe->expert_intermediate_size * cfg.moe->experts_per_token : 0});
  const int64_t activations = max_batch_tokens * 4 * (capture_points * cfg.hidden_size + 8 * widest);
  const int64_t need = (weights + activations) * local_ranks, have = host_memory_bytes();
  LT_CHECK(need <= have, "not enough host memory: each of the ", local_ranks, " ranks on this node holds its ",
           "float32 weights (", human_bytes(weights), " at --tp ", shard.size, ") and a batch's activations (about ",
           human_bytes(activations), " at --max-batch-tokens ", max_batch_tokens, "), ", human_bytes(need),
           " in all, but this host allows ", human_bytes(have), "; use a larger --tp, fewer ranks per node, or a ",
           "smaller --max-batch-tokens");
  log_debug("host memory: ", human_bytes(need), " needed of ", human_bytes(have));
}

#ifdef LAYERTAP_HAVE_CUDA
namespace {

// The CUDA backend together with the communicator it all-reduces through (declared first, so
// it outlives the backend).
class CudaRankBackend final : public Backend {
 public:
  // Quantized Linears stay packed on the device, read from `ckpt` as stored.
  CudaRankBackend(std::unique_ptr<DeviceAllReduce> comm, const ModelConfig& cfg, const ModelWeights& weights,
                  const Checkpoint& ckpt, cuda::CudaBackendOptions options)
      : comm_(std::move(comm)), impl_(cfg, weights, ckpt, *comm_, options) {}
  std::string name() const override { return impl_.name(); }
  std::vector<std::vector<std::byte>> forward(const PackedBatch& batch, const CapturePlan& plan, DType dtype) override {
    return impl_.forward(batch, plan, dtype);
  }
  std::string description() const { return impl_.description(); }

 private:
  std::unique_ptr<DeviceAllReduce> comm_;
  cuda::CudaBackend impl_;
};

}  // namespace
#endif

std::string resolve_backend(const std::string& requested, const ModelConfig& cfg) {
#ifdef LAYERTAP_HAVE_CUDA
  const bool gpu_here = cuda::visible_device_count() > 0;
  const bool gpu_everywhere = !any_rank(!gpu_here);
  const std::string missing = cuda::unsupported_parts(cfg);
  if (requested == "auto") return gpu_everywhere && missing.empty() ? "cuda" : "cpu";
  if (requested == "cuda") {
    LT_CHECK(missing.empty(), "--backend cuda: ", cfg.architecture, " needs ", missing,
             ", which the CUDA backend does not implement yet; use --backend cpu (or auto)");
    LT_CHECK(gpu_here, "--backend cuda: this rank sees no GPU (check CUDA_VISIBLE_DEVICES and the driver)");
  }
  return requested;
#else
  (void)cfg;
  LT_CHECK(requested != "cuda", "--backend cuda: this build has no CUDA (configure with nvcc on PATH)");
  return "cpu";
#endif
}

std::unique_ptr<Backend> make_backend(const std::string& backend, const ModelConfig& cfg, const Checkpoint& ckpt,
                                      const TpShard& shard, MpiGroups& groups, int64_t max_batch_tokens,
                                      int64_t capture_points) {
#ifdef LAYERTAP_HAVE_CUDA
  if (backend == "cuda") {
    const auto [local_rank, local_size] = local_rank_and_size();
    cuda::select_device(cuda::local_rank_device(local_rank, local_size));  // before NCCL and any allocation
    std::unique_ptr<DeviceAllReduce> comm;
    if (shard.size == 1)
      comm = std::make_unique<SoloDeviceAllReduce>();
    else
      comm = std::make_unique<NcclComm>(groups.tp_mpi());
    cuda::CudaBackendOptions options;
    options.max_batch_tokens = max_batch_tokens;
    options.max_capture_points = capture_points;
    options.moe_split = shard.moe_split;
    auto b = std::make_unique<CudaRankBackend>(std::move(comm), cfg, load_weights(ckpt, cfg, shard), ckpt, options);
    log_info(b->description());
    return b;
  }
#else
  (void)max_batch_tokens;
  (void)capture_points;
#endif
  LT_CHECK(backend == "cpu", "unknown backend '", backend, "'");
  return std::make_unique<CpuBackend>(cfg, load_weights(ckpt, cfg, shard), groups.tp());
}

}  // namespace layertap::job
