#include "job/extract_options.hpp"

#include <charconv>

#include <nlohmann/json.hpp>

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

int64_t parse_batch_tokens(const std::string& s) {
  if (s == "auto") return kAutoBatchTokens;
  int64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  LT_CHECK(ec == std::errc() && end == s.data() + s.size() && v > 0, "--max-batch-tokens must be auto or a positive "
           "integer, got '", s, "'");
  return v;
}

const char* nonfinite_policy_name(NonFinitePolicy p) { return p == NonFinitePolicy::Skip ? "skip" : "fail"; }

std::string ExtractOptions::job_identity() const {
  // JSON, so a value holding a newline or '=' cannot pass for another option.
  return nlohmann::json{{"model", model}, {"data", data}, {"out", out}, {"capture", capture},
                        {"backend", backend_request_name(backend)}, {"tp", tp}, {"moe-split", moe_split_name(moe_split)},
                        {"max-batch-tokens", max_batch_tokens}, {"max-sample-tokens", max_sample_tokens},
                        {"store-dtype", dtype_name(store_dtype)},
                        {"compress", io::compression_name(compress)}, {"shard-size-mib", shard_size_mib},
                        {"overwrite", overwrite}, {"resume", resume}, {"on-nonfinite", nonfinite_policy_name(on_nonfinite)},
                        {"dry-run", dry_run}, {"calibrate-batches", calibrate_batches},
                        {"ignore-free-space", ignore_free_space}, {"no-lock", no_lock}, {"read-weights", read_weights},
                        {"gpu-memory", gpu_memory_gib}}
      .dump(1);
}

}  // namespace layertap
