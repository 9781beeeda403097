#include "job/backend_choice.hpp"

#include "core/checked.hpp"
#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "job/cpu_backend_choice.hpp"

#ifdef LAYERTAP_HAVE_CUDA
#include "job/cuda_backend_choice.hpp"
#endif

namespace layertap::job {

int64_t HostPlan::total() const {
  int64_t n = 0;
  for (const auto& [what, bytes] : parts) n = checked_add(n, bytes, "host memory plan");
  return n;
}

std::string HostPlan::describe() const {
  std::string s;
  for (const auto& [what, bytes] : parts) s += cat(s.empty() ? "" : " + ", what, " ", human_bytes(bytes));
  return s;
}

std::string gb_per_s(int64_t bytes, double seconds) {
  return seconds > 0 ? fixed(double(bytes) / seconds / 1e9, 2) + " GB/s" : std::string("-");
}

std::unique_ptr<BackendChoice> choose_backend(BackendRequest requested, const ModelConfig& cfg,
                                              const TpShard& shard, bool planning) {
#ifdef LAYERTAP_HAVE_CUDA
  const bool gpu_here = cuda_gpu_here();
  const bool gpu_everywhere = !any_rank(!gpu_here);  // collective: every rank decides alike
  const std::string missing = cuda_unsupported_parts(cfg);
  if (requested == BackendRequest::Auto && gpu_everywhere && missing.empty()) return cuda_backend_choice(cfg, shard);
  if (requested == BackendRequest::Cuda) {
    LT_CHECK(missing.empty(), "--backend cuda: ", cfg.architecture, " needs ", missing,
             ", which the CUDA backend does not implement yet; use --backend cpu (or auto)");
    LT_CHECK(gpu_here || planning, "--backend cuda: this rank sees no GPU (check CUDA_VISIBLE_DEVICES and the "
             "driver; --dry-run --gpu-memory GiB plans a job without one)");
    return cuda_backend_choice(cfg, shard);
  }
#else
  (void)planning;
  LT_CHECK(requested != BackendRequest::Cuda, "--backend cuda: this build has no CUDA (configure with nvcc on PATH)");
#endif
  return cpu_backend_choice(cfg, shard);
}

std::string host_memory_problem(const BackendChoice& backend, const RankLoad& load) {
  const int local_ranks = node_position().size;
  const HostPlan plan = backend.host_plan(load);
  // Every rank of a node alike (the writer's capture buffers counted for each: an upper bound).
  const int64_t mine = max_over_ranks(plan.total()), have = host_memory_bytes();
  const int64_t need = mine > (int64_t(1) << 62) / local_ranks ? int64_t(1) << 62 : mine * local_ranks;
  // One verdict for all: ranks on different nodes may see different memory.
  if (any_rank(need > have))
    return need > have ? cat("not enough host memory: each of the ", local_ranks, " ranks on this node holds up to ",
                             human_bytes(mine), " (", plan.describe(), " at --tp ", backend.shard().size, ", --max-batch-tokens ",
                             load.max_batch_tokens, ", backend ", backend.name(), "), ", human_bytes(need),
                             " in all, but this host allows ", human_bytes(have),
                             "; use a larger --tp, fewer ranks per node, or a smaller --max-batch-tokens",
                             backend.host_memory_hint())
                       : "not enough host memory on another node (its ranks say how much)";
  log_debug("host memory: ", human_bytes(need), " needed of ", human_bytes(have));
  return "";
}

int64_t auto_batch_tokens(const BackendChoice& backend, MpiGroups& groups, const RankLoad& load) {
  RankLoad at = load;
  at.max_batch_tokens = backend.device_batch_tokens(groups, load);
  const int64_t ranks = node_position().size, have = host_memory_bytes();
  RankLoad one = at;
  one.max_batch_tokens = 1;
  // Only where the batch is what does not fit: else host_memory_problem says what does.
  if (backend.host_plan(one).total() <= have / ranks)
    while (at.max_batch_tokens > 1 && backend.host_plan(at).total() > have / ranks) at.max_batch_tokens /= 2;
  return -max_over_ranks(-at.max_batch_tokens);
}

}  // namespace layertap::job
