// Planning the real sizes without a GPU: full-size shape-only checkpoints (every tensor of the real
// name, shape and dtype, data left as sparse holes; tools/make_shape_checkpoint.py) of Kimi-K2.5
// (INT4 experts, wrapper, vision tower), DeepSeek-V3 (FP8, MTP layer), Llama-3.1-70B (bf16),
// Mixtral-8x7B (bf16) and GLM-4.5 (bf16, MTP layer, float32 router):
//   - every rank's plan from the checkpoint equals the CUDA backend's own plan for the model
//     (bench's synthetic config, PackedSource::Config) field by field: weights, packed bytes,
//     scratch, workspace, pinned;
//   - the load plan places exactly the resident block and reads what it holds (no float32 copy);
//   - only TP rank 0 (the writer) holds capture snapshots;
//   - Kimi-K2.5 and DeepSeek-V3 at TP 8 fit a 141 GiB card at 8192 tokens and 4 points; Llama-3.1-70B
//     at TP 8 and 4 too. Prints the host memory per rank before (float32 weights) and after.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>

#include "host_check.hpp"
#include "backend/cuda/load_plan.hpp"
#include "backend/cuda/local_shape.hpp"
#include "backend/cuda/memory_plan.hpp"
#include "backend/cuda/weight_loader.hpp"
#include "bench/model_catalog.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace {

using namespace layertap;
namespace fs = std::filesystem;

using test::check;
using test::check_throws;

double gib(std::size_t b) { return double(b) / double(std::size_t(1) << 30); }

fs::path make_checkpoint(const std::string& arch) {
  const fs::path dir = fs::temp_directory_path() / cat("layertap_full_size_", ::getpid(), "_", arch);
  const std::string cmd = cat("python3 '", LAYERTAP_SOURCE_DIR, "/tools/make_shape_checkpoint.py' --arch ", arch,
                              " --out '", dir.string(), "' --force > /dev/null");
  LT_CHECK(std::system(cmd.c_str()) == 0, "failed: ", cmd);
  return dir;
}

void layout(const std::string& arch, const std::string& synthetic, int tp) {
  const fs::path dir = make_checkpoint(arch);
  const ModelConfig cfg = load_model_config((dir / "config.json").string());
  const ModelConfig own = synthetic_model_config(synthetic);
  const Checkpoint ckpt(checkpoint_files(dir.string()));
  cuda::CudaBackendOptions o;
  o.max_batch_tokens = 8192;
  o.max_capture_points = 4;
  bool same = true, placed = true, fits = true, writer_only = true;
  std::size_t worst_need = 0, host_after = 0;
  for (int r = 0; r < tp; ++r) {
    const TpShard shard{r, tp};
    const cuda::LocalShape s = cuda::checkpoint_shape(cfg, shard, ckpt);
    const cuda::MemoryPlan got = cuda::plan_memory(s, o);
    const cuda::MemoryPlan want = cuda::plan_memory(cuda::LocalShape::of(own, shard, cuda::PackedSource::Config), o);
    same &= got.weight_bytes == want.weight_bytes && got.packed_bytes == want.packed_bytes &&
            got.scratch_bytes == want.scratch_bytes && got.workspace_bytes == want.workspace_bytes &&
            got.pinned_bytes == want.pinned_bytes && got.capture_bytes == want.capture_bytes;
    // Only the group's writer (TP rank 0) holds capture snapshots and pinned capture buffers.
    writer_only &= r == 0 ? got.capture_bytes > 0 : got.capture_bytes == 0;
    const cuda::LoadPlan plan = cuda::plan_load(s, ckpt, cfg.quant);
    std::size_t written = 0;
    for (const cuda::WeightCopy& c : plan.copies) written += c.dst_bytes;
    // Every resident byte but the alignment padding comes from the plan; nothing is read twice.
    placed &= plan.resident_bytes == got.weight_bytes && written <= got.weight_bytes &&
              got.weight_bytes - written < plan.copies.size() * 256 && plan.read_bytes <= written * 2;
    const std::size_t need = cuda::device_bytes_needed(got);
    worst_need = std::max(worst_need, need);
    fits &= need <= std::size_t(141) << 30;
    host_after = std::max(host_after, cuda::LoaderOptions{}.host_bytes() + got.pinned_bytes);
    if (r == 0)
      std::printf("     %s tp %d rank 0: weights %.2f GiB (%.2f packed) + scratch %.2f + workspace %.2f GiB; "
                  "reads %.2f GiB from %zu files in %zu windows\n",
                  arch.c_str(), tp, gib(got.weight_bytes), gib(got.packed_bytes), gib(got.scratch_bytes),
                  gib(got.workspace_bytes), gib(plan.read_bytes), plan.files, plan.copies.size());
  }
  check(same, cat(arch, " tp ", tp, ": every rank's plan from the checkpoint = the CUDA backend's own plan (", synthetic,
                  ")"));
  check(placed, cat(arch, " tp ", tp, ": the load plan fills the resident block, reading each byte once"));
  check(writer_only, cat(arch, " tp ", tp, ": capture buffers on TP rank 0 only"));
  check(fits, cat(arch, " tp ", tp, ": fits a 141 GiB card at 8192 tokens, 4 points (", gib(worst_need),
                  " GiB on the fullest rank)"));
  std::printf("     %s tp %d host per rank: before %.1f GiB (float32 weights), after %.2f GiB (staging ring + pinned)\n",
              arch.c_str(), tp, gib(std::size_t(host_weight_bytes(cfg, {0, tp}))), gib(host_after));
  fs::remove_all(dir);
}

}  // namespace

int main() {
  if (std::system("python3 -c 'import json' > /dev/null 2>&1") != 0) {
    std::printf("SKIP: no python3 here to run tools/make_shape_checkpoint.py\n");
    return 77;
  }
  try {
    layout("kimi-k2.5", "kimi-k2.5", 8);
    layout("deepseek-v3", "deepseek-v3", 8);
    layout("llama-3.1-70b", "llama3-70b", 8);
    layout("llama-3.1-70b", "llama3-70b", 4);
    layout("mixtral-8x7b", "mixtral-8x7b", 8);
    layout("glm-4.5", "glm-4.5", 8);
    layout("gpt-oss-120b", "gpt-oss-120b", 8);
    layout("llama-4-scout", "llama-4-scout", 8);
    layout("gemma-3-27b", "gemma-3-27b", 4);
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  return test::finish();
}
