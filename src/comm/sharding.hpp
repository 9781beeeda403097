// Dataset sharding across data-parallel groups: contiguous runs of samples balanced by token
// count. Deterministic (a pure function of the sample lengths and the group count), so every
// rank, and a later resume, computes the same assignment; contiguity keeps shards in input order.
#pragma once
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

namespace layertap {

// Group g gets samples [first, last): those whose first token falls in [g*T/groups, (g+1)*T/groups)
// with T the total token count. A group may be empty when samples are few.
std::vector<std::pair<std::size_t, std::size_t>> split_by_tokens(const std::vector<int64_t>& lengths, int groups);

}  // namespace layertap
