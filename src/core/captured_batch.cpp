#include "core/captured_batch.hpp"

#include "core/error.hpp"

namespace layertap {

void CapturedBatch::validate(int64_t expected_points, int64_t expected_hidden,
                             DType expected_dtype) const {
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
}

}  // namespace layertap
