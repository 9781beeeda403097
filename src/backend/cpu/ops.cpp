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

void rms_norm(const float* x, const float* w, float* y, int64_t rows, int64_t cols, float eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = y + r * cols;
    double ss = 0.0;  // accumulated in double: the float32 result is then correctly rounded
    for (int64_t c = 0; c < cols; ++c) ss += double(xr[c]) * double(xr[c]);
    const float inv = 1.0f / std::sqrt(float(ss / double(cols)) + eps);
    for (int64_t c = 0; c < cols; ++c) yr[c] = w[c] * (xr[c] * inv);
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

void swiglu(const float* gate, const float* up, float* out, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    out[i] = (g / (1.0f + std::exp(-g))) * up[i];
  }
}

Rope::Rope(const RopeConfig& cfg, int64_t head_dim) : hd_(head_dim), inv_freq_(std::size_t(head_dim / 2)) {
  // Same float32 steps as transformers: inv_freq = 1 / theta^(2i/hd).
  const float theta = float(cfg.theta);
  for (int64_t i = 0; i < hd_ / 2; ++i)
    inv_freq_[std::size_t(i)] = 1.0f / std::pow(theta, float(2 * i) / float(hd_));
  if (cfg.type == RopeConfig::Type::Llama3) {
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
  }
}

void Rope::apply(float* x, int64_t heads, const std::vector<int64_t>& offsets) const {
  const int64_t half = hd_ / 2;
  std::vector<float> cos_t(static_cast<std::size_t>(half)), sin_t(static_cast<std::size_t>(half));
  for (std::size_t s = 0; s + 1 < offsets.size(); ++s) {
    for (int64_t t = offsets[s]; t < offsets[s + 1]; ++t) {
      const float pos = float(t - offsets[s]);
      for (int64_t i = 0; i < half; ++i) {
        const float angle = pos * inv_freq_[std::size_t(i)];
        cos_t[std::size_t(i)] = std::cos(angle);
        sin_t[std::size_t(i)] = std::sin(angle);
      }
      for (int64_t h = 0; h < heads; ++h) {
        float* v = x + (t * heads + h) * hd_;
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

void causal_attention(const float* q, const float* k, const float* v, float* out,
                      const std::vector<int64_t>& offsets, int64_t heads, int64_t kv_heads, int64_t hd,
                      int64_t window) {
  LT_CHECK(kv_heads > 0 && heads % kv_heads == 0, "attention: ", heads, " query heads for ", kv_heads,
           " key/value heads");
  const int64_t group = heads / kv_heads;
  const int qs = int(heads * hd), ks = int(kv_heads * hd);  // row strides of q/out and k/v
  const float scale = 1.0f / std::sqrt(float(hd));
  std::vector<float> scores;
  for (std::size_t s = 0; s + 1 < offsets.size(); ++s) {
    const int64_t t0 = offsets[s], n = offsets[s + 1] - t0;
    scores.resize(std::size_t(n * n));
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t g = h / group;
      const float* qh = q + t0 * qs + h * hd;
      const float* kh = k + t0 * ks + g * hd;
      const float* vh = v + t0 * ks + g * hd;
      // scores [n, n] = q_h [n, hd] @ k_g^T, scaled
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, int(n), int(n), int(hd), scale, qh, qs, kh, ks,
                  0.0f, scores.data(), int(n));
      for (int64_t i = 0; i < n; ++i) {
        float* row = scores.data() + i * n;
        const int64_t first = window > 0 ? std::max<int64_t>(0, i - window + 1) : 0;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t j = first; j <= i; ++j) mx = std::max(mx, row[j]);
        float sum = 0.0f;
        for (int64_t j = 0; j < n; ++j) {
          const float e = (j >= first && j <= i) ? std::exp(row[j] - mx) : 0.0f;
          row[j] = e;
          sum += e;
        }
        for (int64_t j = first; j <= i; ++j) row[j] /= sum;
      }
      // out_h [n, hd] = probs [n, n] @ v_g [n, hd]
      cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(n), int(hd), int(n), 1.0f, scores.data(),
                  int(n), vh, ks, 0.0f, out + t0 * qs + h * hd, qs);
    }
  }
}

}  // namespace layertap::cpu
