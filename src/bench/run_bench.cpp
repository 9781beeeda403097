#include "bench/run_bench.hpp"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/device.hpp"
#include "backend/cuda/memory_plan.hpp"
#include "bench/measure.hpp"
#include "bench/model_catalog.hpp"
#include "bench/projection.hpp"
#include "bench/result_check.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/text.hpp"
#include "kernels/cuda_check.hpp"
#include "kernels/device_info.hpp"
#include "model/capture.hpp"

namespace layertap {

namespace {

// What the dense and the MoE report share: the model as built, its capture plans, the backend.
struct Run {
  const BenchOptions& o;
  std::ostream& out;
  const ModelConfig& full_cfg;  // the model with all its layers
  const ModelConfig& cfg;       // the layers built
  const CapturePlan& plan;      // o.capture
  const CapturePlan& none;      // no points: the forward pass alone
  cuda::CudaBackend& backend;
  const ReferenceChecks& checks;  // each configuration's error against the CPU backend
  BufferPool& results;            // the states' buffers, given back after each forward as the job's writer does
};

#if defined(LAYERTAP_CUDA_SIM)
// On the simulated GPU (LAYERTAP_CUDA_SIM builds) wall-clock times are the simulator's and say
// nothing of a GPU's: per configuration the bench prints the simulated counts of one forward and
// its reference check, and no time or rate (`--project` projects them from the calls).
void run_simulated(const Run& run, cuda::CudaProbe& probe) {
  const BenchOptions& o = run.o;
  std::ostream& out = run.out;
  const cuda::LocalShape& shape = run.backend.shape();
  const std::vector<std::string> routings = shape.any_moe() ? o.routing : std::vector<std::string>{""};
  out << " routing    | tokens | ref. error\n";
  for (const std::string& routing : routings) {
    probe.routing_skew = routing == "zipf" ? zipf_logit_offsets(shape.experts, o.zipf_s) : std::vector<float>{};
    for (const std::int64_t T : o.tokens) {
      const PackedBatch batch = random_batch(T, o.sample_tokens, run.cfg.vocab_size, o.seed + std::uint64_t(T));
      print_simulated_counts(out, cat(routing.empty() ? "" : routing + " routing, ", "T=", T, ", with capture"),
                             [&] { run.results.give(run.backend.forward(batch, run.plan, DType::BF16)); });
      out << "check " << (routing.empty() ? "" : routing + " routing, ") << "T=" << T << ": "
          << check_forward(run.backend, batch, run.plan, cat("synthetic ", o.model, ", T=", T)) << "\n";
      char line[160];
      std::snprintf(line, sizeof line, " %-10s | %6lld | %s\n", routing.empty() ? "-" : routing.c_str(),
                    static_cast<long long>(T), run.checks.error_text(routing, T).c_str());
      out << line;
    }
  }
  out << "\nSimulated GPU: its wall-clock times are the simulator's, not a GPU's, and are not printed; `layertap "
         "bench --project h200,b200,rtx-pro-6000` projects a forward's time from its calls (a model).\n";
}
#endif

// Dense: per batch size, the forward without and with capture, the GEMM rates on the model's
// product shapes, and tokens/s against the GEMM-bound limit.
void run_dense(const Run& run) {
  const BenchOptions& o = run.o;
  std::ostream& out = run.out;
  cuda::CudaBackend& backend = run.backend;
  const std::int64_t params = backend.shape().layer_matmul_params();
  struct Row {
    std::int64_t T;
    double plain, captured, gemm;
    GemmRates rates;
    std::string check;  // reference error
  };
  std::vector<Row> rows;
  for (const std::int64_t T : o.tokens) {
    const PackedBatch batch = random_batch(T, o.sample_tokens, run.cfg.vocab_size, o.seed + std::uint64_t(T));
    const auto plain = [&] { (void)backend.forward(batch, run.none, DType::BF16); };
    const auto captured = [&] { run.results.give(backend.forward(batch, run.plan, DType::BF16)); };
    for (int i = 0; i < o.warmup; ++i) {
      plain();
      captured();
    }
    print_simulated_counts(out, cat("T=", T, ", with capture"), captured);
    out << "check T=" << T << ": "
        << check_forward(backend, batch, run.plan, cat("synthetic ", o.model, ", T=", T)) << "\n";
    std::vector<double> t_plain, t_captured;
    for (int i = 0; i < o.iters; ++i) {  // interleaved: drift in clocks affects both modes alike
      t_plain.push_back(seconds_of(plain));
      t_captured.push_back(seconds_of(captured));
    }
    Row r{T, double(T) / median_of(t_plain), double(T) / median_of(t_captured), 0,
          measure_gemm(backend, T, o.gemm_iters), run.checks.error_text("", T)};
    r.gemm = r.rates.overall;
    rows.push_back(r);
    out << "T=" << T << ": forward " << fixed(median_of(t_plain) * 1e3, 2) << " ms, with capture "
        << fixed(median_of(t_captured) * 1e3, 2) << " ms; GEMM TFLOP/s qkv " << fixed(r.rates.tflops["qkv"], 1)
        << ", o " << fixed(r.rates.tflops["o"], 1) << ", gate_up " << fixed(r.rates.tflops["gate_up"], 1)
        << ", down " << fixed(r.rates.tflops["down"], 1) << "\n";
  }
  out << "\n tokens | no capture tok/s | capture tok/s | overhead | GEMM TFLOP/s | GEMM-bound tok/s | "
         "fraction (no capture) | fraction (capture) | ref. error\n";
  for (const Row& r : rows) {
    const double limit = r.gemm * 1e12 / (2.0 * double(params));
    char line[256];
    std::snprintf(line, sizeof line, " %6lld | %16.0f | %13.0f | %7.2f%% | %12.1f | %16.0f | %21.3f | %18.3f | %s\n",
                  static_cast<long long>(r.T), r.plain, r.captured, 100.0 * (r.plain / r.captured - 1.0), r.gemm,
                  limit, r.plain / limit, r.captured / limit, r.check.c_str());
    out << line;
  }
  out << "\noverhead = time with capture / time without - 1. GEMM-bound tok/s = measured GEMM rate / (2 x "
         "matmul params). Capture = device-to-host copies of the points into the returned vectors, whose buffers "
         "go round as the job's writer gives them back (no file writing).\n";
}

// MoE: per routing and batch size, the rank's forward with and without capture, its per-layer
// times, the load on its experts; then the whole model's forward (scaled to every layer when
// fewer were built) and the group's projection.
void run_moe(const Run& run, cuda::CudaProbe& probe, ModelledAllReduce& comm) {
  const BenchOptions& o = run.o;
  std::ostream& out = run.out;
  const ModelConfig& cfg = run.cfg;
  const ModelConfig& full_cfg = run.full_cfg;
  cuda::CudaBackend& backend = run.backend;
  const cuda::LocalShape& shape = backend.shape();
  struct Row {
    std::string routing;
    std::int64_t T = 0;
    double plain_ms = 0, captured_ms = 0;    // built layers, measured
    double dense_ms = 0, moe_ms = 0, moe_min = 0, moe_max = 0;  // mean per layer
    double full_ms = 0, full_captured_ms = 0;  // every layer of the model
    double rows = 0, busiest = 0;            // mean per MoE layer
    std::string check;                       // reference error
  };
  std::vector<Row> rows;
  std::int64_t full_dense = 0, full_moe = 0;
  for (std::int64_t i = 0; i < full_cfg.num_layers; ++i) (full_cfg.is_moe_layer(i) ? full_moe : full_dense) += 1;
  const std::int64_t per_forward_allreduces = 2 * cfg.num_layers;
  for (const std::string& routing : o.routing) {
    probe.routing_skew = routing == "zipf" ? zipf_logit_offsets(shape.experts, o.zipf_s) : std::vector<float>{};
    const std::string label = routing == "zipf" ? cat("zipf(", fixed(o.zipf_s, 2), ")") : routing;
    for (const std::int64_t T : o.tokens) {
      const PackedBatch batch = random_batch(T, o.sample_tokens, cfg.vocab_size, o.seed + std::uint64_t(T));
      std::vector<double> layer_sum(std::size_t(cfg.num_layers), 0.0);
      const auto plain = [&] {
        (void)backend.forward(batch, run.none, DType::BF16);
        for (std::size_t i = 0; i < layer_sum.size(); ++i) layer_sum[i] += probe.layer_ms[i];
      };
      const auto captured = [&] { run.results.give(backend.forward(batch, run.plan, DType::BF16)); };
      for (int i = 0; i < o.warmup; ++i) {
        plain();
        captured();
      }
      print_simulated_counts(out, cat(routing, " routing, T=", T, ", with capture; the group's all-reduces are modelled"),
                             captured);
      out << "check " << routing << " routing, T=" << T << ": "
          << check_forward(backend, batch, run.plan,
                           cat("synthetic ", o.model, " rank ", o.tp_rank, " of ", o.tp_shard, ", routing ", label,
                               ", T=", T))
          << "\n";
      std::fill(layer_sum.begin(), layer_sum.end(), 0.0);
      comm.calls = 0;
      std::vector<double> t_plain, t_captured;
      for (int i = 0; i < o.iters; ++i) {
        t_plain.push_back(seconds_of(plain));
        t_captured.push_back(seconds_of(captured));
      }
      Row r;
      r.routing = label;
      r.T = T;
      r.check = run.checks.error_text(routing, T);
      r.plain_ms = median_of(t_plain) * 1e3;
      r.captured_ms = median_of(t_captured) * 1e3;
      std::vector<double> dense, moe_layers, moe_rows, busiest;
      double layers_total = 0;
      for (std::int64_t i = 0; i < cfg.num_layers; ++i) {
        const double ms = layer_sum[std::size_t(i)] / o.iters;
        layers_total += ms;
        if (cfg.is_moe_layer(i)) {
          moe_layers.push_back(ms);
          moe_rows.push_back(double(probe.moe_rows[std::size_t(i)]));
          busiest.push_back(double(probe.moe_busiest[std::size_t(i)]));
        } else {
          dense.push_back(ms);
        }
      }
      r.dense_ms = mean_of(dense);
      r.moe_ms = mean_of(moe_layers);
      r.moe_min = moe_layers.empty() ? 0 : *std::min_element(moe_layers.begin(), moe_layers.end());
      r.moe_max = moe_layers.empty() ? 0 : *std::max_element(moe_layers.begin(), moe_layers.end());
      r.rows = mean_of(moe_rows);
      r.busiest = mean_of(busiest);
      // Outside the layers: embedding, final norm, metadata, the host's share.
      const double other = std::max(0.0, r.plain_ms - layers_total);
      r.full_ms = cfg.num_layers == full_cfg.num_layers
                      ? r.plain_ms
                      : other + double(full_dense) * r.dense_ms + double(full_moe) * r.moe_ms;
      r.full_captured_ms = r.full_ms + (r.captured_ms - r.plain_ms);
      rows.push_back(r);
      const double uniform_rows = double(T) * double(shape.top_k) * double(shape.local_experts) / double(shape.experts);
      out << "routing " << r.routing << ", " << T << " tokens: forward " << fixed(r.plain_ms, 2) << " ms, with capture "
          << fixed(r.captured_ms, 2) << " ms (" << cfg.num_layers << " layers, " << comm.calls / (2 * o.iters)
          << " all-reduces per forward, modelled); layers: dense " << fixed(r.dense_ms, 3) << " ms, MoE mean "
          << fixed(r.moe_ms, 3) << " (min " << fixed(r.moe_min, 3) << ", max " << fixed(r.moe_max, 3)
          << ") ms; (token, expert) rows on this rank's experts per MoE layer " << fixed(r.rows, 0)
          << " (uniform share " << fixed(uniform_rows, 0) << "), busiest expert " << fixed(r.busiest, 0)
          << " rows (mean " << fixed(r.rows / double(shape.local_experts), 0) << ")\n";
    }
  }

  out << "\n per-layer | routing    | tokens | dense layer ms | dense tok/s | MoE layer ms | MoE tok/s | forward ms ("
      << full_cfg.num_layers << " layers) | rank tok/s | capture overhead | ref. error\n";
  for (const Row& r : rows) {
    char line[320];
    std::snprintf(line, sizeof line, " per-layer | %-10s | %6lld | %14.3f | %11.0f | %12.3f | %9.0f | %*.1f | %10.0f | %15.2f%% | %s\n",
                  r.routing.c_str(), static_cast<long long>(r.T), r.dense_ms,
                  r.dense_ms > 0 ? double(r.T) / (r.dense_ms * 1e-3) : 0.0, r.moe_ms,
                  r.moe_ms > 0 ? double(r.T) / (r.moe_ms * 1e-3) : 0.0,
                  int(cat("forward ms (", full_cfg.num_layers, " layers)").size()), r.full_ms,
                  double(r.T) / (r.full_ms * 1e-3), 100.0 * (r.captured_ms / r.plain_ms - 1.0), r.check.c_str());
    out << line;
  }
  out << "\n projection | routing    | tokens | bus                 | GB/s  | all-reduce ms | x " << 2 * full_cfg.num_layers
      << " | step ms | " << o.tp_shard << "-GPU tok/s | vs baseline " << fixed(o.baseline, 0) << " tok/s\n";
  for (const Row& r : rows) {
    for (const double bus : o.bus_gbs) {
      const TpProjection p = project_tp(r.T, cfg.hidden_size, full_cfg.num_layers, o.tp_shard, bus, r.full_captured_ms);
      char line[320];
      std::snprintf(line, sizeof line, " projection | %-10s | %6lld | %-19s | %5.0f | %13.3f | %*.1f | %7.1f | %*.0f | %8.2fx\n",
                    r.routing.c_str(), static_cast<long long>(r.T), bus_label(bus), bus, p.allreduce_ms,
                    int(cat("x ", 2 * full_cfg.num_layers).size()), 2.0 * double(full_cfg.num_layers) * p.allreduce_ms,
                    p.step_ms, int(cat(o.tp_shard, "-GPU tok/s").size()), p.tokens_per_s, p.tokens_per_s / o.baseline);
      out << line;
    }
  }
  out << "\nThe rank runs its share of a " << o.tp_shard << "-GPU tensor-parallel group (" << shape.heads
      << " heads, experts " << shape.first_expert << ".." << shape.first_expert + shape.local_experts - 1
      << ", 1/" << o.tp_shard << " of the dense and shared MLPs) on the whole batch; its " << per_forward_allreduces
      << " all-reduces per forward are not run but modelled: each moves (tokens x " << cfg.hidden_size
      << ") bf16 and takes 2 (n - 1) / n x bytes / bus bandwidth, not overlapped with compute; the group's step is "
         "the rank's forward with capture plus all of them, and its tokens/s is tokens / step (every rank works on "
         "the same batch). Zipf routing puts the hottest experts on rank 0, the busiest rank, which sets the "
         "group's step. Per-layer times include the expansion of packed expert weights into the bf16 scratch. The "
         "baseline ("
      << fixed(o.baseline, 0)
      << " tok/s) is the published figure for Kimi-K2.5 capture on 8 RTX PRO 6000 Blackwell GPUs (PCIe, vLLM "
         "with a patched capture worker).\n";
}

}  // namespace

std::int64_t layers_that_fit(const std::string& model, const TpShard& shard, const cuda::CudaBackendOptions& bo,
                             std::size_t free_bytes) {
  const std::int64_t full = synthetic_model_config(model).num_layers;
  for (std::int64_t L = full; L >= 2; --L) {
    const cuda::LocalShape s = cuda::LocalShape::of(synthetic_model_config(model, L), shard, cuda::PackedSource::Config);
    if (cuda::device_bytes_needed(cuda::plan_memory(s, bo)) <= free_bytes) return L;
  }
  return 0;
}

int run_bench(const BenchOptions& o, std::ostream& out) {
  const int devices = cuda::visible_device_count();
  LT_CHECK(devices > o.device, "bench: GPU ", o.device, " is not visible (", devices, " CUDA device(s))");
  cuda::select_device(o.device);
  const ModelConfig full_cfg = synthetic_model_config(o.model);
  const TpShard shard{o.tp_rank, o.tp_shard, parse_moe_split(o.moe_split)};
  const bool moe = full_cfg.moe.has_value();

  cuda::CudaBackendOptions bo;
  bo.max_batch_tokens = *std::max_element(o.tokens.begin(), o.tokens.end());
  bo.max_capture_points = std::int64_t(resolve_capture(o.capture, full_cfg.num_layers).points.size());
  bo.attention = cuda::parse_attention_kernel(o.attention);
  bo.experts = cuda::parse_expert_kernel(o.experts);
  bo.moe_split = shard.moe_split;
  bo.profile_layers = moe;
  cuda::CudaProbe probe;  // routing skew in, per-layer times and expert loads out
  bo.probe = &probe;
  out << kernels::cuda_runtime_summary();
  // Against the CPU backend first: the reference model is freed before the timed one is sized.
  const ReferenceChecks checks = run_reference_checks(o, bo, out);

  // All layers if they fit, else as many as do (the per-layer times then stand for the rest).
  std::int64_t L = o.layers;
  if (L == 0) {
    std::size_t free_bytes = 0, total_bytes = 0;
    LT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    L = layers_that_fit(o.model, shard, bo, free_bytes);
    LT_CHECK(L > 0, "bench: not even 2 layers of ", o.model, " (rank ", o.tp_rank, " of ", o.tp_shard,
             ") fit in the GPU's ", gib(free_bytes), " free; raise --tp-shard or lower --tokens");
  }
  const ModelConfig cfg = synthetic_model_config(o.model, L);
  const CapturePlan plan = resolve_capture(o.capture, cfg.num_layers);
  for (const std::string& w : plan.warnings) log_warn(w);
  CapturePlan none = plan;
  none.points.clear();
  ModelledAllReduce comm(o.tp_rank, o.tp_shard);
  const auto t_build = BenchClock::now();
  const auto backend = cuda::CudaBackend::synthetic(cfg, comm, bo, o.seed);
  const cuda::LocalShape& shape = backend->shape();
  out << "backend: " << backend->description() << "\n";
  out << "synthetic " << o.model << " built on the device in "
      << fixed(std::chrono::duration<double>(BenchClock::now() - t_build).count(), 2) << " s: " << L << " of "
      << full_cfg.num_layers << " layers" << (L < full_cfg.num_layers ? " (as many as fit; per-layer times stand "
                                                                          "for the others)" : "")
      << "\n";
  const std::int64_t params = shape.layer_matmul_params();
  std::string points;
  for (const CapturePoint& p : plan.points) points += cat(points.empty() ? "" : ",", p.spec);
  out << "model: " << cfg.architecture << ", " << cfg.num_layers << " layers, hidden " << cfg.hidden_size << ", heads "
      << cfg.num_heads << "/" << cfg.num_kv_heads;
  if (cfg.mla)
    out << " MLA (q_lora " << cfg.mla->q_lora_rank << ", kv_lora " << cfg.mla->kv_lora_rank << ", qk "
        << cfg.mla->qk_head_dim() << ", v " << cfg.mla->v_head_dim << ")";
  else
    out << " x " << cfg.head_dim;
  out << ", intermediate " << cfg.intermediate_size;
  if (moe)
    out << ", " << cfg.moe->num_experts << " experts of " << cfg.moe->expert_intermediate_size << " (top "
        << cfg.moe->experts_per_token << ", " << cfg.moe->num_shared_experts << " shared)";
  out << ", vocab " << cfg.vocab_size << ", weights " << cfg.quant.describe() << "\n";
  out << "this rank: " << o.tp_rank << " of " << o.tp_shard << " (--moe-split " << o.moe_split << "): heads "
      << shape.heads;
  if (moe)
    out << ", experts " << shape.first_expert << ".." << shape.first_expert + shape.local_experts - 1
        << " (intermediate " << shape.expert_inter << "), shared slice " << shape.shared_inter;
  const cuda::MemoryPlan& mem = backend->memory();
  out << "; weights " << gib(mem.weight_bytes) << " (packed " << gib(mem.packed_bytes) << "), dequantization scratch "
      << gib(mem.scratch_bytes) << ", workspace " << gib(mem.workspace_bytes) << "; matmul params per token "
      << fixed(double(params) / 1e9, 3) << "e9\n";
  out << "capture: '" << o.capture << "' = points " << points << "; samples of " << o.sample_tokens
      << " tokens; median of " << o.iters << " forwards per mode, interleaved\n\n";

  BufferPool results(plan.points.size());
  backend->set_result_pool(&results);
  const Run run{o, out, full_cfg, cfg, plan, none, *backend, checks, results};
#if defined(LAYERTAP_CUDA_SIM)
  run_simulated(run, probe);
  return 0;
#endif
  if (moe)
    run_moe(run, probe, comm);
  else
    run_dense(run);
  return 0;
}

}  // namespace layertap
