#include "job/verify_token_stats.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <utility>

#include "core/error.hpp"
#include "core/text.hpp"
#include "io/shard_reader.hpp"

namespace layertap::job {

void report_token_stats(const std::vector<std::filesystem::path>& shards, VerifyReport& report) {
  std::map<int32_t, int64_t> count;
  int64_t masked = 0;
  for (const std::filesystem::path& file : shards) {
    std::vector<int32_t> ids;
    std::vector<uint8_t> mask;
    try {
      const io::ShardReader r(file);
      ids = r.input_ids();
      mask = r.loss_mask();
    } catch (const Error& e) {
      report.problem(cat(file.filename().string(), ": ", e.what(), " (left out of the token statistics)"));
      continue;
    }
    for (std::size_t t = 0; t < ids.size(); ++t)
      if (mask[t]) {
        ++count[ids[t]];
        ++masked;
      }
  }
  std::vector<int64_t> freq;
  for (const auto& [id, n] : count) freq.push_back(n);
  std::sort(freq.rbegin(), freq.rend());
  std::ostream& out = report.out();
  out << "tokens: " << masked << " loss-masked, " << count.size() << " distinct";
  for (std::size_t k : {1000, 8000, 32000}) {
    if (count.size() <= k / 2) continue;
    const int64_t covered = std::accumulate(freq.begin(), freq.begin() + long(std::min(k, freq.size())), int64_t(0));
    out << "; the " << k << " most frequent cover " << fixed(100.0 * double(covered) / double(masked), 2) << "%";
  }
  out << "\n";
  std::vector<std::pair<int64_t, int32_t>> top;
  for (const auto& [id, n] : count) top.push_back({n, id});
  std::sort(top.begin(), top.end(), [](const auto& a, const auto& b) { return a.first != b.first ? a.first > b.first : a.second < b.second; });
  out << "tokens: most frequent (id x count):";
  for (std::size_t i = 0; i < std::min<std::size_t>(10, top.size()); ++i)
    out << " " << top[i].second << "x" << top[i].first;
  out << "\n";
}

}  // namespace layertap::job
