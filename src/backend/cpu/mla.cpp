#include "backend/cpu/mla.hpp"

#include <algorithm>

namespace layertap::cpu {

void mla_attention(const MlaConfig& m, const MlaWeights& w, const Rope& rope, const float* h,
                   const PackedBatch& batch, std::vector<float>& kept, float* out) {
  const int64_t T = batch.num_tokens();
  const std::vector<int64_t>& offsets = batch.offsets;
  const int64_t nh = w.heads, nope = m.qk_nope_head_dim, rd = m.qk_rope_head_dim, vd = m.v_head_dim;
  const int64_t qk = nope + rd, kvl = m.kv_lora_rank;
  const float latent_eps = float(MlaConfig::kLatentNormEps);
  auto buf = [](int64_t n) { return std::vector<float>(std::size_t(n)); };

  // Queries [T, nh*qk], per head [q_nope, q_rope].
  std::vector<float> q = buf(T * nh * qk);
  if (m.q_lora_rank > 0) {
    std::vector<float> qa = buf(T * m.q_lora_rank);  // [T, q_lora]
    linear(h, T, *w.q_a, qa.data());
    rms_norm(qa.data(), w.q_a_norm->data(), qa.data(), T, m.q_lora_rank, latent_eps);
    linear(qa.data(), T, *w.q_b, q.data());
  } else {
    linear(h, T, *w.q, q.data());
  }

  // The compressed kv [T, kvl + rd]: the latent (normed in place) and one rope key shared by all
  // heads (rotated in place).
  const int64_t cw = kvl + rd;
  std::vector<float> ckv = buf(T * cw), latent = buf(T * kvl), k_rope = buf(T * rd);
  linear(h, T, w.kv_a, ckv.data());
  for (int64_t t = 0; t < T; ++t) {
    const float* row = ckv.data() + t * cw;
    std::copy(row, row + kvl, latent.data() + t * kvl);
    std::copy(row + kvl, row + cw, k_rope.data() + t * rd);
  }
  rms_norm(latent.data(), w.kv_a_norm.data(), latent.data(), T, kvl, latent_eps);

  // RoPE on the rope dims only: gathered to [T, nh*rd], rotated, scattered back.
  std::vector<float> q_rope = buf(T * nh * rd);
  for (int64_t r = 0; r < T * nh; ++r)
    std::copy(q.data() + r * qk + nope, q.data() + (r + 1) * qk, q_rope.data() + r * rd);
  rope.apply(q_rope.data(), nh, offsets, batch.first_position);
  rope.apply(k_rope.data(), 1, offsets, batch.first_position);
  for (int64_t r = 0; r < T * nh; ++r)
    std::copy(q_rope.data() + r * rd, q_rope.data() + (r + 1) * rd, q.data() + r * qk + nope);
  for (int64_t t = 0; t < T; ++t) {
    std::copy(latent.data() + t * kvl, latent.data() + (t + 1) * kvl, ckv.data() + t * cw);
    std::copy(k_rope.data() + t * rd, k_rope.data() + (t + 1) * rd, ckv.data() + t * cw + kvl);
  }
  // The keys' rows: the sample in flight's kept [latent | rope key] in front of the batch's own.
  const KeyRows c = with_kept_rows(kept, ckv.data(), batch, cw);
  const int64_t Tk = c.offsets.back();

  // Per-head keys [Tk, nh*qk] = [k_nope, k_rope] and values [Tk, nh*vd] from kv_b_proj [Tk, nh*(nope+vd)].
  std::vector<float> lat_k = buf(Tk * kvl), kv = buf(Tk * nh * (nope + vd)), k = buf(Tk * nh * qk), v = buf(Tk * nh * vd);
  for (int64_t t = 0; t < Tk; ++t) std::copy(c.rows + t * cw, c.rows + t * cw + kvl, lat_k.data() + t * kvl);
  linear(lat_k.data(), Tk, w.kv_b, kv.data());
  for (int64_t t = 0; t < Tk; ++t)
    for (int64_t hh = 0; hh < nh; ++hh) {
      const float* src = kv.data() + (t * nh + hh) * (nope + vd);
      float* kd = k.data() + (t * nh + hh) * qk;
      std::copy(src, src + nope, kd);
      std::copy(c.rows + t * cw + kvl, c.rows + (t + 1) * cw, kd + nope);
      std::copy(src + nope, src + nope + vd, v.data() + (t * nh + hh) * vd);
    }

  std::vector<float> ctx = buf(T * nh * vd);  // [T, nh*vd]
  causal_attention(q.data(), offsets, k.data(), v.data(), c.offsets, ctx.data(),
                   {nh, nh, qk, vd, float(m.softmax_scale), 0});
  kept = rows_to_keep(c, batch, cw);
  linear(ctx.data(), T, w.o, out);  // [T, H] partial sum over this rank's heads
}

}  // namespace layertap::cpu
