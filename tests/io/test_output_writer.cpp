#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <thread>

#include "core/digest.hpp"
#include "core/error.hpp"
#include "io/output_writer.hpp"
#include "io/progress.hpp"
#include "io/shard_reader.hpp"
#include "io_test_util.hpp"

namespace layertap::io {
namespace {

namespace fs = std::filesystem;
using test::make_batch;
using test::TempDir;
using test::test_meta;

// Batches of two samples each, 3 + 4 tokens, sample indices counting up from `first`.
std::vector<CapturedBatch> numbered_batches(int n, const OutputMeta& meta, int64_t first = 0) {
  std::vector<CapturedBatch> out;
  for (int i = 0; i < n; ++i) out.push_back(make_batch({first + 2 * i, first + 2 * i + 1}, {3, 4}, meta));
  return out;
}

// Waits up to 10 s for `done`.
template <typename F>
bool eventually(F done) {
  for (int i = 0; i < 1000 && !done(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return done();
}

TEST(OutputWriter, RotatesShardsWithoutSplittingBatches) {
  TempDir dir;
  const auto meta = test_meta(3, 16, DType::BF16);
  const auto batches = numbered_batches(5, meta);
  const int64_t batch_bytes = 7 * 3 * 16 * 2;
  std::vector<ShardInfo> shards;
  {
    // A shard closes once it holds >= 2 batches minus a byte: after its second batch.
    OutputWriter w(dir.path(), "shard", meta, 2 * batch_bytes - 1, {}, 1);
    for (const auto& b : batches) w.submit(b);
    shards = w.finish();
    EXPECT_EQ(w.bytes_written(), 5 * batch_bytes);
    EXPECT_EQ(w.shards_closed(), 3);
  }
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"shard-00000.h5", "shard-00001.h5", "shard-00002.h5",
                                                   "shard.progress.json"}));
  ASSERT_EQ(shards.size(), 3u);
  EXPECT_EQ(read_progress(dir.path(), "shard").size(), 3u);  // the record a resume trusts
  const std::vector<std::vector<CapturedBatch>> expected = {
      {batches[0], batches[1]}, {batches[2], batches[3]}, {batches[4]}};
  for (std::size_t i = 0; i < 3; ++i) {
    SCOPED_TRACE(shards[i].file);
    const auto file = dir.path() / shards[i].file;
    EXPECT_EQ(shards[i].samples, int64_t(2 * expected[i].size()));
    EXPECT_EQ(shards[i].tokens, int64_t(7 * expected[i].size()));
    EXPECT_EQ(shards[i].bytes, int64_t(fs::file_size(file)));
    EXPECT_EQ(shards[i].sha256, sha256_file(file.string()));
    EXPECT_EQ(shards[i].first_sample, expected[i].front().sample_index.front());
    EXPECT_EQ(shards[i].last_sample, expected[i].back().sample_index.back());
    EXPECT_EQ(read_progress(dir.path(), "shard")[i].sha256, shards[i].sha256);
    test::expect_shard_holds(ShardReader(file), expected[i]);
  }
}

TEST(OutputWriter, ManySmallShardsKeepTheirOrder) {
  TempDir dir;
  const auto meta = test_meta(1, 4, DType::F32);
  const auto batches = numbered_batches(24, meta);
  OutputWriter w(dir.path(), "part", meta, 1, {}, 3);  // every batch closes its shard
  for (const auto& b : batches) w.submit(b);
  const auto shards = w.finish();
  ASSERT_EQ(shards.size(), batches.size());
  for (std::size_t i = 0; i < shards.size(); ++i) {
    EXPECT_EQ(shards[i].file, cat("part-", i < 10 ? "0000" : "000", i, ".h5"));
    EXPECT_EQ(ShardReader(dir.path() / shards[i].file).sample_index(), batches[i].sample_index);
  }
  EXPECT_EQ(dir.files().size(), batches.size() + 1);  // + part.progress.json
}

TEST(OutputWriter, FinishWithNothingSubmittedWritesNoShard) {
  TempDir dir;
  OutputWriter w(dir.path(), "shard", test_meta(1, 4, DType::F32), 1 << 20);
  EXPECT_TRUE(w.finish().empty());
  EXPECT_TRUE(dir.files().empty());
  EXPECT_THROW(w.finish(), Error);
  EXPECT_THROW(w.submit(make_batch({0}, {1}, test_meta(1, 4, DType::F32))), Error);
}

TEST(OutputWriter, DestroyedWithoutFinishLeavesNoPartialShard) {
  TempDir dir;
  const auto meta = test_meta(2, 8, DType::BF16);
  const auto batches = numbered_batches(3, meta);
  {
    OutputWriter w(dir.path(), "shard", meta, 1 << 30);
    for (const auto& b : batches) w.submit(b);
    ASSERT_TRUE(eventually([&] { return w.bytes_written() == 3 * 7 * 2 * 8 * 2; }));
    EXPECT_EQ(dir.files(), std::vector<std::string>{"shard-00000.h5.tmp"});
  }
  EXPECT_TRUE(dir.files().empty());
}

TEST(OutputWriter, ClosedShardsStayWhenDestroyedWithoutFinish) {
  TempDir dir;
  const auto meta = test_meta(2, 8, DType::BF16);
  {
    OutputWriter w(dir.path(), "shard", meta, 1);  // every batch closes its shard
    for (const auto& b : numbered_batches(2, meta)) w.submit(b);
    ASSERT_TRUE(eventually([&] { return w.shards_closed() == 2; }));
  }
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"shard-00000.h5", "shard-00001.h5", "shard.progress.json"}));
}

TEST(OutputWriter, SubmitValidatesTheBatch) {
  TempDir dir;
  OutputWriter w(dir.path(), "shard", test_meta(2, 8, DType::BF16), 1 << 20);
  try {
    w.submit(make_batch({0}, {2}, test_meta(2, 12, DType::BF16)));
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("hidden size 12, writer expects 8"), std::string::npos)
        << e.what();
  }
  EXPECT_TRUE(w.finish().empty());
}

TEST(OutputWriter, WriterErrorReachesSubmit) {
  TempDir dir;
  const auto out = dir.path() / "out";
  fs::create_directory(out);
  const auto meta = test_meta(2, 8, DType::BF16);
  OutputWriter w(out, "shard", meta, 1 << 20, {}, 1);
  fs::remove_all(out);  // the writer thread cannot create its shard
  std::string message;
  for (int i = 0; i < 1000 && message.empty(); ++i) {
    try {
      w.submit(make_batch({i}, {2}, meta));
    } catch (const Error& e) {
      message = e.what();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_NE(message.find("shard-00000.h5.tmp"), std::string::npos) << message;
  EXPECT_NE(message.find("output writer"), std::string::npos) << message;
  EXPECT_THROW(w.submit(make_batch({0}, {2}, meta)), Error);  // stays failed
  EXPECT_THROW(w.finish(), Error);
}

TEST(OutputWriter, WriterErrorReachesFinish) {
  TempDir dir;
  const auto meta = test_meta(2, 8, DType::BF16);
  OutputWriter w(dir.path(), "shard", meta, 1);  // every batch closes its shard
  const auto batches = numbered_batches(2, meta);
  w.submit(batches[0]);
  ASSERT_TRUE(eventually([&] { return w.shards_closed() == 1; }));
  fs::create_directory(dir.path() / "shard-00001.h5.tmp");  // blocks the next shard's temp name
  w.submit(batches[1]);
  try {
    w.finish();
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("shard-00001.h5.tmp"), std::string::npos) << e.what();
  }
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"shard-00000.h5", "shard-00001.h5.tmp", "shard.progress.json"}));
}

TEST(OutputWriter, RejectsMissingDirectory) {
  TempDir dir;
  EXPECT_THROW(OutputWriter(dir.path() / "missing", "shard", test_meta(1, 4, DType::F32), 1),
               Error);
}

TEST(WriteJsonAtomically, ReplacesTheFileWholly) {
  TempDir dir;
  const auto file = dir.path() / "manifest.json";
  write_json_atomically(file, nlohmann::json{{"a", 1}});
  write_json_atomically(file, nlohmann::json{{"b", {1, 2, 3}}});
  EXPECT_EQ(dir.files(), std::vector<std::string>{"manifest.json"});
  std::ifstream in(file);
  EXPECT_EQ(nlohmann::json::parse(in), (nlohmann::json{{"b", {1, 2, 3}}}));
  EXPECT_THROW(write_json_atomically(dir.path() / "missing" / "m.json", nlohmann::json{}), Error);
}

}  // namespace
TEST(OutputWriter, ResumedWriterKeepsShardsAndContinuesNumbering) {
  TempDir dir;
  const auto meta = test_meta(1, 4, DType::F32);
  const auto batches = numbered_batches(4, meta);
  std::vector<ShardInfo> first;
  {
    OutputWriter w(dir.path(), "shard", meta, 1);  // one shard per batch
    w.submit(batches[0]);
    w.submit(batches[1]);
    first = w.finish();
  }
  OutputWriter w(dir.path(), "shard", meta, 1, read_progress(dir.path(), "shard"));
  w.submit(batches[2]);
  w.submit(batches[3]);
  const auto all = w.finish();
  ASSERT_EQ(all.size(), 4u);
  EXPECT_EQ(all[0].sha256, first[0].sha256);
  EXPECT_EQ(all[2].file, "shard-00002.h5");
  EXPECT_EQ(read_progress(dir.path(), "shard").size(), 4u);
  EXPECT_EQ(ShardReader(dir.path() / all[3].file).sample_index(), batches[3].sample_index);
}

}  // namespace layertap::io
