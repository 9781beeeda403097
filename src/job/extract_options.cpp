#include "job/extract_options.hpp"

#include "core/error.hpp"

namespace layertap {

BackendRequest parse_backend_request(const std::string& s) {
  if (s == "auto") return BackendRequest::Auto;
  if (s == "cpu") return BackendRequest::Cpu;
  if (s == "cuda") return BackendRequest::Cuda;
  LT_FAIL("unknown --backend '", s, "' (auto, cpu or cuda)");
}

const char* backend_request_name(BackendRequest b) {
  switch (b) {
    case BackendRequest::Auto: return "auto";
    case BackendRequest::Cpu: return "cpu";
    case BackendRequest::Cuda: return "cuda";
  }
  return "?";
}

NonFinitePolicy parse_nonfinite_policy(const std::string& s) {
  if (s == "fail") return NonFinitePolicy::Fail;
  if (s == "skip") return NonFinitePolicy::Skip;
  LT_FAIL("--on-nonfinite must be fail or skip, got '", s, "'");
}

const char* nonfinite_policy_name(NonFinitePolicy p) { return p == NonFinitePolicy::Skip ? "skip" : "fail"; }

std::string ExtractOptions::job_identity() const {
  return cat("model=", model, "\ndata=", data, "\nout=", out, "\ncapture=", capture,
             "\nbackend=", backend_request_name(backend), "\ntp=", tp, "\nmoe-split=", moe_split_name(moe_split),
             "\nmax-batch-tokens=", max_batch_tokens, "\nstore-dtype=", dtype_name(store_dtype),
             "\ncompress=", io::compression_name(compress), "\nshard-size-mib=", shard_size_mib,
             "\noverwrite=", overwrite, "\nresume=", resume, "\non-nonfinite=", nonfinite_policy_name(on_nonfinite),
             "\ndry-run=", dry_run, "\ncalibrate-batches=", calibrate_batches,
             "\nignore-free-space=", ignore_free_space, "\nno-lock=", no_lock, "\nread-weights=", read_weights,
             "\ngpu-memory=", gpu_memory_gib, "\n");
}

}  // namespace layertap
