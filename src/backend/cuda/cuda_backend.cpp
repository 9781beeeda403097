#include "backend/cuda/cuda_backend.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <numeric>

#include "backend/cpu/ops.hpp"
#include "backend/cuda/cost_scope.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/gpu_wait.hpp"
#include "backend/cuda/grouped_experts.hpp"
#include "backend/cuda/load_plan.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "model/routing_record.hpp"
#include "kernels/attention.cuh"
#include "kernels/cuda_check.hpp"
#include "kernels/embedding.cuh"
#include "kernels/grouped_gemm.cuh"
#include "kernels/mla.cuh"
#include "kernels/moe.cuh"
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

AttentionKernel resolve_attention(AttentionKernel requested, std::int64_t qk_dim, std::int64_t v_dim) {
  const bool flash = kernels::flash_attention_supported(qk_dim, v_dim);
  if (requested == AttentionKernel::Auto) return flash ? AttentionKernel::Flash : AttentionKernel::Reference;
  LT_CHECK(requested != AttentionKernel::Flash || flash, "cuda backend: the flash attention kernel needs head_dim 64 "
           "or 128 (MLA: qk 192 and v 128) on an sm_80+ GPU (head_dim is ", qk_dim,
           v_dim != qk_dim ? cat(", v ", v_dim) : std::string(), "); use the reference kernel");
  return requested;
}

// This rank's shape (from the checkpoint, the float32 host slices, or the config alone); the router
// gets a bf16 low part when its weights are not all bf16 values.
LocalShape rank_shape(const ModelConfig& config, const TpShard& shard, const ModelWeights* host,
                      const Checkpoint* ckpt) {
  if (ckpt != nullptr) return checkpoint_shape(config, shard, *ckpt);
  LocalShape s = LocalShape::of(config, shard, host == nullptr ? PackedSource::Config : PackedSource::None);
  if (host != nullptr)
    for (const LayerWeights& l : host->layers)
      if (const auto* m = std::get_if<MoeWeights>(&l.ffn))
        for (const float v : m->router.w) s.router_lo |= bf16_to_float(float_to_bf16(v)) != v;
  return s;
}

std::size_t distinct_points(const CapturePlan& plan) {
  std::vector<std::int64_t> ids;
  for (const CapturePoint& p : plan.points) ids.push_back(p.id);
  std::sort(ids.begin(), ids.end());
  return std::size_t(std::unique(ids.begin(), ids.end()) - ids.begin());
}

// The swiglu kernel's descriptor of the model's MLP activation: gate and up split ([gate | up]),
// or interleaved as GPT-OSS's routed experts store them.
kernels::GateActivation gate_activation(const GatedActivation& a, bool interleaved = false) {
  using Kind = GatedActivation::Kind;
  const auto kind = a.kind == Kind::Silu       ? kernels::GateActivation::Silu
                    : a.kind == Kind::GeluTanh ? kernels::GateActivation::GeluTanh
                                               : kernels::GateActivation::ClampedSwiglu;
  return {kind, a.alpha, a.limit, interleaved};
}

}  // namespace

CudaBackend::CudaBackend(const ModelConfig& config, const ModelWeights& weights, DeviceAllReduce& comm,
                         CudaBackendOptions options)
    : CudaBackend(config, comm, options, &weights, nullptr, 0) {}

CudaBackend::CudaBackend(const ModelConfig& config, const Checkpoint& ckpt, DeviceAllReduce& comm,
                         CudaBackendOptions options)
    : CudaBackend(config, comm, options, nullptr, &ckpt, 0) {}

std::unique_ptr<CudaBackend> CudaBackend::synthetic(const ModelConfig& config, DeviceAllReduce& comm,
                                                    CudaBackendOptions options, std::uint64_t seed) {
  return std::unique_ptr<CudaBackend>(new CudaBackend(config, comm, options, nullptr, nullptr, seed));
}

CudaBackend::CudaBackend(const ModelConfig& config, DeviceAllReduce& comm, CudaBackendOptions options,
                         const ModelWeights* host, const Checkpoint* ckpt, std::uint64_t seed)
    : config_(config),
      comm_(comm),
      options_(options),
      device_(current_device()),
      shape_(with_expert_path(rank_shape(config, TpShard{comm.rank(), comm.size(), options.moe_split}, host, ckpt),
                               options)),
      memory_(plan_memory(shape_, options)) {
  LT_CHECK(int64_t(config_.layers.size()) == shape_.layers, "cuda backend: config has ", config_.layers.size(),
           " layer entries for ", shape_.layers, " layers");
  LT_CHECK(options_.timeout_s > 0, "cuda backend: timeout_s must be positive");
  if (comm.rank() != 0) options_.max_capture_points = 0;  // only TP rank 0 captures (as plan_memory counts)
  const std::int64_t qk_dim = shape_.mla ? shape_.mla_qk() : shape_.head_dim;
  const std::int64_t v_dim = shape_.mla ? shape_.v_dim : shape_.head_dim;
  attention_ = resolve_attention(options_.attention, qk_dim, v_dim);
  LT_CHECK(attention_ == AttentionKernel::Flash || (qk_dim <= 512 && v_dim <= 512), "cuda backend: head_dim ",
           qk_dim, " exceeds the reference attention kernel's 512");

  std::size_t free_bytes = 0, total_bytes = 0;
  LT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  if (options_.memory_limit > 0) free_bytes = std::min(free_bytes, options_.memory_limit);
  check_fits(memory_, free_bytes, describe_device(device_), options_);

  if (host != nullptr)
    weights_.emplace(DeviceWeights::upload(shape_, *host, ckpt, &config_.quant));
  else if (ckpt != nullptr)
    weights_.emplace(DeviceWeights::load(shape_, plan_load(shape_, *ckpt, config_.quant), options_.loader, &load_stats_));
  else
    weights_.emplace(DeviceWeights::random(shape_, seed, compute_.get()));
  max_kept_ = max_kept_positions(options_);
  ws_.emplace(shape_, WorkspaceSize{options_.max_batch_tokens, options_.max_capture_points, max_kept_});
  if (shape_.experts_grouped) grouped_.emplace(*weights_, shape_, ws_->expert_parts);
  // Each layer's frequencies and YaRN factor as the CPU backend's, bit for bit (rotary_dim / 2 of
  // each row; MLA: all rope_dim / 2): (L, rope_freqs()). A NoPE layer's stay 0 and 1, unread.
  const std::int64_t half = shape_.rope_freqs();
  std::vector<float> freqs(std::size_t(shape_.layers * half), 0.0f);
  rope_attention_factor_.assign(std::size_t(shape_.layers), 1.0f);
  for (std::int64_t i = 0; i < shape_.layers; ++i) {
    const std::optional<RopeConfig>& r = config_.layers[std::size_t(i)].rope;
    if (!r) continue;
    const cpu::Rope rope(*r, config_.rotary_dim);
    std::copy(rope.inv_freq().begin(), rope.inv_freq().end(), freqs.begin() + i * half);
    rope_attention_factor_[std::size_t(i)] = rope.attention_factor();
  }
  LT_CUDA_CHECK(cudaMemcpy(ws_->inv_freq, freqs.data(), freqs.size() * sizeof(float), cudaMemcpyHostToDevice));
  if (ws_->logit_offset != nullptr)
    LT_CUDA_CHECK(cudaMemset(ws_->logit_offset, 0, std::size_t(shape_.experts) * sizeof(float)));
  if (options_.profile_layers)
    for (std::int64_t i = 0; i <= shape_.layers; ++i) layer_events_.emplace_back(true);
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
  const std::string parts = cat(shape_.mla ? "MLA" : "GQA", shape_.any_moe() ? " + MoE" : "",
                                shape_.any_moe() ? cat(" (experts ", shape_.first_expert, "..",
                                                       shape_.first_expert + shape_.local_experts - 1, " of ",
                                                       shape_.experts, shape_.moe_whole ? "" : ", intermediate slices",
                                                       ")")
                                                 : std::string());
  const std::string packed =
      memory_.packed_bytes > 0 ? cat(" (", gib(memory_.packed_bytes), " packed) + dequantization scratch ",
                                     gib(memory_.scratch_bytes))
                               : std::string();
  const std::string experts = !shape_.any_moe() ? ""
                              : shape_.experts_grouped ? "routed experts by the grouped GEMM (read as stored), "
                                                       : "routed experts expanded to bf16 (one cuBLASLt product each), ";
  return cat("cuda on ", describe_device(device_), ": ", parts, ", bf16, cuBLASLt, ", experts,
             attention_kernel_name(attention_), " attention, tensor-parallel rank ", comm_.rank(), " of ",
             comm_.size(), ", weights ", gib(memory_.weight_bytes), packed, " + workspace ",
             gib(memory_.workspace_bytes), " (max_batch_tokens ", options_.max_batch_tokens, ", ",
             options_.max_capture_points, " capture points",
             max_kept_ > 0 ? cat(", keys and values kept for samples of up to ", options_.max_sample_tokens,
                                 " tokens: ", gib(memory_.kept_bytes))
                           : std::string(),
             "), pinned host ", gib(memory_.pinned_bytes));
}

void CudaBackend::apply_probe(std::int64_t T) {
  routing_skew_ = false;
  CudaProbe* p = options_.probe;
  if (p == nullptr) return;
  const std::vector<std::vector<std::int32_t>>& experts = p->forced_experts;
  const std::vector<std::vector<float>>& weights = p->forced_weights;
  LT_CHECK(experts.empty() || (std::int64_t(experts.size()) == shape_.layers && weights.size() == experts.size()),
           "cuda backend: forced routing for ", experts.size(), " layers, the model has ", shape_.layers);
  for (std::size_t i = 0; i < experts.size(); ++i) {
    LT_CHECK(experts[i].size() == weights[i].size() && (experts[i].empty() || shape_.moe_layer[i]),
             "cuda backend: forced routing of layer ", i, " is malformed or the layer is dense");
    LT_CHECK(!shape_.moe_layer[i] || std::int64_t(experts[i].size()) == T * shape_.top_k, "cuda backend: forced "
             "routing of layer ", i, " holds ", experts[i].size(), " choices, the batch needs ", T * shape_.top_k);
    for (const std::int32_t e : experts[i])
      LT_CHECK(e >= 0 && e < shape_.experts, "cuda backend: forced routing names expert ", e, " of ", shape_.experts);
  }
  const std::vector<float>& skew = p->routing_skew;
  if (!skew.empty()) {
    LT_CHECK(shape_.any_moe(), "cuda backend: routing skew on a model without MoE layers");
    LT_CHECK(!shape_.router_bias, "cuda backend: routing skew on a model whose router has a bias (GPT-OSS) is not "
             "supported; use uniform routing");
    LT_CHECK(std::int64_t(skew.size()) == shape_.experts, "cuda backend: routing skew of ", skew.size(),
             " values for ", shape_.experts, " experts");
    // Ordered before this forward's routing on the compute stream.
    LT_CUDA_CHECK(cudaMemcpyAsync(ws_->logit_offset, skew.data(), skew.size() * sizeof(float), cudaMemcpyHostToDevice,
                                  compute_.get()));
    routing_skew_ = true;
  }
  LT_CHECK(!p->cost_only || std::int64_t(p->assumed_expert_rows.size()) == (shape_.any_moe() ? shape_.local_experts : 0),
           "cuda backend: a cost-only forward assumes rows for ", p->assumed_expert_rows.size(), " local experts, the "
           "rank has ", shape_.any_moe() ? shape_.local_experts : 0);
  p->moe_rows.assign(std::size_t(shape_.layers), 0);
  p->moe_busiest.assign(std::size_t(shape_.layers), 0);
  p->layer_ms.clear();
}

__nv_bfloat16* CudaBackend::kept_rows(std::int64_t layer) const {
  return ws_->kept + layer * max_kept_ * Workspace::kept_row(shape_);
}

void CudaBackend::attention_block(std::int64_t layer, std::int64_t T, const std::int32_t* pos,
                                  const std::int32_t* tiles, std::int64_t num_tiles) {
  const cudaStream_t s = compute_.get();
  const Workspace& w = *ws_;
  const DeviceLayer& l = weights_->layers[std::size_t(layer)];
  const LayerConfig& spec = config_.layers[std::size_t(layer)];
  const std::int64_t H = shape_.hidden, hd = shape_.head_dim, hq = shape_.heads, hkv = shape_.kv_heads;
  gemm_->linear(w.qkv, w.h, l.qkv.w, l.qkv.b, T, l.qkv.out, l.qkv.in, s);  // (T, (hq + 2 hkv) * hd)
  // Llama-4: RoPE on interleaved pairs then the weightless norm, or a NoPE layer with the temperature.
  using Rotation = kernels::QkRope::Rotation;
  const bool rope = spec.rope.has_value();
  const ModelConfig::Temperature& temp = config_.nope_temperature;
  kernels::qk_norm_rope(w.qkv, pos, T, hq, hkv, hd,
                        {.q_norm = l.q_norm,
                         .k_norm = l.k_norm,
                         .weight_offset = config_.norm_weight_offset,
                         .rotation = !rope                       ? Rotation::None
                                     : config_.rope_interleave ? Rotation::Interleaved
                                                               : Rotation::HalfSplit,
                         .rd = config_.rotary_dim,
                         .inv_freq = inv_freq(layer),
                         .attention_factor = rope_attention_factor_[std::size_t(layer)],
                         .l2_norm = rope && config_.qk_l2_norm,
                         .eps = float(config_.rms_norm_eps),
                         .temperature = !rope && temp.on,
                         .floor_scale = float(temp.floor_scale),
                         .attn_scale = float(temp.attn_scale)},
                        s);
  // Whole samples: keys and values straight from the projection.
  kernels::AttentionLayout a = kernels::fused_qkv_layout(w.qkv, hq, hkv, hd, config_.attention_scale());
  a.attended_pairs = attended_pairs_[std::size_t(layer)];
  a.sinks = l.sinks;
  a.chunk = spec.chunk;
  const ChunkRows& c = chunk_;
  const std::int64_t row = 2 * hkv * hd;  // a kept K | V row
  const std::size_t e = sizeof(__nv_bfloat16);
  __nv_bfloat16* kept = kept_rows(layer);
  const bool chunked = c.kept > 0 || c.keep;
  if (chunked) {
    // keys (kept + T, 2 hkv hd) = the sample in flight's kept K | V rows, then the batch's.
    if (c.kept > 0)
      LT_CUDA_CHECK(cudaMemcpyAsync(w.keys, kept, std::size_t(c.kept * row) * e, cudaMemcpyDeviceToDevice, s));
    LT_CUDA_CHECK(cudaMemcpy2DAsync(w.keys + c.kept * row, std::size_t(row) * e, w.qkv + hq * hd,
                                    std::size_t(a.q_row) * e, std::size_t(row) * e, std::size_t(T),
                                    cudaMemcpyDeviceToDevice, s));
    a.k = w.keys, a.k_row = row;
    a.v = w.keys + hkv * hd, a.v_row = row;
    a.key_offset = c.kept;
  }
  if (attention_ == AttentionKernel::Flash) {
    kernels::attention_flash(w.ctx, a, pos, tiles, num_tiles, T, spec.window, s);  // (T, hq * hd)
  } else {
    kernels::attention_reference(w.ctx, a, pos, T, spec.window, s);  // (T, hq * hd)
  }
  if (c.keep)  // the rows a later chunk of this sample attends to
    LT_CUDA_CHECK(cudaMemcpyAsync(kept + c.keep_at * row, w.keys + (c.kept + c.keep_from) * row,
                                  std::size_t((T - c.keep_from) * row) * e, cudaMemcpyDeviceToDevice, s));
  gemm_->linear(w.delta, w.ctx, l.o.w, l.o.b, T, H, l.o.in, s);  // (T, H) partial sum over this rank's heads
}

void CudaBackend::mla_block(std::int64_t layer, std::int64_t T, const std::int32_t* pos, const std::int32_t* tiles,
                            std::int64_t num_tiles) {
  const cudaStream_t s = compute_.get();
  const Workspace& w = *ws_;
  const DeviceMla& a = weights_->layers[std::size_t(layer)].mla;
  const std::int64_t H = shape_.hidden, nh = shape_.heads, qk = shape_.mla_qk(), nope = shape_.nope,
                     rd = shape_.rope_dim, vd = shape_.v_dim, ql = shape_.q_lora, kvl = shape_.kv_lora;
  const float latent_eps = float(MlaConfig::kLatentNormEps);
  // The key side spans the sample in flight's P kept positions, then the batch's T (P = 0 unless
  // the first segment continues a sample); kept per position: the normed latent and the rope key.
  const ChunkRows& c = chunk_;
  const std::int64_t P = c.kept, N = P + T;
  const std::size_t e = sizeof(__nv_bfloat16);
  __nv_bfloat16* kept_latent = max_kept_ > 0 ? kept_rows(layer) : nullptr;  // (K, kvl)
  __nv_bfloat16* kept_rope = max_kept_ > 0 ? kept_latent + max_kept_ * kvl : nullptr;  // (K, rd)
  if (ql > 0) {
    gemm_->linear(w.mla_qa, w.h, a.q_a.w, a.q_a.b, T, ql, H, s);                               // (T, q_lora)
    kernels::rmsnorm_rows(w.mla_qa, ql, w.mla_qa, ql, a.q_a_norm, latent_eps, T, ql, s);
    gemm_->linear(w.mla_q, w.mla_qa, a.q_b.w, nullptr, T, nh * qk, ql, s);                     // (T, nh * qk)
  } else {
    gemm_->linear(w.mla_q, w.h, a.q.w, nullptr, T, nh * qk, H, s);                             // (T, nh * qk)
  }
  gemm_->linear(w.mla_ckv, w.h, a.kv_a.w, a.kv_a.b, T, kvl + rd, H, s);                        // (T, kvl + rd)
  if (P > 0)
    LT_CUDA_CHECK(cudaMemcpyAsync(w.mla_latent, kept_latent, std::size_t(P * kvl) * e, cudaMemcpyDeviceToDevice, s));
  kernels::rmsnorm_rows(w.mla_latent + P * kvl, kvl, w.mla_ckv, kvl + rd, a.kv_a_norm, latent_eps, T, kvl,
                        s);  // (N, kvl): rows P.. the batch's
  // RoPE on the rope dims only: each head's last rd query values, and the one shared rope key.
  const float factor = rope_attention_factor_[std::size_t(layer)];
  kernels::rope_strided(w.mla_q, nh * qk, qk, nope, nh, rd, shape_.rope_interleave, pos, inv_freq(layer), factor, T,
                        s);
  kernels::rope_strided(w.mla_ckv, kvl + rd, 0, kvl, 1, rd, shape_.rope_interleave, pos, inv_freq(layer), factor, T,
                        s);
  gemm_->linear(w.mla_kv, w.mla_latent, a.kv_b.w, nullptr, N, nh * (nope + vd), kvl, s);     // (N, nh * (nope + v))
  if (P > 0) kernels::mla_assemble_kv(w.mla_k, w.mla_v, w.mla_kv, kept_rope, rd, P, nh, nope, rd, vd, s);
  kernels::mla_assemble_kv(w.mla_k + P * nh * qk, w.mla_v + P * nh * vd, w.mla_kv + P * nh * (nope + vd),
                           w.mla_ckv + kvl, kvl + rd, T, nh, nope, rd, vd, s);  // (N, nh * qk), (N, nh * v)
  kernels::AttentionLayout layout{w.mla_q, nh * qk, w.mla_k, nh * qk, w.mla_v, nh * vd,
                                  nh,      nh,      qk,      vd,      shape_.softmax_scale};
  layout.key_offset = P;
  layout.attended_pairs = attended_pairs_[std::size_t(layer)];
  if (attention_ == AttentionKernel::Flash) {
    kernels::attention_flash(w.ctx, layout, pos, tiles, num_tiles, T, 0, s);  // (T, nh * v)
  } else {
    kernels::attention_reference(w.ctx, layout, pos, T, 0, s);  // (T, nh * v)
  }
  if (c.keep) {  // the last segment's latents and rope keys, for the sample's next chunk
    const std::int64_t n = T - c.keep_from;
    LT_CUDA_CHECK(cudaMemcpyAsync(kept_latent + c.keep_at * kvl, w.mla_latent + (P + c.keep_from) * kvl,
                                  std::size_t(n * kvl) * e, cudaMemcpyDeviceToDevice, s));
    LT_CUDA_CHECK(cudaMemcpy2DAsync(kept_rope + c.keep_at * rd, std::size_t(rd) * e,
                                    w.mla_ckv + c.keep_from * (kvl + rd) + kvl, std::size_t(kvl + rd) * e,
                                    std::size_t(rd) * e, std::size_t(n), cudaMemcpyDeviceToDevice, s));
  }
  gemm_->linear(w.delta, w.ctx, a.o.w, a.o.b, T, H, nh * vd, s);  // (T, H) partial sum over this rank's heads
}

std::int64_t CudaBackend::routed_row_bound(std::int64_t T) const {
  const CudaProbe* probe = options_.probe;
  if (probe == nullptr || probe->assumed_expert_rows.empty()) return shape_.max_routed_rows(T);
  std::int64_t rows = 0;
  for (const std::int32_t r : probe->assumed_expert_rows) rows += r;
  return std::min(rows, shape_.max_routed_rows(T));
}

void CudaBackend::moe_block(const DeviceLayer& l, std::int64_t layer, std::int64_t T) {
  const cudaStream_t s = compute_.get();
  const Workspace& w = *ws_;
  const DeviceMoe& m = l.experts;
  const std::int64_t H = shape_.hidden, E = shape_.experts, k = shape_.top_k, n = shape_.local_experts,
                     Ie = shape_.expert_inter, Is = shape_.shared_inter;
  const std::int64_t moe_index = shape_.moe_layers_before(layer);
  const CudaProbe* probe = options_.probe;
  cost_scope(layer, "moe routing");
  if (probe != nullptr && !probe->forced_experts.empty()) {  // tests: the given choices (checked by apply_probe)
    const std::vector<std::int32_t>& fe = probe->forced_experts[std::size_t(layer)];
    const std::vector<float>& fw = probe->forced_weights[std::size_t(layer)];
    LT_CUDA_CHECK(cudaMemcpyAsync(w.route_experts, fe.data(), fe.size() * sizeof(std::int32_t), cudaMemcpyHostToDevice, s));
    LT_CUDA_CHECK(cudaMemcpyAsync(w.route_weights, fw.data(), fw.size() * sizeof(float), cudaMemcpyHostToDevice, s));
  } else {
    // Router logits (T, E) in float32: bf16 h times the bf16 router (plus its low part), float32 sums.
    gemm_->linear_f32(w.logits, w.h, m.router, T, E, H, false, s);
    if (m.router_lo != nullptr) gemm_->linear_f32(w.logits, w.h, m.router_lo, T, E, H, true, s);
    // The router's bias (GPT-OSS) or the benchmark's skew is added to the logits first (never both).
    kernels::moe_route(shape_.route, w.logits, w.choice, m.score_bias,
                       m.router_bias != nullptr ? m.router_bias : routing_skew_ ? w.logit_offset : nullptr,
                       w.route_experts, w.route_weights, T, s);
  }
  if (w.host_routes != nullptr)  // the record of the choices, on the host after the forward
    LT_CUDA_CHECK(cudaMemcpyAsync(w.host_routes + moe_index * T * k, w.route_experts,
                                  std::size_t(T * k) * sizeof(std::int32_t), cudaMemcpyDeviceToHost, s));
  // This rank's (token, choice) pairs grouped by expert; x_perm (rows, H) their inputs. The rows
  // are counted on the device; `bound` is what the host knows of them.
  const std::int64_t bound = routed_row_bound(T);
  kernels::moe_permute(w.route_experts, T, k, shape_.first_expert, n, w.counts, w.offsets, w.slot, w.perm_token, s);
  // Llama-4 weights each expert's input (bf16(h * w)) and sums the outputs unweighted.
  const bool weight_input = config_.moe->weight_input;
  kernels::moe_gather(w.x_perm, w.h, w.perm_token, w.offsets + n, bound, H, s, weight_input ? w.slot : nullptr,
                      weight_input ? w.route_weights : nullptr, weight_input ? k : 0);
  std::int32_t* host_counts = w.host_counts + moe_index * n;  // (n), this layer's
  // The expansion path needs the counts on the host (cuBLASLt shapes); the grouped one only for
  // the probe's figures, read after the forward.
  if (!shape_.experts_grouped || probe != nullptr)
    LT_CUDA_CHECK(cudaMemcpyAsync(host_counts, w.counts, std::size_t(n) * sizeof(std::int32_t), cudaMemcpyDeviceToHost, s));
  if (!shape_.experts_grouped) LT_CUDA_CHECK(cudaEventRecord(counts_ready_.get(), s));
  // The shared experts need no counts: queued first, they run while the host waits for them.
  cost_scope(layer, "moe shared experts");
  if (Is > 0) {
    gemm_->linear(w.gate_up, w.h, m.shared_gate_up.w, nullptr, T, 2 * Is, H, s);  // (T, 2 Is)
    kernels::swiglu(w.act, w.gate_up, T, Is, gate_activation(config_.activation), s);  // (T, Is)
    gemm_->linear(w.shared_out, w.act, m.shared_down.w, nullptr, T, H, Is, s);    // (T, H)
  }
  cost_scope(layer, "moe experts");
  if (shape_.experts_grouped) {
    // One launch per projection for all of the rank's experts, the weights read as stored.
    const GroupedLayer& g = grouped_->layer(layer);
    kernels::grouped_gemm(w.gu_perm, w.x_perm, w.offsets, n, bound, 2 * Ie, H, g.gate_up, s);  // (rows, 2 Ie)
    kernels::swiglu(w.act_perm, w.gu_perm, bound, Ie, gate_activation(config_.activation, shape_.experts_interleaved),
                    s, w.offsets + n);  // (rows, Ie)
    kernels::grouped_gemm(w.y_perm, w.act_perm, w.offsets, n, bound, H, Ie, g.down, s);         // (rows, H)
  } else {
    expanded_experts(l, layer, T, host_counts);
  }
  // delta (T, H) = sum over the pairs on this rank of weight * expert output, + the shared slice.
  cost_scope(layer, "moe combine");
  kernels::moe_combine(w.delta, w.y_perm, w.slot, weight_input ? nullptr : w.route_weights,
                       Is > 0 ? w.shared_out : nullptr, T, k, H, s);
}

void CudaBackend::expanded_experts(const DeviceLayer& l, std::int64_t layer, std::int64_t T,
                                   const std::int32_t* host_counts) {
  const cudaStream_t s = compute_.get();
  const Workspace& w = *ws_;
  const DeviceMoe& m = l.experts;
  const std::int64_t H = shape_.hidden, n = shape_.local_experts, Ie = shape_.expert_inter;
  const CudaProbe* probe = options_.probe;
  // The per-expert products need their row counts on the host (cuBLASLt shapes); a cost-only
  // forward assumes them (CudaProbe::cost_only).
  wait_for_event(counts_ready_.get(), comm_, options_.timeout_s, "MoE routing");
  const std::int32_t* counts = probe != nullptr && probe->cost_only ? probe->assumed_expert_rows.data() : host_counts;
  std::int64_t rows = 0;
  for (std::int64_t e = 0; e < n; ++e) rows += counts[e];
  LT_CHECK(rows <= shape_.max_routed_rows(T), "cuda backend: ", rows, " routed rows exceed the buffers' ",
           shape_.max_routed_rows(T));
  // A group of experts at a time (packed ones expanded into their slots of the scratch, the
  // previous group's overwritten: the stream orders it after that group's products).
  const std::int64_t group = weights_->sizes().expert_group > 0 ? weights_->sizes().expert_group : n;
  std::int64_t r0 = 0;  // first row of the group
  for (std::int64_t e0 = 0; e0 < n; e0 += group) {
    const std::int64_t e1 = std::min(n, e0 + group);
    std::int64_t r1 = r0;
    for (std::int64_t e = e0; e < e1; ++e) r1 += counts[e];
    if (r1 == r0) continue;  // no token chose these experts: nothing to expand or multiply
    weights_->dequantize_experts(layer, e0, e1, s);
    for (std::int64_t e = e0, r = r0; e < e1; r += counts[e], ++e)
      if (counts[e] > 0)
        gemm_->linear(w.gu_perm + r * 2 * Ie, w.x_perm + r * H, m.gate_up[std::size_t(e)].w,
                      m.gate_up[std::size_t(e)].b, counts[e], 2 * Ie, H, s);  // (c, 2 Ie)
    kernels::swiglu(w.act_perm + r0 * Ie, w.gu_perm + r0 * 2 * Ie, r1 - r0, Ie,
                    gate_activation(config_.activation, shape_.experts_interleaved), s);  // (rows of the group, Ie)
    for (std::int64_t e = e0, r = r0; e < e1; r += counts[e], ++e)
      if (counts[e] > 0)
        gemm_->linear(w.y_perm + r * H, w.act_perm + r * Ie, m.down[std::size_t(e)].w, m.down[std::size_t(e)].b,
                      counts[e], H, Ie, s);  // (c, H); GPT-OSS's expert biases in the epilogues
    r0 = r1;
  }
}

void CudaBackend::mlp_block(const DeviceLayer& l, std::int64_t T) {
  const cudaStream_t s = compute_.get();
  const Workspace& w = *ws_;
  const std::int64_t H = shape_.hidden, I = shape_.inter;
  gemm_->linear(w.gate_up, w.h, l.gate_up.w, l.gate_up.b, T, 2 * I, H, s);  // (T, 2I)
  kernels::swiglu(w.act, w.gate_up, T, I, gate_activation(config_.activation), s);  // (T, I)
  gemm_->linear(w.delta, w.act, l.down.w, l.down.b, T, H, I, s);            // (T, H) partial sum
}

// delta (T, H) summed over the tensor-parallel group: the end of every sub-layer, whose blocks
// leave their rank's partial sum there.
void CudaBackend::sum_over_ranks(std::int64_t T) {
  if (comm_.size() > 1) comm_.all_reduce_sum_bf16(ws_->delta, T * shape_.hidden, compute_.get());
}

void CudaBackend::run_layers(std::int64_t T, const std::int32_t* pos, const std::int32_t* tiles,
                             std::int64_t num_tiles) {
  const cudaStream_t s = compute_.get();
  const Workspace& w = *ws_;
  const std::int64_t H = shape_.hidden, L = shape_.layers;
  const float eps = float(config_.rms_norm_eps), offset = config_.norm_weight_offset;
  const bool timed = !layer_events_.empty();
  // Sandwich norms (Gemma-3): the sub-layer's output (delta, all-reduced) normed in place before
  // the residual add that the next fused norm makes.
  const auto post_norm = [&](const __nv_bfloat16* weight) {
    if (weight != nullptr) kernels::rmsnorm_rows(w.delta, H, w.delta, H, weight, eps, T, H, s, offset);
  };
  for (std::int64_t i = 0; i < L; ++i) {
    const DeviceLayer& l = weights_->layers[std::size_t(i)];
    if (timed) LT_CUDA_CHECK(cudaEventRecord(layer_events_[std::size_t(i)].get(), s));
    cost_scope(i, "dequantize");
    weights_->dequantize(i, s);  // layer i's packed Linears into the bf16 scratch (none: nothing)
    // x (T, H) += the previous layer's FFN output: x is now the input of layer i; h = norm(x).
    cost_scope(i, "attention");
    if (i > 0) post_norm(weights_->layers[std::size_t(i - 1)].post_ffn_norm);
    kernels::fused_residual_rmsnorm(w.h, w.x, i == 0 ? nullptr : w.delta, l.input_norm, eps, T, H, s, offset);
    stager_->capture(i, w.x, /*overwritten_later=*/true, s);
    if (shape_.mla)
      mla_block(i, T, pos, tiles, num_tiles);
    else
      attention_block(i, T, pos, tiles, num_tiles);
    sum_over_ranks(T);  // each rank's heads' share of o_proj
    cost_scope(i, l.moe ? "moe routing" : "mlp");
    post_norm(l.post_attn_norm);
    kernels::fused_residual_rmsnorm(w.h, w.x, w.delta, l.pre_ffn_norm, eps, T, H, s, offset);
    if (l.moe)
      moe_block(l, i, T);
    else
      mlp_block(l, T);
    sum_over_ranks(T);  // each rank's experts' or intermediate slice's share
  }
  cost_scope(-1, "final norm");
  if (timed) LT_CUDA_CHECK(cudaEventRecord(layer_events_[std::size_t(L)].get(), s));
  // x = output of the last layer (point L), h = after the final norm (point L + 1); neither is
  // written again in this batch, so both are copied to the host without a snapshot.
  post_norm(weights_->layers[std::size_t(L - 1)].post_ffn_norm);
  kernels::fused_residual_rmsnorm(w.h, w.x, w.delta, weights_->final_norm, eps, T, H, s, offset);
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
  // Chunked prefill: the first segment continues the sample in flight; the last may be continued.
  LT_CHECK(batch.first_position == kept_positions_, "chunked prefill: the batch continues a sample at position ",
           batch.first_position, " but ", kept_positions_, " positions of the sample in flight are kept");
  const std::int64_t last = batch.offsets[std::size_t(batch.num_samples() - 1)];
  const std::int64_t keep_at = batch.num_samples() == 1 ? batch.first_position : 0;
  const std::int64_t kept_after = batch.last_continues ? keep_at + T - last : 0;
  LT_CHECK(kept_after <= max_kept_, "chunked prefill: a sample continues past position ", kept_after,
           " but the CUDA backend keeps at most ", max_kept_, " positions (max_sample_tokens ",
           options_.max_sample_tokens, " with max_batch_tokens ", options_.max_batch_tokens, ")");
  LT_CHECK(T > 0 && T <= options_.max_batch_tokens, "batch of ", T, " tokens; the CUDA backend was built for 1..",
           options_.max_batch_tokens, " (max_batch_tokens)");
  const bool capturing = comm_.rank() == 0;  // the writing rank; the others hold no capture buffers
  LT_CHECK(!capturing || distinct_points(plan) <= std::size_t(options_.max_capture_points), "capture plan '",
           plan.request, "' has ", distinct_points(plan), " distinct points; the CUDA backend was built for at most ",
           options_.max_capture_points, " (max_capture_points)");
  cost_scope(-1, "batch and embedding");
  apply_probe(T);
  stager_->begin(capturing ? &plan : nullptr, T);
  chunk_ = ChunkRows{batch.first_position, batch.last_continues, last, keep_at};
  kept_positions_ = 0;  // until this batch has run: after a failure, only a new sample may start
  // The batch's attended (query, key) pairs per layer, by the layer's window and chunk (MLA: none),
  // for the attention launches' stated work; each distinct mask counted once.
  attended_pairs_.resize(std::size_t(L));
  std::vector<std::pair<std::pair<std::int64_t, std::int64_t>, std::int64_t>> by_mask;  // ((window, chunk), pairs)
  for (std::int64_t i = 0; i < L; ++i) {
    const std::pair<std::int64_t, std::int64_t> mask =
        shape_.mla ? std::pair<std::int64_t, std::int64_t>{0, 0}
                   : std::pair{config_.layers[std::size_t(i)].window, config_.layers[std::size_t(i)].chunk};
    auto it = std::find_if(by_mask.begin(), by_mask.end(), [&](const auto& p) { return p.first == mask; });
    if (it == by_mask.end())
      it = by_mask.insert(by_mask.end(), {mask, kernels::count_attended_pairs(batch.offsets, batch.first_position,
                                                                             mask.first, mask.second)});
    attended_pairs_[std::size_t(i)] = it->second;
  }

  // Batch metadata, packed from the front of one pinned buffer, goes over in one copy:
  // ids (T) | pos (T) | flash tiles (num_tiles, 2).
  const Workspace& w = *ws_;
  const cudaStream_t s = compute_.get();
  std::int32_t* hm = w.host_meta;
  std::memcpy(hm, batch.tokens.data(), std::size_t(T) * sizeof(std::int32_t));
  for (std::size_t smp = 0; smp + 1 < batch.offsets.size(); ++smp)
    for (std::int64_t t = batch.offsets[smp]; t < batch.offsets[smp + 1]; ++t)
      hm[T + t] = static_cast<std::int32_t>(t - batch.offsets[smp] + (smp == 0 ? batch.first_position : 0));
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
  kernels::embedding_lookup(w.x, ids, weights_->embed, T, H, shape_.vocab, w.bad_token, s,
                            config_.embed_scale);  // (T, H)
  run_layers(T, pos, tiles, num_tiles);
  LT_CUDA_CHECK(cudaMemcpyAsync(w.host_bad_token, w.bad_token, sizeof(std::int32_t), cudaMemcpyDeviceToHost, s));
  stager_->end_batch(s);

  std::vector<std::vector<std::byte>> states;
  if (capturing) states = stager_->collect(dtype, comm_, options_.timeout_s, options_.host_copy_threads);
  wait_for_event(stager_->done(), comm_, options_.timeout_s, "forward pass");  // already done when collect waited
  if (options_.probe != nullptr && !options_.probe->cost_only) {  // each MoE layer's expert load
    for (std::int64_t i = 0; i < L; ++i) {
      if (!shape_.moe_layer[std::size_t(i)]) continue;
      const std::int32_t* c = w.host_counts + shape_.moe_layers_before(i) * shape_.local_experts;
      options_.probe->moe_rows[std::size_t(i)] = std::accumulate(c, c + shape_.local_experts, std::int64_t(0));
      options_.probe->moe_busiest[std::size_t(i)] = *std::max_element(c, c + shape_.local_experts);
    }
  }
  if (!layer_events_.empty() && options_.probe != nullptr) {
    std::vector<float>& ms = options_.probe->layer_ms;
    ms.assign(std::size_t(L), 0.0f);
    for (std::int64_t i = 0; i < L; ++i)
      LT_CUDA_CHECK(cudaEventElapsedTime(&ms[std::size_t(i)], layer_events_[std::size_t(i)].get(),
                                         layer_events_[std::size_t(i + 1)].get()));
  }
  cost_scope(-1, "");
  last_tokens_ = T;
  if (options_.probe != nullptr && options_.probe->cost_only) return states;  // nothing read back is meaningful
  const std::int32_t bad = *w.host_bad_token;
  LT_CHECK(bad >= T, "token id ", batch.tokens[std::size_t(std::max(bad, 0))], " at batch position ", bad,
           " is outside the vocabulary of ", shape_.vocab);
  kept_positions_ = kept_after;
  return states;
}

void CudaBackend::set_result_pool(BufferPool* pool) { stager_->set_pool(pool); }

std::vector<std::int16_t> CudaBackend::routed_experts() const {
  if (!ws_ || ws_->host_routes == nullptr || last_tokens_ == 0) return {};
  const std::int64_t M = shape_.moe_layers_before(shape_.layers);
  const std::int64_t T = last_tokens_, k = shape_.top_k;
  std::vector<std::vector<std::int32_t>> per_layer(static_cast<std::size_t>(M));  // [M][T * k], as moe_block copied them
  for (std::int64_t m = 0; m < M; ++m)
    per_layer[std::size_t(m)].assign(ws_->host_routes + m * T * k, ws_->host_routes + (m + 1) * T * k);
  return token_major_routing(per_layer, T, k);
}

}  // namespace layertap::cuda
