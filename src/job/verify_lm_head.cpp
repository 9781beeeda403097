#include "job/verify_lm_head.hpp"

#include <algorithm>
#include <iomanip>
#include <vector>

#include "core/error.hpp"  // cat
#include "core/text.hpp"

namespace layertap::job {

LmHeadPoint lm_head_point(const io::Manifest& m) {
  const int64_t L = m.num_layers;
  const std::vector<int64_t> ids = m.point_ids();
  const auto final_at = std::find(ids.begin(), ids.end(), L + 1);
  const auto last_at = std::find(ids.begin(), ids.end(), L);
  LmHeadPoint at;
  at.final = final_at != ids.end();
  if (!at.final && last_at == ids.end()) return at;
  at.index = (at.final ? final_at : last_at) - ids.begin();
  return at;
}

LmHeadScore::LmHeadScore(const Checkpoint& ckpt, const ModelConfig& cfg, LmHeadPoint point, int64_t num_points)
    : head_(ckpt, cfg), point_(point), points_(num_points), hidden_(cfg.hidden_size) {}

void LmHeadScore::score(const StoredSample& s) {
  const int64_t P = points_, H = hidden_, T = int64_t(s.ids.size());
  std::vector<float> states;  // [n, H]: positions whose next token is masked
  std::vector<int32_t> targets;
  for (int64_t t = 0; t + 1 < T; ++t) {
    if (!s.mask[std::size_t(t + 1)]) continue;
    const float* row = s.states.data() + (t * P + point_.index) * H;
    states.insert(states.end(), row, row + H);
    targets.push_back(s.ids[std::size_t(t + 1)]);
  }
  if (!point_.final) head_.final_norm(states.data(), int64_t(targets.size()));
  head_.score(states.data(), targets.data(), int64_t(targets.size()), stats_);
  ++samples_;
}

void LmHeadScore::report(double min_top1, VerifyReport& report) const {
  report.out() << "lm head: " << samples_ << " sample(s), " << stats_.tokens
               << " loss-masked next tokens predicted from '"
               << (point_.final ? "final" : "last' through the final norm, as 'final") << "': top-1 agreement "
               << fixed(100 * stats_.top1_rate(), 2) << "%, perplexity " << std::setprecision(6)
               << stats_.perplexity() << "\n";
  if (stats_.top1_rate() < min_top1)
    report.problem(cat("lm head: top-1 agreement ", fixed(100 * stats_.top1_rate(), 2), "% is below --min-top1 ",
                       fixed(100 * min_top1, 2), "%: a wrong layer, model or token alignment?"));
}

}  // namespace layertap::job
