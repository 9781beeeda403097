// The CUDA backend's load plan, executed into host memory (no GPU needed):
//   - for every fixture (dense fp32/fp16/bf16, biases, sharded, FP8 blocks, INT4 groups, MoE, MLA)
//     at TP 1, 2 and 4 and both MoE splits, every rank's image equals byte for byte the block that
//     DeviceWeights::upload places from the float32 host slices (load_weights) and the packed
//     checkpoint bytes: the two loaders cannot drift;
//   - small staging slots (windows split over many chunks, several threads) give the same image;
//   - damaged checkpoints are refused naming file and tensor, by the pre-read and by the CPU
//     backend's loader alike (one value rule, model/stored_window.hpp): a wrong INT4 weight_shape, a
//     NaN FP8 scale, a zero INT4 scale, a NaN FP8 code, a NaN bf16 weight, a float32 weight beyond
//     bfloat16's range, a shard truncated before and after it was opened.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "fixture_catalog.hpp"
#include "host_check.hpp"
#include "backend/cuda/device_weights.hpp"
#include "backend/cuda/load_plan.hpp"
#include "backend/cuda/local_shape.hpp"
#include "backend/cuda/weight_loader.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "kernels/cuda_check.hpp"
#include "model/hf_config.hpp"
#include "model/safetensors.hpp"
#include "model/weights.hpp"

namespace {

using namespace layertap;
namespace fs = std::filesystem;

using test::check;
using test::check_throws;

fs::path fixture(const std::string& name) { return fs::path(LAYERTAP_FIXTURES) / "models" / name; }

// This rank's image from the load plan (threads and slot size as given).
std::vector<std::byte> plan_image(const cuda::LocalShape& s, const Checkpoint& ckpt, const QuantConfig& quant,
                                  const cuda::LoaderOptions& o, cuda::LoadStats* stats = nullptr) {
  const cuda::LoadPlan plan = cuda::plan_load(s, ckpt, quant);
  std::vector<std::byte> image(plan.resident_bytes);
  cuda::HostTarget target(image.data());
  const cuda::LoadStats st = cuda::run_load_plan(plan, target, o);
  if (stats != nullptr) *stats = st;
  return image;
}

// Today's upload: the shape the backend took from host weights + checkpoint, and its block.
void compare_fixture(const std::string& name, int tp, MoeSplit split) {
  const fs::path dir = fixture(name);
  const ModelConfig cfg = load_model_config((dir / "config.json").string());
  try {
    check_tp_divisibility(cfg, {0, tp, split});
  } catch (const Error&) {
    return;  // this layout does not divide the fixture
  }
  const Checkpoint ckpt(checkpoint_files(dir.string()));
  std::size_t bytes = 0, differ = 0, ranks = 0;
  bool sizes_agree = true, flags_agree = true;
  for (int r = 0; r < tp; ++r) {
    const TpShard shard{r, tp, split};
    const ModelWeights host = load_weights(ckpt, cfg, shard);
    cuda::LocalShape ref = cuda::LocalShape::of(cfg, shard, cuda::PackedSource::Checkpoint, &ckpt);
    for (const LayerWeights& l : host.layers)
      if (const auto* m = std::get_if<MoeWeights>(&l.ffn))
        for (const float v : m->router.w) ref.router_lo |= bf16_to_float(float_to_bf16(v)) != v;
    const cuda::LocalShape s = cuda::checkpoint_shape(cfg, shard, ckpt);
    flags_agree &= s.router_lo == ref.router_lo;
    const std::vector<std::byte> want = cuda::DeviceWeights::reference_image(ref, host, &ckpt, &cfg.quant);
    cuda::LoadStats st;
    const std::vector<std::byte> got = plan_image(s, ckpt, cfg.quant, cuda::LoaderOptions{}, &st);
    sizes_agree &= got.size() == want.size();
    for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) differ += got[i] != want[i];
    bytes += got.size();
    ++ranks;
    // Small slots and three threads: every window split over many chunks, the same bytes.
    cuda::LoaderOptions small;
    small.threads = 3;
    small.slot_bytes = 1000;
    const std::vector<std::byte> chunked = plan_image(s, ckpt, cfg.quant, small);
    differ += chunked != got;
  }
  check(sizes_agree && flags_agree && differ == 0,
        cat(name, " tp ", tp, cfg.moe ? cat(" ", moe_split_name(split)) : std::string(), ": ", ranks, " ranks, ",
            bytes, " bytes of plan image = DeviceWeights::upload's block (", differ, " bytes differ)"));
}

// Where a GPU (or the simulated one) is visible: on the last of its devices, DeviceWeights::load's
// block read back equals the plan's HostTarget image byte for byte, padding included, loaded
// through a ring of small slots on three reader threads (each must select that device itself),
// and the block lives on that device.
void device_matches_image(const std::string& name, int tp, MoeSplit split) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    (void)cudaGetLastError();
    return;
  }
  const fs::path dir = fixture(name);
  const ModelConfig cfg = load_model_config((dir / "config.json").string());
  try {
    check_tp_divisibility(cfg, {0, tp, split});
  } catch (const Error&) {
    return;
  }
  const Checkpoint ckpt(checkpoint_files(dir.string()));
  const int last = count - 1;
  LT_CUDA_CHECK(cudaSetDevice(last));
  std::size_t bytes = 0, differ = 0;
  bool on_device = true;
  for (int r = 0; r < tp; ++r) {
    const cuda::LocalShape s = cuda::checkpoint_shape(cfg, {r, tp, split}, ckpt);
    const std::vector<std::byte> want = plan_image(s, ckpt, cfg.quant, cuda::LoaderOptions{});
    cuda::LoaderOptions o;
    o.threads = 3;
    o.slot_bytes = 1000;
    const cuda::DeviceWeights w = cuda::DeviceWeights::load(s, cuda::plan_load(s, ckpt, cfg.quant), o);
    std::vector<std::byte> got(w.sizes().resident);
    if (!got.empty()) LT_CUDA_CHECK(cudaMemcpy(got.data(), w.block(), got.size(), cudaMemcpyDeviceToHost));
    differ += got.size() != want.size();
    for (std::size_t i = 0; i < std::min(got.size(), want.size()); ++i) differ += got[i] != want[i];
    bytes += got.size();
    cudaPointerAttributes a{};
    LT_CUDA_CHECK(cudaPointerGetAttributes(&a, w.block()));
    on_device &= got.empty() || (a.type == cudaMemoryTypeDevice && a.device == last);
  }
  LT_CUDA_CHECK(cudaSetDevice(0));
  check(differ == 0 && on_device,
        cat(name, " tp ", tp, cfg.moe ? cat(" ", moe_split_name(split)) : std::string(), " on device ", last, " of ",
            count, ": ", bytes, " bytes of DeviceWeights::load's block = the plan's image (", differ,
            " bytes differ)", on_device ? "" : "; the block is not on that device"));
}

// A copy of fixture `name` in a fresh temporary directory.
fs::path copy_fixture(const std::string& name, const std::string& tag) {
  const fs::path dst = fs::temp_directory_path() / cat("layertap_load_plan_", ::getpid(), "_", tag);
  fs::remove_all(dst);
  fs::copy(fixture(name), dst, fs::copy_options::recursive);
  return dst;
}

// Overwrites `bytes` bytes at element `element` of tensor `tensor` in the copy at `dir`.
void patch(const fs::path& dir, const std::string& tensor, std::size_t element, const void* value, std::size_t bytes) {
  std::uint64_t offset = 0;
  std::string file;
  {
    const Checkpoint ckpt(checkpoint_files(dir.string()));
    const TensorInfo& t = ckpt.info(tensor);
    offset = t.offset + element * dtype_size(t.dtype);
    file = t.file;
  }
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekp(std::streamoff(offset));
  f.write(static_cast<const char*>(value), std::streamsize(bytes));
  check(bool(f), cat("patched ", tensor, " in ", file));
}

void preread(const fs::path& dir, int tp = 1) {
  const ModelConfig cfg = load_model_config((dir / "config.json").string());
  const Checkpoint ckpt(checkpoint_files(dir.string()));
  for (int r = 0; r < tp; ++r) {
    const cuda::LocalShape s = cuda::checkpoint_shape(cfg, {r, tp}, ckpt);
    cuda::HostTarget nowhere(nullptr);
    cuda::run_load_plan(cuda::plan_load(s, ckpt, cfg.quant), nowhere, cuda::LoaderOptions{});
  }
}

void cpu_load(const fs::path& dir) {
  const ModelConfig cfg = load_model_config((dir / "config.json").string());
  const Checkpoint ckpt(checkpoint_files(dir.string()));
  (void)load_weights(ckpt, cfg, {0, 1});
}

// The pre-read (the CUDA backend's loader) and the CPU backend's loader refuse `dir` alike.
void both_refuse(const std::string& what, const fs::path& dir, const std::vector<std::string>& needles) {
  check_throws(what + " (pre-read)", [&] { preread(dir); }, needles);
  check_throws(what + " (CPU backend)", [&] { cpu_load(dir); }, needles);
}

// A copy of `fixture` (as `tag`) with `value` written over element `element` of `tensor`: both
// loaders refuse it naming the tensor and each of `needles`.
template <typename T>
void refused_when_patched(const std::string& what, const char* fixture, const char* tag, const std::string& tensor,
                          std::size_t element, T value, std::vector<std::string> needles) {
  const fs::path d = copy_fixture(fixture, tag);
  patch(d, tensor, element, &value, sizeof value);
  needles.insert(needles.begin(), tensor);
  both_refuse(what, d, needles);
  fs::remove_all(d);
}

void damaged() {
  {  // The undamaged copies pre-read cleanly.
    const fs::path d = copy_fixture("kimi_k25_int4", "clean");
    bool ok = true;
    try {
      preread(d, 2);
    } catch (const Error& e) {
      ok = false;
      std::printf("     %s\n", e.what());
    }
    check(ok, "an undamaged INT4 checkpoint pre-reads at tp 2");
    fs::remove_all(d);
  }
  refused_when_patched("a wrong INT4 weight_shape", "kimi_k25_int4", "shape",
                       "language_model.model.layers.1.mlp.experts.3.up_proj.weight_shape", 1, std::int64_t(12345),
                       {"records shape", "12345", ".safetensors"});
  refused_when_patched("a zero INT4 scale", "kimi_k25_int4", "scale",
                       "language_model.model.layers.2.mlp.experts.0.down_proj.weight_scale", 5, std::uint16_t(0),
                       {"finite and positive", ".safetensors"});
  refused_when_patched("a NaN FP8 scale", "deepseek_v3_fp8", "fp8",
                       "model.layers.1.mlp.experts.2.gate_proj.weight_scale_inv", 0, std::nanf(""),
                       {"nan", "finite and positive", "model.safetensors"});
  refused_when_patched("a NaN FP8 code", "deepseek_v3_fp8", "fp8_code",
                       "model.layers.1.mlp.experts.2.up_proj.weight", 3, std::uint8_t(0xff),
                       {"nan", "weights must be finite", "model.safetensors"});
  refused_when_patched("a float32 weight beyond bfloat16's range", "llama", "flt_max",
                       "model.layers.0.mlp.down_proj.weight", 2, 3.4e38f,
                       {"beyond bfloat16's range", ".safetensors"});
  refused_when_patched("a NaN bf16 weight", "qwen3", "bf16",
                       "model.layers.1.mlp.down_proj.weight", 7, std::uint16_t(0x7fc0),
                       {"nan", "weights must be finite", ".safetensors"});
  {
    const fs::path d = copy_fixture("qwen3", "cut");
    const fs::path shard = d / "model-00002-of-00004.safetensors";
    fs::resize_file(shard, fs::file_size(shard) - 64);
    both_refuse("a shard truncated before it is opened", d, {shard.string()});
    fs::remove_all(d);
  }
  {  // Truncated after the headers were read (a download still being written, a filesystem fault).
    const fs::path d = copy_fixture("qwen3", "cut_late");
    const ModelConfig cfg = load_model_config((d / "config.json").string());
    const Checkpoint ckpt(checkpoint_files(d.string()));
    const fs::path shard = d / "model-00003-of-00004.safetensors";
    fs::resize_file(shard, fs::file_size(shard) / 2);
    const cuda::LocalShape s = cuda::LocalShape::of(cfg, {0, 1}, cuda::PackedSource::Checkpoint, &ckpt);
    check_throws("a shard truncated after it was opened", [&] {
      cuda::HostTarget nowhere(nullptr);
      cuda::run_load_plan(cuda::plan_load(s, ckpt, cfg.quant), nowhere, cuda::LoaderOptions{});
    }, {shard.string(), "ends at byte", "truncated"});
    check_throws("a shard truncated after it was opened (CPU backend: no SIGBUS)", [&] {
      (void)load_weights(ckpt, cfg, {0, 1});
    }, {shard.string(), "ends at byte", "truncated"});
    fs::remove_all(d);
  }
}

}  // namespace

int main() {
  try {
    for (const std::string& name : test::all_fixtures())
      for (const int tp : {1, 2, 4})
        for (const MoeSplit split : {MoeSplit::Experts, MoeSplit::Intermediate}) {
          if (split == MoeSplit::Intermediate &&
              !load_model_config((fixture(name) / "config.json").string()).moe)
            continue;
          compare_fixture(name, tp, split);
          device_matches_image(name, tp, split);
        }
    damaged();
  } catch (const std::exception& e) {
    std::printf("FAIL: %s\n", e.what());
    return 1;
  }
  return test::finish();
}
