#include "backend/cuda/cuda_backend.hpp"

#include <algorithm>
#include <cstring>
#include <cstdio>

#include "backend/cpu/ops.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/gpu_wait.hpp"
#include "core/error.hpp"
#include "kernels/attention.cuh"
#include "kernels/cuda_check.hpp"
#include "kernels/embedding.cuh"
#include "kernels/rmsnorm.cuh"
#include "kernels/rope.cuh"
#include "kernels/swiglu.cuh"

namespace layertap::cuda {

namespace {

int current_device() {
  int d = 0;
  LT_CUDA_CHECK(cudaGetDevice(&d));
  return d;
}

AttentionKernel resolve_attention(AttentionKernel requested, std::int64_t hd) {
  const bool flash = kernels::flash_attention_supported(hd);
  if (requested == AttentionKernel::Auto) return flash ? AttentionKernel::Flash : AttentionKernel::Reference;
  LT_CHECK(requested != AttentionKernel::Flash || flash, "cuda backend: the flash attention kernel needs head_dim 64 "
           "or 128 on an sm_80+ GPU (head_dim is ", hd, "); use the reference kernel");
  return requested;
}

std::size_t distinct_points(const CapturePlan& plan) {
  std::vector<std::int64_t> ids;
  for (const CapturePoint& p : plan.points) ids.push_back(p.id);
  std::sort(ids.begin(), ids.end());
  return std::size_t(std::unique(ids.begin(), ids.end()) - ids.begin());
}

std::string gib(std::size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f GiB", double(bytes) / double(std::size_t(1) << 30));
  return buf;
}

}  // namespace

CudaBackend::CudaBackend(const ModelConfig& config, const ModelWeights& weights, DeviceAllReduce& comm,
                         CudaBackendOptions options)
    : CudaBackend(config, comm, options, &weights, 0) {}

std::unique_ptr<CudaBackend> CudaBackend::synthetic(const ModelConfig& config, DeviceAllReduce& comm,
                                                    CudaBackendOptions options, std::uint64_t seed) {
  return std::unique_ptr<CudaBackend>(new CudaBackend(config, comm, options, nullptr, seed));
}

CudaBackend::CudaBackend(const ModelConfig& config, DeviceAllReduce& comm, CudaBackendOptions options,
                         const ModelWeights* host, std::uint64_t seed)
    : config_(config),
      comm_(comm),
      options_(options),
      device_(current_device()),
      shape_(LocalShape::of(config, TpShard{comm.rank(), comm.size()})),
      memory_(plan_memory(shape_, options)) {
  LT_CHECK(int64_t(config_.sliding_window.size()) == shape_.layers, "cuda backend: config has ",
           config_.sliding_window.size(), " sliding-window entries for ", shape_.layers, " layers");
  LT_CHECK(options_.timeout_s > 0, "cuda backend: timeout_s must be positive");
  attention_ = resolve_attention(options_.attention, shape_.head_dim);
  LT_CHECK(attention_ == AttentionKernel::Flash || shape_.head_dim <= 512, "cuda backend: head_dim ",
           shape_.head_dim, " exceeds the reference attention kernel's 512");

  std::size_t free_bytes = 0, total_bytes = 0;
  LT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  check_fits(memory_, free_bytes, describe_device(device_), options_);

  weights_.emplace(host != nullptr ? DeviceWeights::upload(shape_, *host)
                                   : DeviceWeights::random(shape_, seed, compute_.get()));
  ws_.emplace(shape_, options_.max_batch_tokens, options_.max_capture_points);
  const cpu::Rope rope(config_.rope, shape_.head_dim);  // the CPU backend's frequencies, bit for bit
  LT_CUDA_CHECK(cudaMemcpy(ws_->inv_freq, rope.inv_freq().data(), rope.inv_freq().size() * sizeof(float),
                           cudaMemcpyHostToDevice));
  gemm_ = std::make_unique<Gemm>(ws_->gemm, Gemm::kWorkspaceBytes);
  stager_ = std::make_unique<CaptureStager>(options_.max_capture_points, options_.max_batch_tokens, shape_.hidden,
                                            ws_->snapshots, ws_->host_states);
  // Weights and tables are in place before any forward pass: cudaMemcpy from pageable memory can
  // return before its DMA lands, and the compute stream does not wait for the legacy stream.
  LT_CUDA_CHECK(cudaDeviceSynchronize());
}

CudaBackend::~CudaBackend() {
  // Work still queued (after an exception) must finish before its buffers are freed.
  (void)cudaSetDevice(device_);
  (void)cudaStreamSynchronize(compute_.get());
}

std::string CudaBackend::description() const {
  return cat("cuda on ", describe_device(device_), ": bf16, cuBLASLt, ", attention_kernel_name(attention_),
             " attention, tensor-parallel rank ", comm_.rank(), " of ", comm_.size(), ", weights ",
             gib(memory_.weight_bytes), " + workspace ", gib(memory_.workspace_bytes), " (max_batch_tokens ",
             options_.max_batch_tokens, ", ", options_.max_capture_points, " capture points), pinned host ",
             gib(memory_.pinned_bytes));
}

void CudaBackend::attention_block(const DeviceLayer& l, std::int64_t T, const std::int32_t* pos,
                                  const std::int32_t* tiles, std::int64_t num_tiles, std::int64_t window) {
  const cudaStream_t s = compute_.get();
  const Workspace& w = *ws_;
  const std::int64_t H = shape_.hidden, hd = shape_.head_dim, hq = shape_.heads, hkv = shape_.kv_heads;
  gemm_->linear(w.qkv, w.h, l.qkv.w, l.qkv.b, T, l.qkv.out, l.qkv.in, s);  // (T, (hq + 2 hkv) * hd)
  kernels::qk_norm_rope(w.qkv, pos, w.inv_freq, l.q_norm, l.k_norm, float(config_.rms_norm_eps), T, hq, hkv, hd, s);
  if (attention_ == AttentionKernel::Flash) {
    kernels::attention_flash(w.ctx, w.qkv, pos, tiles, num_tiles, T, hq, hkv, hd, window, s);  // (T, hq * hd)
  } else {
    kernels::attention_reference(w.ctx, w.qkv, pos, T, hq, hkv, hd, window, s);  // (T, hq * hd)
  }
  gemm_->linear(w.delta, w.ctx, l.o.w, l.o.b, T, H, l.o.in, s);  // (T, H) partial sum over this rank's heads
  if (comm_.size() > 1) comm_.all_reduce_sum_bf16(w.delta, T * H, s);
}

void CudaBackend::mlp_block(const DeviceLayer& l, std::int64_t T) {
  const cudaStream_t s = compute_.get();
  const Workspace& w = *ws_;
  const std::int64_t H = shape_.hidden, I = shape_.inter;
  gemm_->linear(w.gate_up, w.h, l.gate_up.w, l.gate_up.b, T, 2 * I, H, s);  // (T, 2I)
  kernels::swiglu(w.act, w.gate_up, T, I, s);                               // (T, I)
  gemm_->linear(w.delta, w.act, l.down.w, l.down.b, T, H, I, s);            // (T, H) partial sum
  if (comm_.size() > 1) comm_.all_reduce_sum_bf16(w.delta, T * H, s);
}

void CudaBackend::run_layers(std::int64_t T, const std::int32_t* pos, const std::int32_t* tiles,
                             std::int64_t num_tiles) {
  const cudaStream_t s = compute_.get();
  const Workspace& w = *ws_;
  const std::int64_t H = shape_.hidden, L = shape_.layers;
  const float eps = float(config_.rms_norm_eps);
  for (std::int64_t i = 0; i < L; ++i) {
    const DeviceLayer& l = weights_->layers[std::size_t(i)];
    // x (T, H) += the previous layer's MLP output: x is now the input of layer i; h = norm(x).
    kernels::fused_residual_rmsnorm(w.h, w.x, i == 0 ? nullptr : w.delta, l.input_norm, eps, T, H, s);
    stager_->capture(i, w.x, /*overwritten_later=*/true, s);
    attention_block(l, T, pos, tiles, num_tiles, config_.sliding_window[std::size_t(i)]);
    kernels::fused_residual_rmsnorm(w.h, w.x, w.delta, l.post_attn_norm, eps, T, H, s);
    mlp_block(l, T);
  }
  // x = output of the last layer (point L), h = after the final norm (point L + 1); neither is
  // written again in this batch, so both are copied to the host without a snapshot.
  kernels::fused_residual_rmsnorm(w.h, w.x, w.delta, weights_->final_norm, eps, T, H, s);
  stager_->capture(L, w.x, false, s);
  stager_->capture(L + 1, w.h, false, s);
}

std::vector<std::vector<std::byte>> CudaBackend::forward(const PackedBatch& batch, const CapturePlan& plan,
                                                         DType dtype) {
  select_device(device_);
  const std::int64_t T = batch.num_tokens(), H = shape_.hidden, L = shape_.layers;
  LT_CHECK(plan.num_layers == L, "capture plan resolved for ", plan.num_layers, " layers, model has ", L);
  LT_CHECK(dtype == DType::BF16 || dtype == DType::F32, "cuda backend: cannot return states as ", dtype_name(dtype),
           " (bfloat16 or float32)");
  LT_CHECK(batch.num_samples() > 0 && batch.offsets.front() == 0 && batch.offsets.back() == T,
           "packed batch offsets do not span its ", T, " tokens");
  for (std::size_t s = 0; s + 1 < batch.offsets.size(); ++s)
    LT_CHECK(batch.offsets[s] <= batch.offsets[s + 1], "packed batch offsets decrease at sample ", s);
  LT_CHECK(T > 0 && T <= options_.max_batch_tokens, "batch of ", T, " tokens; the CUDA backend was built for 1..",
           options_.max_batch_tokens, " (max_batch_tokens)");
  LT_CHECK(distinct_points(plan) <= std::size_t(options_.max_capture_points), "capture plan '", plan.request,
           "' has ", distinct_points(plan), " distinct points; the CUDA backend was built for at most ",
           options_.max_capture_points, " (max_capture_points)");
  const bool capturing = comm_.rank() == 0;
  stager_->begin(capturing ? &plan : nullptr, T);

  // Batch metadata, packed from the front of one pinned buffer, goes over in one copy:
  // ids (T) | pos (T) | flash tiles (num_tiles, 2).
  const Workspace& w = *ws_;
  const cudaStream_t s = compute_.get();
  std::int32_t* hm = w.host_meta;
  std::memcpy(hm, batch.tokens.data(), std::size_t(T) * sizeof(std::int32_t));
  for (std::size_t smp = 0; smp + 1 < batch.offsets.size(); ++smp)
    for (std::int64_t t = batch.offsets[smp]; t < batch.offsets[smp + 1]; ++t)
      hm[T + t] = static_cast<std::int32_t>(t - batch.offsets[smp]);
  std::int64_t num_tiles = 0;
  if (attention_ == AttentionKernel::Flash) {
    const std::vector<std::int32_t> tiles = kernels::flash_query_tiles(batch.offsets);
    num_tiles = std::int64_t(tiles.size()) / 2;
    std::memcpy(hm + 2 * T, tiles.data(), tiles.size() * sizeof(std::int32_t));
  }
  LT_CUDA_CHECK(cudaMemcpyAsync(w.meta, hm, std::size_t(2 * T + 2 * num_tiles) * sizeof(std::int32_t),
                                cudaMemcpyHostToDevice, s));
  const std::int32_t* ids = w.meta;
  const std::int32_t* pos = w.meta + T;
  const std::int32_t* tiles = w.meta + 2 * T;

  LT_CUDA_CHECK(cudaMemsetAsync(w.bad_token, 0x7f, sizeof(std::int32_t), s));  // 0x7f7f7f7f: no bad token
  kernels::embedding_lookup(w.x, ids, weights_->embed, T, H, shape_.vocab, w.bad_token, s);  // (T, H)
  run_layers(T, pos, tiles, num_tiles);
  LT_CUDA_CHECK(cudaMemcpyAsync(w.host_bad_token, w.bad_token, sizeof(std::int32_t), cudaMemcpyDeviceToHost, s));
  LT_CUDA_CHECK(cudaEventRecord(done_.get(), s));

  std::vector<std::vector<std::byte>> states;
  if (capturing) states = stager_->collect(dtype, comm_, options_.timeout_s, options_.host_copy_threads);
  wait_for_event(done_.get(), comm_, options_.timeout_s, "forward pass");
  const std::int32_t bad = *w.host_bad_token;
  LT_CHECK(bad >= T, "token id ", batch.tokens[std::size_t(std::max(bad, 0))], " at batch position ", bad,
           " is outside the vocabulary of ", shape_.vocab);
  return states;
}

}  // namespace layertap::cuda
