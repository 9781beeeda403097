#include "core/captured_batch.hpp"

#include <cmath>

#include "core/error.hpp"

namespace layertap {

void CapturedBatch::validate(int64_t expected_points, int64_t expected_hidden, DType expected_dtype,
                             int64_t expected_routed_width) const {
  LT_CHECK(num_points() == expected_points, "captured batch has ", num_points(),
           " capture points, writer expects ", expected_points);
  LT_CHECK(hidden == expected_hidden, "captured batch has hidden size ", hidden,
           ", writer expects ", expected_hidden);
  LT_CHECK(dtype == expected_dtype, "captured batch has dtype ", dtype_name(dtype),
           ", writer expects ", dtype_name(expected_dtype));
  const int64_t S = num_samples(), T = num_tokens();
  LT_CHECK(S > 0, "captured batch holds no samples");
  LT_CHECK(int64_t(offsets.size()) == S + 1, "captured batch has ", offsets.size(),
           " offsets for ", S, " samples (expected ", S + 1, ")");
  LT_CHECK(offsets.front() == 0 && offsets.back() == T, "captured batch offsets span [",
           offsets.front(), ", ", offsets.back(), "], tokens are [0, ", T, "]");
  for (int64_t s = 0; s < S; ++s)
    LT_CHECK(offsets[s + 1] > offsets[s], "captured batch sample ", sample_index[s],
             " has ", offsets[s + 1] - offsets[s], " tokens");
  LT_CHECK(int64_t(loss_mask.size()) == T, "captured batch has ", loss_mask.size(),
           " loss-mask entries for ", T, " tokens");
  const std::size_t bytes = std::size_t(T) * std::size_t(hidden) * dtype_size(dtype);
  for (int64_t p = 0; p < num_points(); ++p)
    LT_CHECK(states[p].size() == bytes, "captured batch point ", p, " holds ", states[p].size(),
             " bytes, expected [", T, ", ", hidden, "] ", dtype_name(dtype), " = ", bytes);
  LT_CHECK(routed_width == expected_routed_width, "captured batch has a routing record ", routed_width,
           " ids wide, writer expects ", expected_routed_width);
  LT_CHECK(int64_t(routed_experts.size()) == T * routed_width, "captured batch routing record holds ",
           routed_experts.size(), " ids, expected ", T, " tokens x ", routed_width);
}

namespace {
bool is_finite_bf16(uint16_t b) { return (b & 0x7f80u) != 0x7f80u; }  // exponent not all ones
}  // namespace

std::vector<CapturedBatch::NonFinite> CapturedBatch::nonfinite_samples() const {
  std::vector<NonFinite> bad;
  for (int64_t s = 0; s < num_samples(); ++s) {
    const std::size_t t0 = std::size_t(offsets[s] * hidden), t1 = std::size_t(offsets[s + 1] * hidden);
    for (int64_t p = 0; p < num_points(); ++p) {
      bool finite = true;
      if (dtype == DType::BF16) {
        const auto* v = reinterpret_cast<const uint16_t*>(states[p].data());
        for (std::size_t i = t0; i < t1 && finite; ++i) finite = is_finite_bf16(v[i]);
      } else {
        const auto* v = reinterpret_cast<const float*>(states[p].data());
        for (std::size_t i = t0; i < t1 && finite; ++i) finite = std::isfinite(v[i]);
      }
      if (!finite) {
        bad.push_back({s, p});
        break;
      }
    }
  }
  return bad;
}

void CapturedBatch::drop_samples(const std::vector<int64_t>& positions) {
  if (positions.empty()) return;
  const std::size_t row = std::size_t(hidden) * dtype_size(dtype);  // bytes of one token's state
  CapturedBatch kept;
  kept.hidden = hidden;
  kept.dtype = dtype;
  kept.states.resize(states.size());
  kept.routed_width = routed_width;
  kept.offsets.push_back(0);
  std::size_t next = 0;
  for (int64_t s = 0; s < num_samples(); ++s) {
    if (next < positions.size() && positions[next] == s) {
      ++next;
      continue;
    }
    const int64_t t0 = offsets[s], t1 = offsets[s + 1];
    kept.sample_index.push_back(sample_index[s]);
    kept.input_ids.insert(kept.input_ids.end(), input_ids.begin() + t0, input_ids.begin() + t1);
    kept.loss_mask.insert(kept.loss_mask.end(), loss_mask.begin() + t0, loss_mask.begin() + t1);
    kept.offsets.push_back(kept.offsets.back() + (t1 - t0));
    for (std::size_t p = 0; p < states.size(); ++p)
      kept.states[p].insert(kept.states[p].end(), states[p].begin() + long(std::size_t(t0) * row),
                            states[p].begin() + long(std::size_t(t1) * row));
    kept.routed_experts.insert(kept.routed_experts.end(), routed_experts.begin() + t0 * routed_width,
                               routed_experts.begin() + t1 * routed_width);
  }
  *this = std::move(kept);
}

}  // namespace layertap
