// Float32 CPU reference operators of the dense decoder, written to follow Hugging Face's float32
// arithmetic order. Shapes: T tokens of a packed batch, H hidden, hd head dim.
#pragma once
#include <cstdint>
#include <vector>

#include "model/hf_config.hpp"
#include "model/packed_batch.hpp"
#include "model/weights.hpp"

namespace layertap::cpu {

// Threads OpenBLAS may use for one matrix product; 0 keeps its default (all cores).
void set_num_threads(int threads);

// y[r, :] = (weight_offset + w) * (x[r, :] / sqrt(mean(x[r, :]^2) + eps)); rows x cols, y may
// alias x. Gemma's norms hold w and apply (1 + w): weight_offset 1. w null: no weight (Llama-4's
// L2 norm of q and k).
void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps,
              float weight_offset = 0);

// y [T, l.out] = x [T, l.in] @ l.w^T (+ l.b), OpenBLAS sgemm.
void linear(const float* x, int64_t T, const Linear& l, float* y);

// out[i] = act(gate[i]) * up[i]: silu (SwiGLU) or PyTorch's tanh-approximated gelu (GeGLU); or
// GPT-OSS's clamped SwiGLU on de-interleaved gate and up: g = min(gate, limit),
// out = (clamp(up, -limit, limit) + 1) * (g * sigmoid(g * alpha)).
void gated_activation(const float* gate, const float* up, float* out, int64_t n, const GatedActivation& act = {});

// y [T, H] = down(act(gate(x)) * up(x)) for x [T, H], on whatever slice of the intermediate size
// `m` holds (the caller all-reduces a sliced result).
void mlp(const MlpWeights& m, const float* x, int64_t T, float* y, const GatedActivation& act = {});

// Rotary embedding with default, llama3 or YaRN frequencies (YaRN also scales cos and sin by its
// attention factor). Half-split layout (HF's rotate_half) pairs x[i] with x[i + d/2]; the
// interleaved layout (DeepSeek's rope_interleave) pairs x[2i] with x[2i+1] and, as transformers
// does, writes the rotated pairs back half-split: [x0', x2', ..., x1', x3', ...].
class Rope {
 public:
  enum class Layout { HalfSplit, Interleaved };
  // Rotates the first `dim` of every head's `head_dim` values (partial rotary when dim < head_dim:
  // the rest pass through); head_dim 0 means dim.
  Rope(const RopeConfig& cfg, int64_t dim, Layout layout = Layout::HalfSplit, int64_t head_dim = 0);
  // x: [T, heads * head_dim]; position of token t is t - offsets[s] for the sample s that holds it,
  // plus `first_position` in the first sample (a later chunk of a sample: model/packed_batch.hpp).
  void apply(float* x, int64_t heads, const std::vector<int64_t>& offsets, int64_t first_position = 0) const;
  const std::vector<float>& inv_freq() const { return inv_freq_; }  // [dim/2]
  float attention_factor() const { return attention_factor_; }

 private:
  int64_t dim_, head_dim_;
  Layout layout_;
  float attention_factor_ = 1.0f;
  std::vector<float> inv_freq_;
};

// Llama-4's NoPE temperature: row t of q [T, width] times
//   s(p) = log1p(floor((p + 1) / floor_scale)) * attn_scale + 1,
// p the token's position as Rope::apply counts it (offsets [S+1], first_position in the first
// sample), float32 in transformers' order. Scales whatever t.on says: the caller checks it.
void attention_temperature(float* q, int64_t width, const std::vector<int64_t>& offsets, int64_t first_position,
                           const ModelConfig::Temperature& t);

// Causal attention over a packed batch, never across samples, with scores scaled by `scale`.
// Segment s has the query rows [q_offsets[s], q_offsets[s+1]) and the key/value rows
// [kv_offsets[s], kv_offsets[s+1]), at least as many; its queries are the last positions of its
// keys (a later chunk of a sample: its keys are the earlier chunks' and its own).
// q: [Tq, heads*qk_dim], k: [Tk, kv_heads*qk_dim], v: [Tk, kv_heads*v_dim] -> out: [Tq, heads*v_dim].
// window > 0 keeps only the last `window` keys (the query's own position included), as HF's
// sliding-window mask. With sinks (GPT-OSS), head h's learned logit sinks[h], in the units of the
// scaled scores, joins each row's softmax and is dropped after it: with m = max(max_j s_j, sink),
// p_j = exp(s_j - m) / (sum_i exp(s_i - m) + exp(sink - m)); it takes mass but has no value.
// chunk > 0 (Llama-4's chunked_attention layers): the query at position p sees only the keys of
// its own chunk, positions floor(p / chunk) * chunk .. p; p counts from the sample's start, its
// earlier keys included when it continues, so the boundaries follow the sample's true positions.
// With a window too, both apply.
struct AttentionShape {
  int64_t heads, kv_heads, qk_dim, v_dim;
  float scale;
  int64_t window;
  const float* sinks = nullptr;  // [heads] this rank's query heads' sink logits, or null
  int64_t chunk = 0;  // > 0: only keys of the query's own chunk of `chunk` positions (Llama-4)
};
void causal_attention(const float* q, const std::vector<int64_t>& q_offsets, const float* k, const float* v,
                      const std::vector<int64_t>& kv_offsets, float* out, const AttentionShape& shape);
// One layer's key/value rows [rows, width] for one batch (model/packed_batch.hpp): the batch's
// own T rows, with the kept rows of the sample in flight in front when the first segment continues
// it. `offsets` [S+1] index the segments' keys in `rows`, for causal_attention's kv_offsets.
struct KeyRows {
  std::vector<float> joined;     // [first_position + T, width] when the batch continues a sample
  const float* rows = nullptr;   // joined.data() or the batch's own rows
  std::vector<int64_t> offsets;  // [S+1]
};
// `kept` [batch.first_position, width]: the rows kept from the sample's earlier chunks.
KeyRows with_kept_rows(const std::vector<float>& kept, const float* rows, const PackedBatch& batch, int64_t width);
// What the next batch needs: the last segment's rows (its earlier chunks' included) when it
// continues, else nothing.
std::vector<float> rows_to_keep(const KeyRows& r, const PackedBatch& batch, int64_t width);

// Each sample whole: queries and keys share `offsets`.
void causal_attention(const float* q, const float* k, const float* v, float* out,
                      const std::vector<int64_t>& offsets, int64_t heads, int64_t kv_heads, int64_t qk_dim,
                      int64_t v_dim, float scale, int64_t window);

// The dense decoders' case: qk_dim = v_dim = hd, scale hd^-0.5.
void causal_attention(const float* q, const float* k, const float* v, float* out,
                      const std::vector<int64_t>& offsets, int64_t heads, int64_t kv_heads,
                      int64_t hd, int64_t window);

}  // namespace layertap::cpu
