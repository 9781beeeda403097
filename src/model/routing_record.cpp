#include "model/routing_record.hpp"

#include <limits>

#include "core/error.hpp"

namespace layertap {

std::vector<int64_t> moe_layer_ids(const ModelConfig& cfg) {
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < cfg.num_layers; ++i)
    if (cfg.is_moe_layer(i)) ids.push_back(i);
  return ids;
}

std::vector<int16_t> token_major_routing(const std::vector<std::vector<int32_t>>& per_layer, int64_t T, int64_t k) {
  const auto M = int64_t(per_layer.size());
  std::vector<int16_t> rows(std::size_t(T * M * k));
  for (int64_t m = 0; m < M; ++m) {
    LT_CHECK(int64_t(per_layer[std::size_t(m)].size()) == T * k, "routing of MoE layer ", m, " holds ",
             per_layer[std::size_t(m)].size(), " choices, expected ", T, " tokens x ", k);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t j = 0; j < k; ++j) {
        const int32_t e = per_layer[std::size_t(m)][std::size_t(t * k + j)];
        LT_CHECK(e >= 0 && e <= std::numeric_limits<int16_t>::max(), "expert id ", e, " does not fit the record");
        rows[std::size_t((t * M + m) * k + j)] = int16_t(e);
      }
  }
  return rows;
}

std::vector<std::vector<int32_t>> layer_major_routing(const std::vector<int16_t>& rows, int64_t M, int64_t k) {
  LT_CHECK(M > 0 && k > 0 && int64_t(rows.size()) % (M * k) == 0, "a routing record of ", rows.size(),
           " ids is not whole rows of ", M, " layers x ", k);
  const int64_t T = int64_t(rows.size()) / (M * k);
  std::vector<std::vector<int32_t>> per_layer(std::size_t(M), std::vector<int32_t>(std::size_t(T * k)));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < k; ++j)
        per_layer[std::size_t(m)][std::size_t(t * k + j)] = rows[std::size_t((t * M + m) * k + j)];
  return per_layer;
}

}  // namespace layertap
