#include "comm/sharding.hpp"

#include "core/error.hpp"

namespace layertap {

std::vector<std::pair<std::size_t, std::size_t>> split_by_tokens(const std::vector<int64_t>& lengths, int groups) {
  LT_CHECK(groups >= 1, "cannot split a dataset into ", groups, " groups");
  int64_t total = 0;
  for (int64_t n : lengths) total += n;
  std::vector<std::pair<std::size_t, std::size_t>> ranges(static_cast<std::size_t>(groups));
  std::size_t i = 0;
  int64_t start = 0;  // first token of sample i
  for (int g = 0; g < groups; ++g) {
    // Integer bound: samples starting before ceil((g+1)*T/groups) belong to group g or earlier.
    const int64_t end = g + 1 == groups ? total + 1 : ((g + 1) * total + groups - 1) / groups;
    const std::size_t first = i;
    while (i < lengths.size() && start < end) start += lengths[i++];
    ranges[std::size_t(g)] = {first, i};
  }
  return ranges;
}

}  // namespace layertap
