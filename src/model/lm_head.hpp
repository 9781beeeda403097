// The checkpoint's LM head (or the tied embedding) and final norm, to check stored states by what
// the model predicts from them: a wrong layer, a wrong model or shifted tokens collapse top-1
// agreement with the next token and blow up the perplexity.
#pragma once
#include <cstdint>
#include <vector>

#include "model/hf_config.hpp"
#include "model/safetensors.hpp"

namespace layertap {

struct NextTokenStats {
  int64_t tokens = 0;  // predictions scored
  int64_t top1 = 0;    // of which the most likely token was the next one
  double nll = 0;      // summed negative log-likelihood of the next tokens (natural log)
  double top1_rate() const { return tokens ? double(top1) / double(tokens) : 0; }
  double perplexity() const;
};

class LmHead {
 public:
  // Reads lm_head (language_model.lm_head for Kimi-K2.5) or, with tie_word_embeddings, the
  // embedding, and the final norm; float32, whatever the checkpoint's format.
  LmHead(const Checkpoint& ckpt, const ModelConfig& cfg);

  // `x` [n, H] through the final norm, in place: turns the `last` point into `final`.
  void final_norm(float* x, int64_t n) const;

  // Scores the prediction of targets[i] from states[i] ([n, H], after the final norm).
  void score(const float* states, const int32_t* targets, int64_t n, NextTokenStats& stats) const;

 private:
  int64_t vocab_ = 0, hidden_ = 0;
  float eps_ = 0;
  std::vector<float> weight_;  // [V, H]
  std::vector<float> norm_;    // [H]
};

}  // namespace layertap
