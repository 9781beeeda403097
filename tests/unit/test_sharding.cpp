#include <gtest/gtest.h>

#include <numeric>
#include <random>

#include "comm/sharding.hpp"
#include "comm/world_layout.hpp"
#include "core/error.hpp"

namespace layertap {

TEST(WorldLayout, GroupsAreConsecutiveRanks) {
  const WorldLayout w = make_world_layout(5, 8, 4);
  EXPECT_EQ(w.dp, 2);
  EXPECT_EQ(w.dp_rank, 1);
  EXPECT_EQ(w.tp_rank, 1);
  EXPECT_FALSE(w.is_writer());
  EXPECT_TRUE(make_world_layout(4, 8, 4).is_writer());
  EXPECT_THROW(make_world_layout(0, 6, 4), Error);
  EXPECT_THROW(make_world_layout(0, 4, 0), Error);
}

TEST(Sharding, CoversEverySampleOnceInOrderAndBalancesTokens) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int64_t> len(1, 300);
  for (int groups : {1, 2, 3, 4, 8}) {
    std::vector<int64_t> lengths(1000);
    for (auto& n : lengths) n = len(rng);
    const int64_t total = std::accumulate(lengths.begin(), lengths.end(), int64_t(0));
    const auto ranges = split_by_tokens(lengths, groups);
    ASSERT_EQ(ranges.size(), std::size_t(groups));
    std::size_t next = 0;
    for (const auto& [first, last] : ranges) {
      EXPECT_EQ(first, next);
      next = last;
      const int64_t tokens = std::accumulate(lengths.begin() + long(first), lengths.begin() + long(last), int64_t(0));
      EXPECT_LE(std::abs(tokens - total / groups), 300) << "groups " << groups;  // within one sample
    }
    EXPECT_EQ(next, lengths.size());
    EXPECT_EQ(split_by_tokens(lengths, groups), ranges);  // deterministic
  }
}

TEST(Sharding, FewSamplesLeaveLaterGroupsEmpty) {
  const auto ranges = split_by_tokens({5, 5}, 4);
  std::size_t covered = 0;
  for (const auto& [first, last] : ranges) covered += last - first;
  EXPECT_EQ(covered, 2u);
  EXPECT_EQ(ranges.back().second, 2u);
}

}  // namespace layertap
