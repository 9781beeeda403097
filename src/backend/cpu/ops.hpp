// Float32 CPU reference operators of the dense decoder, written to follow Hugging Face's float32
// arithmetic order. Shapes: T tokens of a packed batch, H hidden, hd head dim.
#pragma once
#include <cstdint>
#include <vector>

#include "model/hf_config.hpp"
#include "model/weights.hpp"

namespace layertap::cpu {

// Threads OpenBLAS may use for one matrix product; 0 keeps its default (all cores).
void set_num_threads(int threads);

// y[r, :] = w * (x[r, :] / sqrt(mean(x[r, :]^2) + eps)); rows x cols, y may alias x.
void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps);

// y [T, l.out] = x [T, l.in] @ l.w^T (+ l.b), OpenBLAS sgemm.
void linear(const float* x, int64_t T, const Linear& l, float* y);

// out[i] = silu(gate[i]) * up[i]
void swiglu(const float* gate, const float* up, float* out, int64_t n);

// Rotary embedding (half-split rotation, as HF's rotate_half) with default or llama3 frequencies.
class Rope {
 public:
  Rope(const RopeConfig& cfg, int64_t head_dim);
  // x: [T, heads * hd]; position of token t is t - offsets[s] for the sample s that holds it.
  void apply(float* x, int64_t heads, const std::vector<int64_t>& offsets) const;
  const std::vector<float>& inv_freq() const { return inv_freq_; }  // [hd/2]

 private:
  int64_t hd_;
  std::vector<float> inv_freq_;
};

// Causal GQA attention over a packed batch, never across samples.
// q: [T, heads*hd], k, v: [T, kv_heads*hd] -> out: [T, heads*hd]. window > 0 keeps only the
// last `window` keys (the query's own position included), as HF's sliding-window mask.
void causal_attention(const float* q, const float* k, const float* v, float* out,
                      const std::vector<int64_t>& offsets, int64_t heads, int64_t kv_heads,
                      int64_t hd, int64_t window);

}  // namespace layertap::cpu
