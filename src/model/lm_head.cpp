#include "model/lm_head.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/ops.hpp"
#include "core/error.hpp"
#include "model/linear_reader.hpp"

namespace layertap {

double NextTokenStats::perplexity() const { return tokens ? std::exp(nll / double(tokens)) : 0; }

LmHead::LmHead(const Checkpoint& ck, const ModelConfig& c)
    : vocab_(c.vocab_size), hidden_(c.hidden_size), eps_(float(c.rms_norm_eps)) {
  // "model." -> "lm_head"; Kimi-K2.5's "language_model.model." -> "language_model.lm_head".
  const std::string outer = c.tensor_prefix.substr(0, c.tensor_prefix.size() - std::string("model.").size());
  const std::string module = c.tie_word_embeddings ? c.tensor_prefix + "embed_tokens" : outer + "lm_head";
  weight_ = LinearReader(ck, c.quant).read(module, vocab_, hidden_, {0, vocab_, 0, hidden_});
  norm_ = ck.read(c.tensor_prefix + "norm.weight", {hidden_});
}

void LmHead::final_norm(float* x, int64_t n) const { cpu::rms_norm(x, norm_.data(), x, n, hidden_, eps_); }

void LmHead::score(const float* states, const int32_t* targets, int64_t n, NextTokenStats& stats) const {
  constexpr int64_t kRows = 64;  // logits [kRows, V] at a time
  std::vector<float> logits(std::size_t(kRows * vocab_));
  for (int64_t r0 = 0; r0 < n; r0 += kRows) {
    const int64_t rows = std::min(kRows, n - r0);
    // logits [rows, V] = states [rows, H] @ weight^T
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(vocab_), int(hidden_), 1.0f,
                states + r0 * hidden_, int(hidden_), weight_.data(), int(hidden_), 0.0f, logits.data(), int(vocab_));
    for (int64_t r = 0; r < rows; ++r) {
      const float* l = logits.data() + r * vocab_;
      const int32_t target = targets[r0 + r];
      LT_CHECK(target >= 0 && target < vocab_, "next token ", target, " is outside the vocabulary [0, ", vocab_, ")");
      const float* top = std::max_element(l, l + vocab_);
      double sum = 0;
      for (int64_t v = 0; v < vocab_; ++v) sum += std::exp(double(l[v]) - double(*top));
      stats.nll += std::log(sum) + double(*top) - double(l[target]);
      stats.top1 += (top - l) == target;
      ++stats.tokens;
    }
  }
}

}  // namespace layertap
