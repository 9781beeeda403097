#include "job/verify_recompute.hpp"

#include <algorithm>
#include <vector>

#include "core/backend_names.hpp"
#include "core/state_compare.hpp"
#include "core/error.hpp"  // cat
#include "core/text.hpp"
#include "io/shard_writer.hpp"  // parse_storage_dtype
#include "model/packed_batch.hpp"
#include "model/weights.hpp"

namespace layertap::job {

namespace {
// A float32 output (cpu backend) routes as this recompute does up to the summation order of the
// products: its router input is within this relative error.
constexpr double kRoutingFloat32Bound = 1e-4;
}  // namespace

SampleRecompute::SampleRecompute(const Checkpoint& ckpt, const ModelConfig& cfg, const io::Manifest& m)
    : vocab_size_(cfg.vocab_size),
      hidden_(cfg.hidden_size),
      storage_dtype_(m.storage_dtype),
      cuda_output_(m.run.backend == kCudaBackend),
      backend_(cfg, load_weights(ckpt, cfg, TpShard{}), comm_) {
  plan_.request = m.capture_request;
  plan_.num_layers = cfg.num_layers;
  for (const io::ManifestPoint& p : m.points) plan_.points.push_back({p.spec, p.id});
}

void SampleRecompute::check(const StoredSample& s, VerifyReport& report) {
  const auto T = int64_t(s.ids.size());
  const int64_t H = hidden_;
  PackedBatch batch;
  batch.tokens.assign(s.ids.begin(), s.ids.end());
  if (std::any_of(batch.tokens.begin(), batch.tokens.end(), [&](int32_t t) { return t < 0 || t >= vocab_size_; })) {
    report.problem(cat(s.where, ": stored token ids outside the model's vocabulary [0, ", vocab_size_, ")"));
    return;
  }
  batch.offsets = {0, T};
  // A MoE output's recorded routing is replayed (a bf16 forward may break a near-tie the other way
  // than this float32 one): each recorded choice must be one a forward within the bound could make.
  const bool replay = !s.routing.empty();
  if (replay) backend_.replay_routing(s.routing, cuda_output_ ? kBf16ForwardBound : kRoutingFloat32Bound);
  const auto states = backend_.forward(batch, plan_, DType::F32);
  if (replay && !backend_.implausible_routing().empty()) {
    report.recomputed();
    report.problem(cat(s.where, ": recorded routing at ", backend_.implausible_routing(),
                       ": no forward within the bound makes that choice (a routing bug, or /routed_experts damaged)"));
    return;
  }
  const DType storage = io::parse_storage_dtype(storage_dtype_);
  const int64_t P = int64_t(plan_.points.size());
  const float* stored = s.states.data();
  std::ostream& out = report.out();
  // Per element, in steps of the storage type (core/state_compare.hpp): every corruption verify
  // looks for (swapped or shifted points, last for final, shifted tokens, exchanged samples)
  // moves elements by many steps.
  if (cuda_output_) {  // a bf16 forward: held per point to kBf16ForwardBound
    double worst_err = 0;
    std::string worst_point;
    for (int64_t p = 0; p < P; ++p) {
      const auto* want = reinterpret_cast<const float*>(states[std::size_t(p)].data());  // [T, H]
      const double err = relative_frobenius(stored + p * H, P * H, want, T, H);
      if (!(err <= worst_err)) {
        worst_err = err;
        worst_point = plan_.points[std::size_t(p)].spec;
      }
    }
    report.recomputed();
    if (!(worst_err <= kBf16ForwardBound))
      report.problem(cat(s.where, ": recomputed states differ at point ", worst_point, ": relative error ", worst_err,
                         " (written by the cuda backend: bound ", kBf16ForwardBound, ")"));
    else
      out << "ok " << s.where << ": worst relative error " << worst_err << " (point " << worst_point
          << ", cuda backend: bound " << kBf16ForwardBound << ")\n";
    return;
  }
  StateMismatch worst;
  std::string worst_point;
  for (int64_t p = 0; p < P; ++p) {
    const auto* want = reinterpret_cast<const float*>(states[std::size_t(p)].data());  // [T, H]
    const StateMismatch m = compare_states(stored + p * H, P * H, want, T, H, storage);
    if (!(m.ratio <= worst.ratio)) {
      worst = m;
      worst_point = plan_.points[std::size_t(p)].spec;
    }
  }
  report.recomputed();
  if (!(worst.ratio <= 1))
    report.problem(cat(s.where, ": recomputed states differ at point ", worst_point, ": token ", worst.row, " dim ",
                       worst.col, " stored ", worst.stored, ", recomputed ", worst.recomputed, ", ", worst.ratio,
                       " times the allowed ", worst.allowed));
  else
    out << "ok " << s.where << ": worst element at " << worst.ratio << " of the allowed difference"
        << (worst_point.empty() ? "" : " (point " + worst_point + ")") << "\n";
}

}  // namespace layertap::job
