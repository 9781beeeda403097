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

// The rules of plan_batches, checked on its output: every sample from `begin` covered in order by
// contiguous segments; each batch within the budget; a sample that fits a batch never split; only a
// batch's first segment continues a sample and only its last is unfinished; greedy: a batch closes
// full, or before a sample that fits a batch but not what is left.
void expect_valid_batches(const std::vector<int64_t>& lengths, std::size_t begin, int64_t max_tokens) {
  const std::vector<Batch> batches = plan_batches(lengths, begin, max_tokens);
  std::size_t sample = begin;
  int64_t at = 0;  // next token of `sample`
  for (std::size_t b = 0; b < batches.size(); ++b) {
    const Batch& batch = batches[b];
    ASSERT_FALSE(batch.empty());
    int64_t tokens = 0;
    for (std::size_t k = 0; k < batch.size(); ++k) {
      const Segment& s = batch[k];
      ASSERT_EQ(s.sample, sample) << "batch " << b << " segment " << k;
      ASSERT_EQ(s.begin, at);
      ASSERT_LT(s.begin, s.end);
      ASSERT_LE(s.end, lengths[s.sample]);
      if (lengths[s.sample] <= max_tokens) {
        EXPECT_EQ(s.tokens(), lengths[s.sample]) << "a sample that fits was split";
      }
      if (k > 0) {
        EXPECT_EQ(s.begin, 0) << "only the first segment continues a sample";
      }
      if (k + 1 < batch.size()) {
        EXPECT_EQ(s.end, lengths[s.sample]) << "only the last segment is unfinished";
      }
      tokens += s.tokens();
      at = s.end;
      if (at == lengths[sample]) ++sample, at = 0;
    }
    EXPECT_LE(tokens, max_tokens);
    if (b + 1 < batches.size() && tokens < max_tokens) {
      const int64_t next = lengths[batches[b + 1].front().sample];
      EXPECT_LE(next, max_tokens) << "a long sample starts in the batch before it";
      EXPECT_GT(tokens + next, max_tokens) << "batch " << b << " closed with room for the next sample";
    }
  }
  EXPECT_EQ(sample, std::max(begin, lengths.size()));
}

}  // namespace

TEST(PlanBatches, PacksInOrderWithinTheBudget) {
  EXPECT_TRUE(plan_batches({}, 0, 8).empty());
  EXPECT_TRUE(plan_batches({3, 4}, 2, 8).empty());
  using B = std::vector<Batch>;
  EXPECT_EQ(plan_batches({3, 4, 1, 8, 2}, 0, 8), (B{{{0, 0, 3}, {1, 0, 4}, {2, 0, 1}}, {{3, 0, 8}}, {{4, 0, 2}}}));
  EXPECT_EQ(plan_batches({3, 4, 1, 8, 2}, 1, 8), (B{{{1, 0, 4}, {2, 0, 1}}, {{3, 0, 8}}, {{4, 0, 2}}}));  // a resume
  EXPECT_EQ(plan_batches({8, 8}, 0, 8), (B{{{0, 0, 8}}, {{1, 0, 8}}}));  // exactly the budget
  std::mt19937 rng(7);
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t max_tokens = 1 + int64_t(rng() % 64);
    std::vector<int64_t> lengths(rng() % 40);
    for (int64_t& n : lengths) n = 1 + int64_t(rng() % std::uint32_t(max_tokens));
    expect_valid_batches(lengths, lengths.empty() ? 0 : rng() % lengths.size(), max_tokens);
  }
}

TEST(PlanBatches, LongerSamplesRunInChunksSharingBatches) {
  using B = std::vector<Batch>;
  // The long sample fills what the first batch has left, then whole batches; a short one after it
  // that does not fit beside its last chunk opens the next batch.
  EXPECT_EQ(plan_batches({3, 20, 2}, 0, 8),
            (B{{{0, 0, 3}, {1, 0, 5}}, {{1, 5, 13}}, {{1, 13, 20}}, {{2, 0, 2}}}));
  EXPECT_EQ(plan_batches({3, 19, 1}, 0, 8),  // ... and one that fits shares the last chunk's batch
            (B{{{0, 0, 3}, {1, 0, 5}}, {{1, 5, 13}}, {{1, 13, 19}, {2, 0, 1}}}));
  EXPECT_EQ(plan_batches({20}, 0, 8), (B{{{0, 0, 8}}, {{0, 8, 16}}, {{0, 16, 20}}}));
  EXPECT_EQ(plan_batches({9}, 0, 8), (B{{{0, 0, 8}}, {{0, 8, 9}}}));  // the boundary at the last token
  EXPECT_EQ(plan_batches({3, 2}, 0, 1),  // one-token chunks
            (B{{{0, 0, 1}}, {{0, 1, 2}}, {{0, 2, 3}}, {{1, 0, 1}}, {{1, 1, 2}}}));
  EXPECT_EQ(plan_batches({8, 5}, 0, 8), (B{{{0, 0, 8}}, {{1, 0, 5}}}));  // a full batch closes first
  std::mt19937 rng(11);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t max_tokens = 1 + int64_t(rng() % 32);
    std::vector<int64_t> lengths(rng() % 30);
    for (int64_t& n : lengths) n = 1 + int64_t(rng() % std::uint32_t(4 * max_tokens));
    expect_valid_batches(lengths, lengths.empty() ? 0 : rng() % lengths.size(), max_tokens);
  }
}

TEST(CheckSampleLengths, NamesTheLineOfTheFirstSampleOverTheBudget) {
  io::DatasetIndex index;
  index.samples = {{0, 10, 1, 5}, {11, 10, 3, 9}, {22, 10, 4, 12}};  // line 2 is blank
  EXPECT_NO_THROW(check_sample_lengths(index, "d.jsonl", {12, false, 0}));
  EXPECT_NO_THROW(check_sample_lengths(index, "d.jsonl", {8, true, 0}));  // in chunks
  const auto message = [&](const SampleLimits& limits) {
    try {
      check_sample_lengths(index, "d.jsonl", limits);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  std::string m = message({8, false, 0});
  EXPECT_NE(m.find("'d.jsonl' line 3 (sample 1) has 9 tokens, more than --max-batch-tokens 8"), std::string::npos) << m;
  EXPECT_NE(m.find("does not run a sample in chunks"), std::string::npos) << m;
  m = message({8, true, 10});  // beyond the model's positions, chunks or not
  EXPECT_NE(m.find("'d.jsonl' line 4 (sample 2) has 12 tokens, more than the model's max_position_embeddings 10"),
            std::string::npos)
      << m;
  EXPECT_NO_THROW(check_sample_lengths(index, "d.jsonl", {8, true, 12}));
  m = message({8, true, 0, 10});  // --max-sample-tokens: chunks up to it, beyond it refused
  EXPECT_NE(m.find("'d.jsonl' line 4 (sample 2) has 12 tokens, more than --max-sample-tokens 10"), std::string::npos)
      << m;
  EXPECT_NO_THROW(check_sample_lengths(index, "d.jsonl", {8, true, 100, 12}));
  m = message({8, true, 100, 101});  // a bound the model's positions cannot reach
  EXPECT_NE(m.find("--max-sample-tokens 101 is more than the model's max_position_embeddings 100"), std::string::npos)
      << m;
}

}  // namespace layertap::job
