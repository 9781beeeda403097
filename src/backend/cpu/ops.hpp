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

// y [T, H] = down(silu(gate(x)) * up(x)) for x [T, H], on whatever slice of the intermediate size
// `m` holds (the caller all-reduces a sliced result).
void mlp(const MlpWeights& m, const float* x, int64_t T, float* y);

// Rotary embedding with default, llama3 or YaRN frequencies (YaRN also scales cos and sin by its
// attention factor). Half-split layout (HF's rotate_half) pairs x[i] with x[i + d/2]; the
// interleaved layout (DeepSeek's rope_interleave) pairs x[2i] with x[2i+1] and, as transformers
// does, writes the rotated pairs back half-split: [x0', x2', ..., x1', x3', ...].
class Rope {
 public:
  enum class Layout { HalfSplit, Interleaved };
  Rope(const RopeConfig& cfg, int64_t dim, Layout layout = Layout::HalfSplit);
  // x: [T, heads * dim]; position of token t is t - offsets[s] for the sample s that holds it.
  void apply(float* x, int64_t heads, const std::vector<int64_t>& offsets) const;
  const std::vector<float>& inv_freq() const { return inv_freq_; }  // [dim/2]
  float attention_factor() const { return attention_factor_; }

 private:
  int64_t dim_;
  Layout layout_;
  float attention_factor_ = 1.0f;
  std::vector<float> inv_freq_;
};

// Causal attention over a packed batch, never across samples, with scores scaled by `scale`.
// q: [T, heads*qk_dim], k: [T, kv_heads*qk_dim], v: [T, kv_heads*v_dim] -> out: [T, heads*v_dim].
// window > 0 keeps only the last `window` keys (the query's own position included), as HF's
// sliding-window mask.
void causal_attention(const float* q, const float* k, const float* v, float* out,
                      const std::vector<int64_t>& offsets, int64_t heads, int64_t kv_heads, int64_t qk_dim,
                      int64_t v_dim, float scale, int64_t window);

// The dense decoders' case: qk_dim = v_dim = hd, scale hd^-0.5.
void causal_attention(const float* q, const float* k, const float* v, float* out,
                      const std::vector<int64_t>& offsets, int64_t heads, int64_t kv_heads,
                      int64_t hd, int64_t window);

}  // namespace layertap::cpu
