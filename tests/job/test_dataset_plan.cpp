// The dataset plan (job/dataset_plan), in process: the batch packing every rank plans alike and the
// sample-length check that must name the line.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/dataset.hpp"
#include "job/dataset_plan.hpp"

namespace layertap::job {
namespace {

// The rules of plan_batches, checked on its output: contiguous from `begin` to the end, in input
// order, each batch within the budget, and greedy (the next sample would not have fitted).
void expect_valid_batches(const std::vector<int64_t>& lengths, std::size_t begin, int64_t max_tokens) {
  const auto batches = plan_batches(lengths, begin, max_tokens);
  std::size_t next = begin;
  for (const auto& [first, last] : batches) {
    ASSERT_EQ(first, next);
    ASSERT_LT(first, last);
    int64_t tokens = 0;
    for (std::size_t i = first; i < last; ++i) tokens += lengths[i];
    EXPECT_LE(tokens, max_tokens);
    if (last < lengths.size()) EXPECT_GT(tokens + lengths[last], max_tokens) << "batch [" << first << ", " << last << ")";
    next = last;
  }
  EXPECT_EQ(next, std::max(begin, lengths.size()));
}

}  // namespace

TEST(PlanBatches, PacksInOrderWithinTheBudget) {
  EXPECT_TRUE(plan_batches({}, 0, 8).empty());
  EXPECT_TRUE(plan_batches({3, 4}, 2, 8).empty());
  using B = std::vector<std::pair<std::size_t, std::size_t>>;
  EXPECT_EQ(plan_batches({3, 4, 1, 8, 2}, 0, 8), (B{{0, 3}, {3, 4}, {4, 5}}));
  EXPECT_EQ(plan_batches({3, 4, 1, 8, 2}, 1, 8), (B{{1, 3}, {3, 4}, {4, 5}}));  // a resume starts mid-way
  EXPECT_EQ(plan_batches({8, 8}, 0, 8), (B{{0, 1}, {1, 2}}));                  // exactly the budget
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t max_tokens = 1 + int64_t(rng() % 64);
    std::vector<int64_t> lengths(rng() % 40);
    for (int64_t& n : lengths) n = 1 + int64_t(rng() % std::uint32_t(max_tokens));
    expect_valid_batches(lengths, lengths.empty() ? 0 : rng() % lengths.size(), max_tokens);
  }
}

TEST(CheckSampleLengths, NamesTheLineOfTheFirstSampleOverTheBudget) {
  io::DatasetIndex index;
  index.samples = {{0, 10, 1, 5}, {11, 10, 3, 9}, {22, 10, 4, 12}};  // line 2 is blank
  EXPECT_NO_THROW(check_sample_lengths(index, "d.jsonl", 12));
  try {
    check_sample_lengths(index, "d.jsonl", 8);
    FAIL() << "a 9-token sample passed a budget of 8";
  } catch (const Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("'d.jsonl' line 3 (sample 1) has 9 tokens, more than --max-batch-tokens 8"), std::string::npos) << m;
  }
}

}  // namespace layertap::job
