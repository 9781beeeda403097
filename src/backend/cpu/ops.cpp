#include "backend/cpu/ops.hpp"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numbers>

#include "core/error.hpp"

namespace layertap::cpu {

void set_num_threads(int threads) {
  if (threads > 0) openblas_set_num_threads(threads);
}

void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps, float weight_offset) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    double ss = 0.0;  // accumulated in double: the float32 result is then correctly rounded
    for (int64_t c = 0; c < cols; ++c) ss += double(xr[c]) * double(xr[c]);
    const float inv = 1.0f / std::sqrt(float(ss / double(cols)) + eps);
    for (int64_t c = 0; c < cols; ++c) yr[c] = w != nullptr ? (weight_offset + w[c]) * (xr[c] * inv) : xr[c] * inv;
  }
}

void linear(const float* x, int64_t T, const Linear& l, float* y) {
  if (T == 0) return;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(T), int(l.out), int(l.in), 1.0f, x, int(l.in),
              l.w.data(), int(l.in), 0.0f, y, int(l.out));
  if (!l.b.empty())
    for (int64_t t = 0; t < T; ++t)
      for (int64_t o = 0; o < l.out; ++o) y[t * l.out + o] += l.b[std::size_t(o)];
}

void gated_activation(const float* gate, const float* up, float* out, int64_t n, const GatedActivation& act) {
  if (act.kind == GatedActivation::Kind::ClampedSwiglu) {
    // transformers' GptOssExperts._apply_gate, float32: clamps keep NaN, as torch.clamp.
    for (int64_t i = 0; i < n; ++i) {
      const float g = std::min(gate[i], act.limit), u = std::clamp(up[i], -act.limit, act.limit);
      const float glu = g * (1.0f / (1.0f + std::exp(-(g * act.alpha))));
      out[i] = (u + 1.0f) * glu;
    }
    return;
  }
  if (act.kind == GatedActivation::Kind::Silu) {
    for (int64_t i = 0; i < n; ++i) {
      const float g = gate[i];
      out[i] = (g / (1.0f + std::exp(-g))) * up[i];
    }
    return;
  }
  // PyTorch's gelu(approximate="tanh"), float32: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
  const float beta = float(std::numbers::sqrt2 * (2 / std::sqrt(std::numbers::pi)) * 0.5), kappa = 0.044715f;
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = 0.5f * g * (1.0f + std::tanh(beta * (g + kappa * g * g * g))) * up[i];
  }
}

namespace {

// transformers' _compute_yarn_parameters, float32 where it computes in float32: frequencies
// between the beta_fast and beta_slow correction dims ramp from extrapolated (kept) to
// interpolated (divided by factor).
void apply_yarn(const RopeConfig& cfg, int64_t dim, std::vector<float>& inv_freq) {
  const double base = cfg.theta, orig = double(cfg.original_max_position_embeddings);
  auto correction_dim = [&](double rotations) {
    return double(dim) * std::log(orig / (rotations * 2 * std::numbers::pi)) / (2 * std::log(base));
  };
  double low = correction_dim(cfg.beta_fast), high = correction_dim(cfg.beta_slow);
  if (cfg.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, double(dim - 1));
  if (low == high) high += 0.001;  // prevents a division by zero, as transformers does
  const float factor = float(cfg.factor);
  for (std::size_t i = 0; i < inv_freq.size(); ++i) {
    const float pos_freq = std::pow(float(base), float(2 * i) / float(dim));
    const float extrapolation = 1.0f / pos_freq, interpolation = 1.0f / (factor * pos_freq);
    const float ramp = std::clamp((float(i) - float(low)) / float(high - low), 0.0f, 1.0f);
    const float extrapolation_factor = 1.0f - ramp;
    inv_freq[i] = interpolation * (1.0f - extrapolation_factor) + extrapolation * extrapolation_factor;
  }
}

}  // namespace

void mlp(const MlpWeights& m, const float* x, int64_t T, float* y, const GatedActivation& act) {
  std::vector<float> gate(std::size_t(T * m.gate.out)), up(std::size_t(T * m.up.out));  // [T, I_local]
  linear(x, T, m.gate, gate.data());
  linear(x, T, m.up, up.data());
  gated_activation(gate.data(), up.data(), gate.data(), T * m.gate.out, act);
  linear(gate.data(), T, m.down, y);  // [T, H]
}

Rope::Rope(const RopeConfig& cfg, int64_t dim, Layout layout, int64_t head_dim)
    : dim_(dim), head_dim_(head_dim == 0 ? dim : head_dim), layout_(layout), inv_freq_(std::size_t(dim / 2)) {
  LT_CHECK(dim_ % 2 == 0 && dim_ <= head_dim_, "rope: rotary dim ", dim_, " must be even and at most head_dim ",
           head_dim_);
  // Same float32 steps as transformers: inv_freq = 1 / theta^(2i/dim).
  const float theta = float(cfg.theta);
  for (int64_t i = 0; i < dim_ / 2; ++i)
    inv_freq_[std::size_t(i)] = 1.0f / std::pow(theta, float(2 * i) / float(dim_));
  if (cfg.type == RopeConfig::Type::Linear) {
    for (float& f : inv_freq_) f /= float(cfg.factor);  // transformers: inv_freq /= factor, in float32
  } else if (cfg.type == RopeConfig::Type::Llama3) {
    // Long wavelengths are slowed by `factor`, short ones kept, the band between interpolated.
    const float factor = float(cfg.factor), lo = float(cfg.low_freq_factor), hi = float(cfg.high_freq_factor);
    const float old_ctx = float(cfg.original_max_position_embeddings);
    const float low_freq_wavelen = old_ctx / lo, high_freq_wavelen = old_ctx / hi;
    for (float& f : inv_freq_) {
      const float wavelen = 2.0f * std::numbers::pi_v<float> / f;
      if (wavelen > low_freq_wavelen) {
        f = f / factor;
      } else if (!(wavelen < high_freq_wavelen)) {
        const float smooth = (old_ctx / wavelen - lo) / (hi - lo);
        f = (1.0f - smooth) * f / factor + smooth * f;
      }
    }
  } else if (cfg.type == RopeConfig::Type::Yarn) {
    apply_yarn(cfg, dim_, inv_freq_);
    attention_factor_ = float(cfg.attention_factor);
  }
}

void Rope::apply(float* x, int64_t heads, const std::vector<int64_t>& offsets, int64_t first_position) const {
  const int64_t half = dim_ / 2;
  std::vector<float> cos_t(static_cast<std::size_t>(half)), sin_t(static_cast<std::size_t>(half));
  std::vector<float> pairs(static_cast<std::size_t>(dim_));
  for (std::size_t s = 0; s + 1 < offsets.size(); ++s) {
    for (int64_t t = offsets[s]; t < offsets[s + 1]; ++t) {
      const float pos = float(t - offsets[s] + (s == 0 ? first_position : 0));
      for (int64_t i = 0; i < half; ++i) {
        const float angle = pos * inv_freq_[std::size_t(i)];
        cos_t[std::size_t(i)] = std::cos(angle) * attention_factor_;
        sin_t[std::size_t(i)] = std::sin(angle) * attention_factor_;
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + (t * heads + h) * head_dim_;
        if (layout_ == Layout::Interleaved) {  // de-interleave: evens to the first half, odds to the second
          for (int64_t i = 0; i < half; ++i) {
            pairs[std::size_t(i)] = v[2 * i];
            pairs[std::size_t(half + i)] = v[2 * i + 1];
          }
          std::copy(pairs.begin(), pairs.end(), v);
        }
        for (int64_t i = 0; i < half; ++i) {
          const float a = v[i], b = v[i + half];
          const float c = cos_t[std::size_t(i)], sn = sin_t[std::size_t(i)];
          v[i] = a * c - b * sn;
          v[i + half] = b * c + a * sn;
        }
      }
    }
  }
}

void attention_temperature(float* q, int64_t width, const std::vector<int64_t>& offsets, int64_t first_position,
                           const ModelConfig::Temperature& t) {
  const float floor_scale = float(t.floor_scale), attn_scale = float(t.attn_scale);
  for (std::size_t s = 0; s + 1 < offsets.size(); ++s) {
    for (int64_t r = offsets[s]; r < offsets[s + 1]; ++r) {
      const float pos = float(r - offsets[s] + (s == 0 ? first_position : 0));
      const float scale = std::log1p(std::floor((pos + 1.0f) / floor_scale)) * attn_scale + 1.0f;
      for (int64_t i = 0; i < width; ++i) q[r * width + i] *= scale;
    }
  }
}

void causal_attention(const float* q, const std::vector<int64_t>& q_offsets, const float* k, const float* v,
                      const std::vector<int64_t>& kv_offsets, float* out, const AttentionShape& a) {
  const auto [heads, kv_heads, qk_dim, v_dim, scale, window, sinks, chunk] = a;
  LT_CHECK(kv_heads > 0 && heads % kv_heads == 0, "attention: ", heads, " query heads for ", kv_heads,
           " key/value heads");
  LT_CHECK(chunk >= 0, "attention: negative chunk ", chunk);
  // The first key position the query at position p sees: nondecreasing in p, so a block's first
  // row bounds the keys of all its rows.
  const auto first_key = [window = a.window, chunk = a.chunk](int64_t p) {  // clang 14 captures no bindings
    const int64_t w = window > 0 ? std::max<int64_t>(0, p - window + 1) : 0;
    return chunk > 0 ? std::max(w, p - p % chunk) : w;
  };
  LT_CHECK(q_offsets.size() == kv_offsets.size(), "attention: ", q_offsets.size() - 1, " query segments for ",
           kv_offsets.size() - 1, " key segments");
  const int64_t group = heads / kv_heads;
  // row strides of q, k, v and out
  const int qs = int(heads * qk_dim), ks = int(kv_heads * qk_dim), vs = int(kv_heads * v_dim), os = int(heads * v_dim);
  // Queries go in blocks of kQueryBlock rows, each against the keys it can see, so memory is
  // [kQueryBlock, n] however long the sample (a [n, n] score matrix of a 120k-token sample is 57 GB).
  constexpr int64_t kQueryBlock = 256;
  std::vector<float> scores;  // [rows, keys] of one query block
  for (std::size_t s = 0; s + 1 < q_offsets.size(); ++s) {
    const int64_t t0 = q_offsets[s], n = q_offsets[s + 1] - t0;
    const int64_t kv0 = kv_offsets[s], earlier = kv_offsets[s + 1] - kv0 - n;  // keys before the first query
    LT_CHECK(earlier >= 0, "attention: segment ", s, " has ", n, " queries but ", n + earlier, " keys");
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / group;
      const float* qh = q + t0 * qs + h * qk_dim;
      const float* kh = k + kv0 * ks + g * qk_dim;
      const float* vh = v + kv0 * vs + g * v_dim;
      for (int64_t r0 = 0; r0 < n; r0 += kQueryBlock) {
        const int64_t rows = std::min(kQueryBlock, n - r0);
        const int64_t p0 = earlier + r0;  // the block's first query position in the sample
        const int64_t k0 = first_key(p0);  // first key any row sees
        const int64_t keys = p0 + rows - k0;
        scores.resize(std::size_t(rows * keys));
        // scores [rows, keys] = q_h [rows, qk] @ k_g[k0 : k0+keys]^T, scaled
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(rows), int(keys), int(qk_dim), scale,
                    qh + r0 * qs, qs, kh + k0 * ks, ks, 0.0f, scores.data(), int(keys));
        for (int64_t i = 0; i < rows; ++i) {
          const int64_t qi = p0 + i;  // position in the sample
          const int64_t first = first_key(qi) - k0;
          const int64_t last = qi - k0;
          float* row = scores.data() + i * keys;
          // transformers' GPT-OSS order: the sink is the row's last logit, in the max and the sum.
          float mx = -std::numeric_limits<float>::infinity();
          for (int64_t j = first; j <= last; ++j) mx = std::max(mx, row[j]);
          if (sinks != nullptr) mx = std::max(mx, sinks[h]);
          float sum = 0.0f;
          for (int64_t j = 0; j < keys; ++j) {
            const float e = (j >= first && j <= last) ? std::exp(row[j] - mx) : 0.0f;
            row[j] = e;
            sum += e;
          }
          if (sinks != nullptr) sum += std::exp(sinks[h] - mx);
          for (int64_t j = first; j <= last; ++j) row[j] /= sum;
        }
        // out_h [rows, v] = probs [rows, keys] @ v_g[k0 : k0+keys] [keys, v]
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(rows), int(v_dim), int(keys), 1.0f,
                    scores.data(), int(keys), vh + k0 * vs, vs, 0.0f, out + (t0 + r0) * os + h * v_dim, os);
      }
    }
  }
}

void causal_attention(const float* q, const float* k, const float* v, float* out,
                      const std::vector<int64_t>& offsets, int64_t heads, int64_t kv_heads, int64_t qk_dim,
                      int64_t v_dim, float scale, int64_t window) {
  causal_attention(q, offsets, k, v, offsets, out, {heads, kv_heads, qk_dim, v_dim, scale, window});
}

void causal_attention(const float* q, const float* k, const float* v, float* out,
                      const std::vector<int64_t>& offsets, int64_t heads, int64_t kv_heads, int64_t hd,
                      int64_t window) {
  causal_attention(q, k, v, out, offsets, heads, kv_heads, hd, hd, 1.0f / std::sqrt(float(hd)), window);
}

KeyRows with_kept_rows(const std::vector<float>& kept, const float* rows, const PackedBatch& batch, int64_t width) {
  const int64_t earlier = batch.first_position, T = batch.num_tokens();
  LT_CHECK(int64_t(kept.size()) == earlier * width, "chunked prefill: ", kept.size() / std::size_t(std::max<int64_t>(width, 1)),
           " kept rows for a batch that continues its sample at position ", earlier);
  KeyRows r;
  r.offsets = batch.offsets;
  if (earlier == 0) {
    r.rows = rows;
    return r;
  }
  r.joined.resize(std::size_t((earlier + T) * width));
  std::copy(kept.begin(), kept.end(), r.joined.begin());
  std::copy(rows, rows + T * width, r.joined.begin() + earlier * width);
  r.rows = r.joined.data();
  for (std::size_t s = 1; s < r.offsets.size(); ++s) r.offsets[s] += earlier;
  return r;
}

std::vector<float> rows_to_keep(const KeyRows& r, const PackedBatch& batch, int64_t width) {
  if (!batch.last_continues) return {};
  const int64_t a = r.offsets[r.offsets.size() - 2], b = r.offsets.back();
  return std::vector<float>(r.rows + a * width, r.rows + b * width);
}

}  // namespace layertap::cpu
