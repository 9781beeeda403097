#include "job/batch_plan.hpp"

#include <algorithm>

namespace layertap::job {

std::vector<Batch> plan_batches(const std::vector<int64_t>& lengths, std::size_t begin, int64_t max_tokens) {
  std::vector<Batch> batches;
  Batch open;
  int64_t used = 0;  // tokens of `open`
  const auto close = [&] {
    if (!open.empty()) batches.push_back(std::move(open));
    open.clear();
    used = 0;
  };
  for (std::size_t i = begin; i < lengths.size(); ++i) {
    const int64_t n = lengths[i];
    if (n <= max_tokens) {
      if (used + n > max_tokens) close();
      open.push_back({i, 0, n});
      used += n;
      continue;
    }
    for (int64_t t = 0; t < n;) {  // in chunks: what the open batch has left, then whole batches
      if (used == max_tokens) close();
      const int64_t take = std::min(n - t, max_tokens - used);
      open.push_back({i, t, t + take});
      used += take;
      t += take;
    }
  }
  close();
  return batches;
}

}  // namespace layertap::job
