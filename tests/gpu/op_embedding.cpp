// kernels/embedding.cu: exact row copies (bit for bit) at H that are and are not multiples of the
// 8-element vector width, guard regions, and the device-side bad-token flag. Rows: op_cases.cpp.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <random>
#include <vector>

#include "gpu_compare.hpp"
#include "gpu_test.hpp"
#include "kernels/embedding.cuh"
#include "op_table.hpp"

namespace {

using namespace layertap::gpu_test;

int run_case(std::int64_t T, std::int64_t H, std::int64_t V, const std::vector<std::int64_t>& bad_at,
             std::uint64_t seed, cudaStream_t stream) {
  std::mt19937_64 rng(seed);
  const std::vector<bf16_bits> table = random_bf16(rng, V * H, -2.0f, 2.0f);  // (V, H)
  std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(V - 1));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(T));
  for (auto& x : ids) x = id(rng);
  for (std::size_t k = 0; k < bad_at.size(); ++k)
    ids[std::size_t(bad_at[k])] = k % 2 == 0 ? static_cast<std::int32_t>(V) : -1;  // just past the end, negative

  Guarded<bf16_bits> d_table(V * H), d_out(T * H);
  Guarded<std::int32_t> d_ids(T), d_bad(1);
  d_table.upload(table);
  d_ids.upload(ids);
  d_bad.upload({0x7f7f7f7f});
  poison_bf16(d_out);
  layertap::kernels::embedding_lookup(as_bf16(d_out.data()), d_ids.data(), as_bf16(d_table.data()), T, H, V,
                                      d_bad.data(), stream);
  LT_CUDA_CHECK(cudaStreamSynchronize(stream));

  const std::vector<bf16_bits> out = d_out.download();
  std::int64_t wrong = 0;
  for (std::int64_t t = 0; t < T; ++t) {
    const std::int32_t i = ids[std::size_t(t)];
    const bool ok = i >= 0 && i < V;
    for (std::int64_t c = 0; c < H; ++c)
      wrong += out[std::size_t(t * H + c)] != (ok ? table[std::size_t(i * H + c)] : bf16_bits(0));
  }
  const std::int32_t expected_bad =
      bad_at.empty() ? 0x7f7f7f7f : static_cast<std::int32_t>(*std::min_element(bad_at.begin(), bad_at.end()));
  const std::int32_t got_bad = d_bad.download()[0];
  const std::int64_t damage = d_out.guard_damage() + d_table.guard_damage() + d_ids.guard_damage();
  const bool pass = wrong == 0 && got_bad == expected_bad && damage == 0;
  std::printf("%s T=%-5lld H=%-5lld V=%-6lld bad=%zu: %lld elements differ (exact copy required), flag %d "
              "(expected %d), guard damage %lld\n",
              pass ? "ok  " : "FAIL", (long long)T, (long long)H, (long long)V, bad_at.size(), (long long)wrong,
              got_bad, expected_bad, (long long)damage);
  return pass ? 0 : 1;
}

}  // namespace

namespace layertap::gpu_test::ops {

int run(const Embedding& c, std::uint64_t seed, cudaStream_t stream) {
  return run_case(c.T, c.H, c.V, c.bad_at, seed, stream);
}

}  // namespace layertap::gpu_test::ops
