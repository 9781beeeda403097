#include "job/extract_options.hpp"

#include "core/error.hpp"

namespace layertap {

std::string ExtractOptions::job_identity() const {
  return cat("model=", model, "\ndata=", data, "\nout=", out, "\ncapture=", capture, "\nbackend=", backend,
             "\ntp=", tp, "\nmoe-split=", moe_split, "\nmax-batch-tokens=", max_batch_tokens, "\nstore-dtype=", store_dtype, "\ncompress=", compress,
             "\nshard-size-mib=", shard_size_mib, "\noverwrite=", overwrite, "\nresume=", resume,
             "\non-nonfinite=", on_nonfinite, "\ndry-run=", dry_run, "\ncalibrate-batches=", calibrate_batches,
             "\nignore-free-space=", ignore_free_space, "\nno-lock=", no_lock, "\nread-weights=", read_weights,
             "\ngpu-memory=", gpu_memory_gib, "\n");
}

}  // namespace layertap
