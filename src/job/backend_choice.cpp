#include "job/backend_choice.hpp"

#include <mpi.h>

#include <algorithm>
#include <array>
#include <chrono>

#include "backend/cpu/cpu_backend.hpp"
#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "core/log.hpp"
#include "core/text.hpp"

#ifdef LAYERTAP_HAVE_CUDA
#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/load_plan.hpp"
#include "backend/cuda/local_shape.hpp"
#include "backend/cuda/memory_plan.hpp"
#include "backend/cuda/weight_loader.hpp"
#include "comm/nccl_comm.hpp"
#endif

namespace layertap::job {

namespace {

using Clock = std::chrono::steady_clock;

// The ranks of this rank's node (an MPI shared-memory split; collective over the world). The
// caller frees it.
MPI_Comm node_comm() {
  int world_rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm node = MPI_COMM_NULL;
  LT_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank, MPI_INFO_NULL, &node) == MPI_SUCCESS,
           "MPI_Comm_split_type failed");
  return node;
}

// This rank's position among the ranks of its node.
std::pair<int, int> local_rank_and_size() {
  MPI_Comm node = node_comm();
  int local_rank = 0, local_size = 1;
  MPI_Comm_rank(node, &local_rank);
  MPI_Comm_size(node, &local_size);
  MPI_Comm_free(&node);
  return {local_rank, local_size};
}

#ifdef LAYERTAP_HAVE_CUDA
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
#endif

// A host plan: named parts and their sum.
struct HostPlan {
  std::vector<std::pair<std::string, int64_t>> parts;
  int64_t total() const {
    int64_t n = 0;
    for (const auto& [what, bytes] : parts) n = checked_add(n, bytes, "host memory plan");
    return n;
  }
  std::string describe() const {
    std::string s;
    for (const auto& [what, bytes] : parts) s += cat(s.empty() ? "" : " + ", what, " ", human_bytes(bytes));
    return s;
  }
};

// CPU: float32 weights and a batch's activations (an estimate: the captured states and a few
// working rows of the widest layer part, in float32).
HostPlan cpu_host_plan(const ModelConfig& cfg, const TpShard& shard, const RankLoad& load) {
  const int64_t widest = std::max({cfg.hidden_size, cfg.intermediate_size / shard.size, cfg.q_dim() / shard.size,
                                   cfg.moe ? cfg.moe->expert_intermediate_size * cfg.moe->experts_per_token : 0});
  const int64_t row = checked_add(checked_mul(load.capture_points, cfg.hidden_size, "activations"),
                                  checked_mul(8, widest, "activations"), "activations");
  return {{{"float32 weights", host_weight_bytes(cfg, shard)},
           {"activations", checked_product({load.max_batch_tokens, 4, row}, "a batch's activations")},
           {"dataset share", load.dataset_bytes}}};
}

#ifdef LAYERTAP_HAVE_CUDA
// Host memory of the CUDA runtime, cuBLAS and NCCL in a process (an estimate).
constexpr int64_t kCudaRuntimeHostBytes = int64_t(1) << 30;

cuda::CudaBackendOptions cuda_options(const TpShard& shard, const RankLoad& load) {
  cuda::CudaBackendOptions o;
  o.max_batch_tokens = load.max_batch_tokens;
  o.max_capture_points = load.capture_points;
  o.moe_split = shard.moe_split;
  o.memory_limit = std::size_t(load.gpu_memory_gib * double(int64_t(1) << 30));
  return o;
}

// CUDA: nothing of the weights; the loader's ring, the pinned batch and capture buffers (the latter
// on the writer only: plan_memory counts them for TP rank 0), the dataset share and the runtime.
HostPlan cuda_host_plan(const ModelConfig& cfg, const TpShard& shard, const RankLoad& load) {
  const cuda::CudaBackendOptions o = cuda_options(shard, load);
  const cuda::MemoryPlan m = cuda::plan_memory(cuda::LocalShape::of(cfg, shard, cuda::PackedSource::Config), o);
  return {{{"staging ring", int64_t(o.loader.host_bytes())},
           {shard.rank == 0 ? "pinned batch and capture buffers" : "pinned batch buffers", int64_t(m.pinned_bytes)},
           {"dataset share", load.dataset_bytes},
           {"CUDA runtime (estimate)", kCudaRuntimeHostBytes}}};
}

// What NCCL's buffers are planned as on a machine without a GPU to measure them on (TP > 1): NVLS
// buffers on NVSwitch nodes are commonly reported around 1 GiB; ring buffers take less.
constexpr std::size_t kNcclAllowanceBytes = std::size_t(1) << 30;

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
  const int local_rank = local_rank_and_size().first;
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
  std::string description() const { return impl_.description(); }
  const cuda::LoadStats& load_stats() const { return impl_.load_stats(); }

 private:
  std::unique_ptr<DeviceAllReduce> comm_;
  cuda::CudaBackend impl_;
};
#endif

std::string gb_per_s(int64_t bytes, double seconds) {
  return seconds > 0 ? fixed(double(bytes) / seconds / 1e9, 2) + " GB/s" : std::string("-");
}

}  // namespace

bool gpu_visible() {
#ifdef LAYERTAP_HAVE_CUDA
  return cuda::visible_device_count() > 0;
#else
  return false;
#endif
}

std::string resolve_backend(const std::string& requested, const ModelConfig& cfg, bool planning) {
#ifdef LAYERTAP_HAVE_CUDA
  const bool gpu_here = cuda::visible_device_count() > 0;
  const bool gpu_everywhere = !any_rank(!gpu_here);
  const std::string missing = cuda::unsupported_parts(cfg);
  if (requested == "auto") return gpu_everywhere && missing.empty() ? "cuda" : "cpu";
  if (requested == "cuda") {
    LT_CHECK(missing.empty(), "--backend cuda: ", cfg.architecture, " needs ", missing,
             ", which the CUDA backend does not implement yet; use --backend cpu (or auto)");
    LT_CHECK(gpu_here || planning, "--backend cuda: this rank sees no GPU (check CUDA_VISIBLE_DEVICES and the "
             "driver; --dry-run --gpu-memory GiB plans a job without one)");
  }
  return requested;
#else
  (void)cfg;
  (void)planning;
  LT_CHECK(requested != "cuda", "--backend cuda: this build has no CUDA (configure with nvcc on PATH)");
  return "cpu";
#endif
}

void check_host_memory(const std::string& backend, const ModelConfig& cfg, const TpShard& shard, const RankLoad& load) {
  const std::string problem = host_memory_problem(backend, cfg, shard, load);
  LT_CHECK(problem.empty(), problem);
}

std::string host_memory_problem(const std::string& backend, const ModelConfig& cfg, const TpShard& shard,
                                const RankLoad& load) {
  const int local_ranks = local_rank_and_size().second;
#ifdef LAYERTAP_HAVE_CUDA
  const HostPlan plan = backend == "cuda" ? cuda_host_plan(cfg, shard, load) : cpu_host_plan(cfg, shard, load);
#else
  (void)backend;
  const HostPlan plan = cpu_host_plan(cfg, shard, load);
#endif
  // Every rank of a node alike (the writer's capture buffers counted for each: an upper bound).
  const int64_t mine = max_over_ranks(plan.total()), have = host_memory_bytes();
  const int64_t need = mine > (int64_t(1) << 62) / local_ranks ? int64_t(1) << 62 : mine * local_ranks;
  // One verdict for all: ranks on different nodes may see different memory.
  if (any_rank(need > have))
    return need > have ? cat("not enough host memory: each of the ", local_ranks, " ranks on this node holds up to ",
                             human_bytes(mine), " (", plan.describe(), " at --tp ", shard.size,
                             ", --max-batch-tokens ", load.max_batch_tokens, ", backend ", backend, "), ",
                             human_bytes(need), " in all, but this host allows ", human_bytes(have),
                             "; use a larger --tp, fewer ranks per node, or a smaller --max-batch-tokens",
                             backend == "cpu" ? " (the cuda backend keeps no weights on the host)" : "")
                       : "not enough host memory on another node (its ranks say how much)";
  log_debug("host memory: ", human_bytes(need), " needed of ", human_bytes(have));
  return "";
}

std::unique_ptr<Backend> make_backend(const std::string& backend, const ModelConfig& cfg, const Checkpoint& ckpt,
                                      const TpShard& shard, MpiGroups& groups, const RankLoad& load) {
#ifdef LAYERTAP_HAVE_CUDA
  if (backend == "cuda") {
    select_rank_gpu();  // before NCCL and any allocation
    std::unique_ptr<DeviceAllReduce> comm;
    std::size_t nccl_bytes = 0;
    if (shard.size == 1) {
      comm = std::make_unique<SoloDeviceAllReduce>();
    } else {
      auto nccl = std::make_unique<NcclComm>(groups.tp_mpi());  // connected: its buffers are taken
      nccl_bytes = nccl->device_bytes();
      comm = std::move(nccl);
    }
    auto b = std::make_unique<CudaRankBackend>(std::move(comm), cfg, ckpt, cuda_options(shard, load));
    const cuda::LoadStats& st = b->load_stats();
    log_info(b->description());
    if (shard.size > 1)
      log_info("NCCL connected: ", human_bytes(int64_t(nccl_bytes)), " of device memory, taken before the memory plan "
               "was checked");
    log_info("weights read: ", human_bytes(int64_t(st.bytes_read)), " in ", fixed(st.seconds, 1), " s (",
             gb_per_s(int64_t(st.bytes_read), st.seconds), ", ", st.read_calls, " read calls), peak anonymous host memory ",
             human_bytes(st.peak_anonymous_bytes));
    return b;
  }
#else
  (void)load;
#endif
  LT_CHECK(backend == "cpu", "unknown backend '", backend, "'");
  return std::make_unique<CpuBackend>(cfg, load_weights(ckpt, cfg, shard), groups.tp());
}

RankPlan describe_rank_plan(const std::string& backend, const ModelConfig& cfg, const Checkpoint& ckpt,
                            const TpShard& shard, MpiGroups& groups, const RankLoad& load) {
#ifdef LAYERTAP_HAVE_CUDA
  if (backend == "cuda") {
    const cuda::CudaBackendOptions o = cuda_options(shard, load);
    const cuda::LocalShape s = cuda::checkpoint_shape(cfg, shard, ckpt);
    const cuda::MemoryPlan m = cuda::plan_memory(s, o);
    const DeviceBudget budget = planned_device_budget(shard, groups, load);
    const std::size_t device = budget.free;
    const cuda::LoadPlan lp = cuda::plan_load(s, ckpt, cfg.quant);
    const HostPlan host = cuda_host_plan(cfg, shard, load);
    std::string r = cat("  reads      ", human_bytes(int64_t(lp.read_bytes)), " from ", lp.files, " files: bf16 ",
                        human_bytes(int64_t(lp.bf16_bytes)), ", converted to bf16 ",
                        human_bytes(int64_t(lp.converted_bytes)), ", FP8 ", human_bytes(int64_t(lp.fp8_bytes)),
                        ", INT4 ", human_bytes(int64_t(lp.int4_bytes)), ", scales ",
                        human_bytes(int64_t(lp.scale_bytes)), "\n");
    r += cuda::describe_device_plan(m, s, device, o);
    if (shard.size > 1)
      r += cat("  NCCL       ", fixed(double(budget.nccl) / double(1 << 30), 2), " GiB",
               budget.measured ? " taken when it connected (measured; outside the free memory above)\n"
                               : " allowed for its buffers (not measured: a rank of the group has no GPU; taken "
                                 "from the free memory above)\n");
    r += cat("  host       ", human_bytes(host.total()), " (", host.describe(), "; no weights)\n");
    return {r, cuda::device_bytes_needed(m) <= device};
  }
#endif
  (void)ckpt;
  (void)groups;
  const HostPlan host = cpu_host_plan(cfg, shard, load);
  return {cat("  host       ", human_bytes(host.total()), " (", host.describe(), ")\n"), true};
}

std::string pre_read_weights(const std::string& backend, const ModelConfig& cfg, const Checkpoint& ckpt,
                             const TpShard& shard) {
  const auto t0 = Clock::now();
#ifdef LAYERTAP_HAVE_CUDA
  if (backend == "cuda") {
    const cuda::LoadPlan plan = cuda::plan_load(cuda::checkpoint_shape(cfg, shard, ckpt), ckpt, cfg.quant);
    cuda::HostTarget nowhere(nullptr);
    const cuda::LoadStats st = cuda::run_load_plan(plan, nowhere, cuda::LoaderOptions{});
    return cat("read ", human_bytes(int64_t(st.bytes_read)), " (", st.copies, " windows of ", plan.files,
               " files, ", st.read_calls, " read calls) in ", fixed(st.seconds, 1), " s, ",
               gb_per_s(int64_t(st.bytes_read), st.seconds),
               ", peak anonymous memory ", human_bytes(st.peak_anonymous_bytes), ": every value checked");
  }
#endif
  (void)backend;
  const int64_t bytes = host_weight_bytes(cfg, shard);
  const ModelWeights w = load_weights(ckpt, cfg, shard);
  const double s = std::chrono::duration<double>(Clock::now() - t0).count();
  return cat("decoded ", human_bytes(bytes), " of float32 weights in ", fixed(s, 1), " s (",
             gb_per_s(bytes, s), " of float32), anonymous memory ", human_bytes(anonymous_resident_bytes()),
             " holding them (the cpu backend's load path)");
}

}  // namespace layertap::job
