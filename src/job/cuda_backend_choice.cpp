#include "job/cuda_backend_choice.hpp"

#include <mpi.h>

#include <algorithm>
#include <array>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/load_plan.hpp"
#include "backend/cuda/local_shape.hpp"
#include "backend/cuda/memory_plan.hpp"
#include "backend/cuda/weight_loader.hpp"
#include "comm/nccl_comm.hpp"
#include "core/backend_names.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

namespace layertap::job {
namespace {

// Host memory of the CUDA runtime, cuBLAS and NCCL in a process (an estimate).
constexpr int64_t kCudaRuntimeHostBytes = int64_t(1) << 30;

// What NCCL's buffers are planned as on a machine without a GPU to measure them on (TP > 1): NVLS
// buffers on NVSwitch nodes are commonly reported around 1 GiB; ring buffers take less.
constexpr std::size_t kNcclAllowanceBytes = std::size_t(1) << 30;

// Selects this rank's GPU (cuda::rank_device) and checks, with the other ranks of its node, that no
// two of them share one: their PCI bus ids are compared, whatever each process sees of the node's
// GPUs (all of them, or one each under Slurm's GPU binding). Collective over the node's ranks.
void select_rank_gpu() {
  MPI_Comm node = node_comm();
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  std::array<char, 32> mine{};
  std::string error;
  try {
    const int device = cuda::rank_device(local_rank, cuda::visible_device_count());
    cuda::select_device(device);
    const std::string id = cuda::pci_bus_id(device);
    std::copy_n(id.begin(), std::min(id.size(), mine.size() - 1), mine.begin());
  } catch (const Error& e) {
    error = e.what();  // reported after the gather, which every rank of the node must reach
  }
  std::vector<char> all(mine.size() * std::size_t(local_size));
  const int rc = MPI_Allgather(mine.data(), int(mine.size()), MPI_CHAR, all.data(), int(mine.size()), MPI_CHAR, node);
  MPI_Comm_free(&node);
  LT_CHECK(rc == MPI_SUCCESS, "MPI_Allgather of the node's GPU bus ids failed");
  if (!error.empty()) LT_FAIL(error);
  std::vector<std::string> ids;
  for (int r = 0; r < local_size; ++r) ids.emplace_back(all.data() + std::size_t(r) * mine.size());
  for (const std::string& id : ids)
    LT_CHECK(!id.empty(), "another rank of this node found no GPU (it says why)");
  const std::string clash = cuda::shared_gpu(ids);
  LT_CHECK(clash.empty(), clash, ": start one rank per GPU (", local_size,
           " ranks on this node; each sees CUDA_VISIBLE_DEVICES' GPUs, all of the node's or one per task)");
}

// The device memory this rank plans for: --gpu-memory, capped by the free memory of a GPU here,
// measured as the real run measures it: after NCCL connected (TP > 1), so what the communicator
// takes is outside it. Without a GPU, --gpu-memory less an allowance for NCCL.
struct DeviceBudget {
  std::size_t free = 0;  // for the model, its scratch and workspace
  std::size_t nccl = 0;  // NCCL's buffers: measured, or kNcclAllowanceBytes
  bool measured = false;
};
DeviceBudget planned_device_budget(const TpShard& shard, MpiGroups& groups, const RankLoad& load) {
  // First, on every rank: the node split is a world collective, and a rank without a GPU (a login
  // node beside GPU nodes) returns below.
  const int local_rank = node_position().rank;
  const std::size_t limit = std::size_t(load.gpu_memory_gib * double(int64_t(1) << 30));
  // NCCL connects only where every rank of the TP group has a GPU (the init is collective).
  int gpu = cuda::visible_device_count() > 0 ? 1 : 0, all_gpu = 0;
  MPI_Allreduce(&gpu, &all_gpu, 1, MPI_INT, MPI_MIN, groups.tp_mpi());
  if (gpu == 0) {
    LT_CHECK(limit > 0, "--backend cuda on a machine without a GPU plans for a card of --gpu-memory GiB; "
             "pass it (e.g. --gpu-memory 80)");
    const std::size_t nccl = shard.size > 1 ? kNcclAllowanceBytes : 0;
    return {limit > nccl ? limit - nccl : 0, nccl, false};
  }
  cuda::select_device(cuda::rank_device(local_rank, cuda::visible_device_count()));
  std::unique_ptr<NcclComm> comm;  // held while free memory is measured
  if (shard.size > 1 && all_gpu == 1) comm = std::make_unique<NcclComm>(groups.tp_mpi());
  std::size_t free_bytes = 0, total_bytes = 0;
  LT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  free_bytes = limit > 0 ? std::min(limit, free_bytes) : free_bytes;
  if (comm) return {free_bytes, comm->device_bytes(), true};
  // A GPU here but not on every rank of the group (planning from a mixed allocation): the allowance.
  const std::size_t nccl = shard.size > 1 ? kNcclAllowanceBytes : 0;
  return {free_bytes > nccl ? free_bytes - nccl : 0, nccl, false};
}

// The CUDA backend together with the communicator it all-reduces through (declared first, so
// it outlives the backend).
class CudaRankBackend final : public Backend {
 public:
  CudaRankBackend(std::unique_ptr<DeviceAllReduce> comm, const ModelConfig& cfg, const Checkpoint& ckpt,
                  cuda::CudaBackendOptions options)
      : comm_(std::move(comm)), impl_(cfg, ckpt, *comm_, options) {}
  std::string name() const override { return impl_.name(); }
  std::vector<std::vector<std::byte>> forward(const PackedBatch& batch, const CapturePlan& plan, DType dtype) override {
    return impl_.forward(batch, plan, dtype);
  }
  std::vector<int16_t> routed_experts() const override { return impl_.routed_experts(); }
  void set_result_pool(BufferPool* pool) override { impl_.set_result_pool(pool); }
  std::string description() const { return impl_.description(); }
  const cuda::LoadStats& load_stats() const { return impl_.load_stats(); }

 private:
  std::unique_ptr<DeviceAllReduce> comm_;
  cuda::CudaBackend impl_;
};

class CudaBackendChoice final : public BackendChoice {
 public:
  using BackendChoice::BackendChoice;

  const char* name() const override { return kCudaBackend.data(); }
  bool chunks_long_samples() const override { return true; }

  // The largest batch the device plan of this rank fits (the config's shape: the checkpoint is not
  // open yet), at most kAutoBatchCap; when not even the weights fit, kCpuBatchTokens (the plan's
  // check then says what does not fit).
  int64_t device_batch_tokens(MpiGroups& groups, const RankLoad& load) const override {
    const std::size_t free = planned_device_budget(shard_, groups, load).free;
    const cuda::LocalShape shape = cuda::LocalShape::of(cfg_, shard_, cuda::PackedSource::Config);
    // A smaller batch can need more: the keys and values kept of a sample longer than it. So the
    // plan is made again at each candidate until one fits.
    RankLoad at = load;
    at.max_batch_tokens = kAutoBatchCap;
    for (int tries = 0; tries < 8; ++tries) {
      const cuda::CudaBackendOptions o = options(at);
      const cuda::MemoryPlan m = cuda::plan_memory(shape, o);
      if (cuda::device_bytes_needed(m) <= free) return at.max_batch_tokens;
      const int64_t most = cuda::max_tokens_that_fit(m, free, o);
      if (most <= 0) break;
      at.max_batch_tokens = std::min(most, at.max_batch_tokens - 1);
    }
    return kCpuBatchTokens;
  }

  // Nothing of the weights; the loader's ring, the pinned batch and capture buffers (the latter on
  // the writer only: plan_memory counts them for TP rank 0), the dataset share and the runtime.
  HostPlan host_plan(const RankLoad& load) const override {
    const cuda::CudaBackendOptions o = options(load);
    const cuda::MemoryPlan m = cuda::plan_memory(cuda::LocalShape::of(cfg_, shard_, cuda::PackedSource::Config), o);
    return {{{"staging ring", int64_t(o.loader.host_bytes())},
             {shard_.rank == 0 ? "pinned batch and capture buffers" : "pinned batch buffers", int64_t(m.pinned_bytes)},
             {"dataset share", load.dataset_bytes},
             {"CUDA runtime (estimate)", kCudaRuntimeHostBytes}}};
  }

  RankPlan describe_plan(const Checkpoint& ckpt, MpiGroups& groups, const RankLoad& load) const override {
    const cuda::CudaBackendOptions o = options(load);
    const cuda::LocalShape s = cuda::checkpoint_shape(cfg_, shard_, ckpt);
    const cuda::MemoryPlan m = cuda::plan_memory(s, o);
    const DeviceBudget budget = planned_device_budget(shard_, groups, load);
    const cuda::LoadPlan lp = cuda::plan_load(s, ckpt, cfg_.quant);
    const HostPlan host = host_plan(load);
    std::string r = cat("  reads      ", human_bytes(int64_t(lp.read_bytes)), " from ", lp.files, " files: bf16 ",
                        human_bytes(int64_t(lp.bf16_bytes)), ", converted to bf16 ",
                        human_bytes(int64_t(lp.converted_bytes)), ", FP8 ", human_bytes(int64_t(lp.fp8_bytes)),
                        ", INT4 ", human_bytes(int64_t(lp.int4_bytes)), ", scales ",
                        human_bytes(int64_t(lp.scale_bytes)), "\n");
    r += cuda::describe_device_plan(m, s, budget.free, o);
    if (shard_.size > 1)
      r += cat("  NCCL       ", fixed(double(budget.nccl) / double(1 << 30), 2), " GiB",
               budget.measured ? " taken when it connected (measured; outside the free memory above)\n"
                               : " allowed for its buffers (not measured: a rank of the group has no GPU; taken "
                                 "from the free memory above)\n");
    r += cat("  host       ", human_bytes(host.total()), " (", host.describe(), "; no weights)\n");
    return {r, cuda::device_bytes_needed(m) <= budget.free};
  }

  std::string pre_read(const Checkpoint& ckpt) const override {
    const cuda::LoadPlan plan = cuda::plan_load(cuda::checkpoint_shape(cfg_, shard_, ckpt), ckpt, cfg_.quant);
    cuda::HostTarget nowhere(nullptr);
    const cuda::LoadStats st = cuda::run_load_plan(plan, nowhere, cuda::LoaderOptions{});
    return cat("read ", human_bytes(int64_t(st.bytes_read)), " (", st.copies, " windows of ", plan.files,
               " files, ", st.read_calls, " read calls) in ", fixed(st.seconds, 1), " s, ",
               gb_per_s(int64_t(st.bytes_read), st.seconds), ", peak anonymous memory ",
               human_bytes(st.peak_anonymous_bytes), ": every value checked");
  }

  std::unique_ptr<Backend> build(const Checkpoint& ckpt, MpiGroups& groups, const RankLoad& load) const override {
    select_rank_gpu();  // before NCCL and any allocation
    std::unique_ptr<DeviceAllReduce> comm;
    std::size_t nccl_bytes = 0;
    if (shard_.size == 1) {
      comm = std::make_unique<SoloDeviceAllReduce>();
    } else {
      auto nccl = std::make_unique<NcclComm>(groups.tp_mpi());  // connected: its buffers are taken
      nccl_bytes = nccl->device_bytes();
      comm = std::move(nccl);
    }
    auto b = std::make_unique<CudaRankBackend>(std::move(comm), cfg_, ckpt, options(load));
    const cuda::LoadStats& st = b->load_stats();
    log_info(b->description());
    if (shard_.size > 1)
      log_info("NCCL connected: ", human_bytes(int64_t(nccl_bytes)), " of device memory, taken before the memory plan "
               "was checked");
    log_info("weights read: ", human_bytes(int64_t(st.bytes_read)), " in ", fixed(st.seconds, 1), " s (",
             gb_per_s(int64_t(st.bytes_read), st.seconds), ", ", st.read_calls, " read calls), peak anonymous host memory ",
             human_bytes(st.peak_anonymous_bytes));
    return b;
  }

  // Collective: a plan for --gpu-memory without a GPU on some rank runs nothing.
  bool runs_here() const override { return !any_rank(!cuda_gpu_here()); }

 private:
  cuda::CudaBackendOptions options(const RankLoad& load) const {
    cuda::CudaBackendOptions o;
    o.max_batch_tokens = load.max_batch_tokens;
    o.max_sample_tokens = load.max_sample_tokens;
    o.max_capture_points = load.capture_points;
    o.moe_split = shard_.moe_split;
    o.memory_limit = std::size_t(load.gpu_memory_gib * double(int64_t(1) << 30));
    return o;
  }
};

}  // namespace

bool cuda_gpu_here() { return cuda::visible_device_count() > 0; }

std::string cuda_unsupported_parts(const ModelConfig& cfg) { return cuda::unsupported_parts(cfg); }

std::unique_ptr<BackendChoice> cuda_backend_choice(const ModelConfig& cfg, const TpShard& shard) {
  return std::make_unique<CudaBackendChoice>(cfg, shard);
}

}  // namespace layertap::job
