// verify --lm-head: stored `final` states (or `last` through the final norm) through the
// checkpoint's LM head, each position predicting the next token where that token is loss-masked;
// top-1 agreement and perplexity over the scored samples.
#pragma once
#include <cstdint>

#include "io/manifest.hpp"
#include "job/verify_report.hpp"
#include "job/verify_sample.hpp"
#include "model/hf_config.hpp"
#include "model/lm_head.hpp"
#include "model/safetensors.hpp"

namespace layertap::job {

// Where --lm-head reads: the `final` point, else `last`.
struct LmHeadPoint {
  int64_t index = -1;   // among the manifest's points; -1 when it has neither
  bool final = false;   // false: `last`, put through the final norm first
};
LmHeadPoint lm_head_point(const io::Manifest& m);

class LmHeadScore {
 public:
  // `num_points`: P of the stored states; `cfg` has the manifest's hidden size.
  LmHeadScore(const Checkpoint& ckpt, const ModelConfig& cfg, LmHeadPoint point, int64_t num_points);

  void score(const StoredSample& s);

  // The "lm head: ..." line; a problem when top-1 agreement is below `min_top1`.
  void report(double min_top1, VerifyReport& report) const;

 private:
  LmHead head_;
  LmHeadPoint point_;
  int64_t points_, hidden_;
  NextTokenStats stats_;
  int64_t samples_ = 0;  // scored
};

}  // namespace layertap::job
