// The Hugging Face reference states of a golden fixture (tests/fixtures/models/<name>/
// reference.safetensors, written by tools/make_fixtures.py), shared by the golden, MPI and GPU
// tests. Sample s holds `sample{s}.input_ids` int32 [T_s] and `sample{s}.states` float32
// [L+2, T_s, H]: index k < L the input to layer k, L the last layer's output, L+1 after the norm.
#pragma once
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "model/safetensors.hpp"

namespace layertap::test {

struct FixtureReference {
  std::vector<std::vector<int32_t>> tokens;  // [S][T_s]
  std::vector<std::vector<float>> states;    // [S][(L+2) * T_s * H]

  // State `id` of sample s: [T_s, H].
  const float* state(std::size_t s, int64_t id, int64_t H) const {
    return states[s].data() + std::size_t(id) * tokens[s].size() * std::size_t(H);
  }
};

inline FixtureReference load_fixture_reference(const std::string& path, int64_t L, int64_t H) {
  const Checkpoint ref({path});
  FixtureReference r;
  for (int s = 0;; ++s) {
    const std::string ids_name = cat("sample", s, ".input_ids");
    if (!ref.has(ids_name)) break;
    const TensorInfo& ids = ref.info(ids_name);
    LT_CHECK(ids.dtype == DType::I32, path, ": ", ids_name, " is not int32");
    const int64_t T = ids.shape.at(0);
    std::vector<int32_t> tok(static_cast<std::size_t>(T));
    std::memcpy(tok.data(), ref.read_bytes(ids_name).data(), tok.size() * sizeof(int32_t));
    r.tokens.push_back(std::move(tok));
    r.states.push_back(ref.read(cat("sample", s, ".states"), {L + 2, T, H}));
  }
  LT_CHECK(r.tokens.size() >= 2, path, " holds fewer than 2 samples");
  return r;
}

// Relative Frobenius error of `got` against `want` over n values; infinite on any NaN/Inf.
inline double relative_error(const float* got, const float* want, std::size_t n) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (!std::isfinite(got[i])) return INFINITY;
    const double d = double(got[i]) - double(want[i]);
    num += d * d;
    den += double(want[i]) * double(want[i]);
  }
  return std::sqrt(num / den);
}

}  // namespace layertap::test
