// The bf16 CUDA backend: one GPU per rank, this tensor-parallel rank's weights resident in bf16
// (quantized ones packed as the checkpoint stores them, expanded per layer into a bf16 scratch),
// cuBLASLt for the products, the kernels of kernels/ for the rest (GQA or MLA attention, dense or
// MoE FFN), tensor-parallel all-reduces through a DeviceAllReduce (NCCL), captured states copied
// to pinned host memory on a second stream while the following layers run; a sample longer than a
// batch runs in chunks, its earlier chunks' keys and values kept on the device. See docs/GPU.md.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend/backend.hpp"
#include "backend/cuda/capture_stager.hpp"
#include "backend/cuda/cuda_options.hpp"
#include "backend/cuda/cuda_resources.hpp"
#include "backend/cuda/device_all_reduce.hpp"
#include "backend/cuda/device_weights.hpp"
#include "backend/cuda/gemm.hpp"
#include "backend/cuda/grouped_experts.hpp"
#include "backend/cuda/local_shape.hpp"
#include "backend/cuda/memory_plan.hpp"
#include "backend/cuda/weight_loader.hpp"
#include "backend/cuda/workspace.hpp"
#include "core/backend_names.hpp"
#include "model/hf_config.hpp"
#include "model/weights.hpp"

namespace layertap::cuda {

class CudaBackend final : public Backend {
 public:
  // The model on the current device (select it first, e.g. select_device(rank_device(...))),
  // from this rank's float32 host slices: load_weights(ckpt, config, TpShard{comm.rank(), comm.size()}).
  // The host weights may be dropped afterwards. Throws layertap::Error, before allocating, when
  // weights + workspace do not fit in the device's free memory (see check_fits).
  // Every Linear is held in bf16 (a quantized checkpoint's decoded values, rounded to bf16).
  CudaBackend(const ModelConfig& config, const ModelWeights& weights, DeviceAllReduce& comm,
              CudaBackendOptions options = {});
  // This rank's slice read from `ckpt` in its stored form (load_plan.hpp, weight_loader.hpp): bf16
  // as stored, fp16/fp32 rounded to bf16, quantized Linears (FP8 blocks, INT4 groups) packed and
  // expanded per layer into the bf16 scratch; the same bf16 values as the constructor above, and no
  // float32 copy of any weight on the host. Throws before reading when the plan does not fit.
  CudaBackend(const ModelConfig& config, const Checkpoint& ckpt, DeviceAllReduce& comm, CudaBackendOptions options = {});
  // Seeded random weights made on the current device (benchmark, tests); a quantized config's
  // Linears are made packed (see PackedSource::Config).
  static std::unique_ptr<CudaBackend> synthetic(const ModelConfig& config, DeviceAllReduce& comm,
                                                CudaBackendOptions options, std::uint64_t seed);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return std::string(kCudaBackend); }
  // Backend::forward; a plan without points runs the forward pass alone (benchmark baseline).
  // Every rank of the tensor-parallel group must call it with the same batch.
  std::vector<std::vector<std::byte>> forward(const PackedBatch& batch, const CapturePlan& plan,
                                              DType dtype) override;
  std::vector<std::int16_t> routed_experts() const override;
  void set_result_pool(BufferPool* pool) override;

  // One line for the log: device, kernels, tensor-parallel rank, memory.
  std::string description() const;
  const LocalShape& shape() const { return shape_; }
  const DeviceWeights& weights() const { return *weights_; }
  AttentionKernel attention() const { return attention_; }  // Reference or Flash, never Auto
  const MemoryPlan& memory() const { return memory_; }
  const LoadStats& load_stats() const { return load_stats_; }  // the checkpoint constructor's load

 private:
  CudaBackend(const ModelConfig& config, DeviceAllReduce& comm, CudaBackendOptions options, const ModelWeights* host,
              const Checkpoint* ckpt, std::uint64_t seed);
  // The decoder layers and the final norm over the batch in ws_->x (T, H). Each sub-layer's block
  // leaves this rank's partial sum in delta; the loop sums it over the group (sum_over_ranks).
  void run_layers(std::int64_t T, const std::int32_t* pos, const std::int32_t* tiles, std::int64_t num_tiles);
  void sum_over_ranks(std::int64_t T);
  // delta (T, H) = o_proj(attention(qkv_proj(h))) of decoder layer `layer`, this rank's heads
  void attention_block(std::int64_t layer, std::int64_t T, const std::int32_t* pos, const std::int32_t* tiles,
                       std::int64_t num_tiles);
  // delta (T, H) = o_proj(attention(MLA projections of h)) of decoder layer `layer`, this rank's heads
  void mla_block(std::int64_t layer, std::int64_t T, const std::int32_t* pos, const std::int32_t* tiles,
                 std::int64_t num_tiles);
  // Layer `layer`'s kept rows of the sample in flight (Workspace::kept).
  __nv_bfloat16* kept_rows(std::int64_t layer) const;
  // delta (T, H) = down_proj(swiglu(gate_up_proj(h))), this rank's intermediate slice
  void mlp_block(const DeviceLayer& l, std::int64_t T);
  // delta (T, H) = this rank's routed experts, weighted, + its shared-expert slice
  void moe_block(const DeviceLayer& l, std::int64_t layer, std::int64_t T);
  // The reference path of a MoE layer's routed experts: a group of packed experts at a time expanded
  // to bf16, one cuBLASLt product per expert and projection, after waiting for `host_counts`.
  void expanded_experts(const DeviceLayer& l, std::int64_t layer, std::int64_t T, const std::int32_t* host_counts);
  // What the host knows of a MoE layer's routed rows on this rank: the worst case, or the rows a
  // probe says every layer takes (cost-only forwards, tests that force such a routing).
  std::int64_t routed_row_bound(std::int64_t T) const;
  // options.probe's routing hooks, checked against the model and batch, before a forward.
  void apply_probe(std::int64_t T);

  ModelConfig config_;
  DeviceAllReduce& comm_;
  CudaBackendOptions options_;
  int device_ = 0;
  LocalShape shape_;
  MemoryPlan memory_;
  AttentionKernel attention_ = AttentionKernel::Reference;
  Stream compute_;
  std::optional<DeviceWeights> weights_;
  std::optional<GroupedExperts> grouped_;  // the experts' tables, when shape_.experts_grouped
  LoadStats load_stats_;
  std::optional<Workspace> ws_;
  std::unique_ptr<Gemm> gemm_;
  std::unique_ptr<CaptureStager> stager_;
  std::vector<float> rope_attention_factor_;  // [L] YaRN's factor on cos and sin; 1 otherwise
  const float* inv_freq(std::int64_t layer) const { return ws_->inv_freq + layer * shape_.rope_freqs(); }
  bool routing_skew_ = false;  // this forward adds the probe's routing skew (ws_->logit_offset)
  // Chunked prefill (model/packed_batch.hpp). The current batch's keys follow `kept` rows of the
  // sample in flight (its first segment continues at position `kept`); with `keep`, its rows from
  // `keep_from` on (the last segment's) are kept for the next batch, at position `keep_at` on.
  struct ChunkRows {
    std::int64_t kept = 0;
    bool keep = false;
    std::int64_t keep_from = 0, keep_at = 0;
  };
  ChunkRows chunk_;
  std::int64_t max_kept_ = 0;        // positions the workspace keeps (max_kept_positions)
  std::int64_t kept_positions_ = 0;  // positions of the sample in flight kept now
  std::vector<std::int64_t> attended_pairs_;  // [L] the batch's attended (query, key) pairs per head (stated work)
  Event counts_ready_;
  std::int64_t last_tokens_ = 0;     // T of the last forward (its routing record's rows)
  std::vector<Event> layer_events_;  // (L + 1) timing events with options.profile_layers
};

}  // namespace layertap::cuda
