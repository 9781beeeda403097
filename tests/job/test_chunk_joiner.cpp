// The chunk joiner (job/chunk_joiner.hpp): over batches planned with chunked samples, the states
// handed on are every sample's rows whole, in order, each exactly once, with nothing of an
// unfinished sample handed on early.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "job/chunk_joiner.hpp"

namespace layertap::job {
namespace {

constexpr int64_t kPoints = 2;

// A batch's states [P][T, 1] of int32 values: point p, sample s, token t holds (p * 1000 + s) * 1000 + t.
std::vector<std::vector<std::byte>> states_of(const Batch& batch) {
  std::vector<std::vector<std::byte>> states(kPoints);
  for (int64_t p = 0; p < kPoints; ++p)
    for (const Segment& s : batch)
      for (int64_t t = s.begin; t < s.end; ++t) {
        const int32_t v = int32_t((p * 1000 + int64_t(s.sample)) * 1000 + t);
        const auto* b = reinterpret_cast<const std::byte*>(&v);
        states[std::size_t(p)].insert(states[std::size_t(p)].end(), b, b + sizeof v);
      }
  return states;
}

void expect_joined_whole(const std::vector<int64_t>& lengths, int64_t max_tokens) {
  ChunkJoiner joiner(sizeof(int32_t));
  std::vector<std::vector<int32_t>> got(kPoints);
  std::size_t ended = 0;
  for (const Batch& batch : plan_batches(lengths, 0, max_tokens)) {
    const auto whole = joiner.join(batch, lengths, states_of(batch));
    ASSERT_EQ(whole.size(), std::size_t(kPoints));
    const std::vector<std::size_t> ending = samples_ending_in(batch, lengths);
    int64_t rows = 0;
    for (const std::size_t i : ending) {
      EXPECT_EQ(i, ended++) << "samples end in order";
      rows += lengths[i];
    }
    for (std::size_t p = 0; p < whole.size(); ++p) {
      ASSERT_EQ(int64_t(whole[p].size()), rows * int64_t(sizeof(int32_t))) << "only the samples that end here";
      const std::size_t n = whole[p].size() / sizeof(int32_t);
      const std::size_t at = got[p].size();
      got[p].resize(at + n);
      std::memcpy(got[p].data() + at, whole[p].data(), whole[p].size());
    }
  }
  EXPECT_EQ(ended, lengths.size());
  for (int64_t p = 0; p < kPoints; ++p) {
    std::vector<int32_t> want;
    for (std::size_t s = 0; s < lengths.size(); ++s)
      for (int64_t t = 0; t < lengths[s]; ++t) want.push_back(int32_t((p * 1000 + int64_t(s)) * 1000 + t));
    EXPECT_EQ(got[std::size_t(p)], want) << "point " << p;
  }
}

}  // namespace

TEST(ChunkJoiner, EverySampleWholeInOrderOnce) {
  expect_joined_whole({3, 20, 2}, 8);  // chunks sharing batches, a middle chunk alone
  expect_joined_whole({20}, 8);
  expect_joined_whole({9, 1}, 8);      // a last chunk of one token
  expect_joined_whole({3, 2, 1}, 1);   // one-token chunks
  std::mt19937 rng(3);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t max_tokens = 1 + int64_t(rng() % 16);
    std::vector<int64_t> lengths(1 + rng() % 12);
    for (int64_t& n : lengths) n = 1 + int64_t(rng() % std::uint32_t(3 * max_tokens));
    expect_joined_whole(lengths, max_tokens);
  }
}

TEST(ChunkJoiner, RanksThatDoNotCaptureGetNothing) {
  ChunkJoiner joiner(4);
  const std::vector<int64_t> lengths{20};
  for (const Batch& b : plan_batches(lengths, 0, 8)) EXPECT_TRUE(joiner.join(b, lengths, {}).empty());
}

}  // namespace layertap::job
