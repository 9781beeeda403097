// Progress records on resume (io/progress check_progress, read_progress): of the records a writer
// keeps (<stem>.progress.json), only those true of the shards they name are kept, one row per lie
// (ranges, names, sizes, checksums, attributes); shards with skipped samples are kept; a malformed
// record is refused naming its file.
#include <gtest/gtest.h>

#include <fstream>
#include <functional>

#include "core/error.hpp"
#include "io/output_writer.hpp"
#include "io/progress.hpp"
#include "io_test_util.hpp"

namespace layertap::io {
namespace {

namespace fs = std::filesystem;
using test::make_batch;
using test::TempDir;
using test::test_meta;

constexpr auto error_of = test::error_of<Error>;  // a layertap::Error, nothing else

// --- progress records: one row per lie ------------------------------------------------------------

struct ProgressRow {
  const char* name;
  // Edits the records, the files or the expectation; returns the record index expected to be
  // dropped first (-1: all kept) and a part of the reason.
  std::function<void(std::vector<ShardInfo>&, const fs::path&, ResumeExpectation&)> edit;
  int64_t dropped_at;
  const char* why;
};

TEST(ResumeProgress, OnlyRecordsTrueOfTheirShardsAreKept) {
  const std::vector<ProgressRow> rows = {
      {"intact", [](auto&, auto&, auto&) {}, -1, ""},
      {"last sample lie", [](auto& r, auto&, auto&) { r[0].last_sample += 100; }, 0, "past the writer's last sample 5"},
      {"last sample lie inside the group",
       [](auto& r, auto&, auto& w) {
         r[0].last_sample += 100;
         w.end_sample = -1;
       },
       0, "/sample_index holds sample 1 at position 1, outside the record's range 0..101"},
      {"more samples than the range", [](auto& r, auto&, auto&) { r[2].first_sample += 1; }, 2,
       "cannot hold its 2 samples"},
      {"last sample and count lie",
       [](auto& r, auto&, auto& w) {
         r[1].last_sample += 100;
         r[1].samples += 100;
         w.end_sample = -1;
       },
       1, "holds 2 samples, the record says 102"},
      {"range shifted",
       [](auto& r, auto&, auto& w) {
         for (auto& s : r) s.first_sample += 5, s.last_sample += 5;
         w.first_sample = w.end_sample = -1;
       },
       0, "/sample_index holds sample 0 at position 0"},
      {"../x.h5", [](auto& r, auto&, auto&) { r[2].file = "../x.h5"; }, 2, "names '../x.h5'"},
      {"absolute path", [](auto& r, auto& d, auto&) { r[0].file = (d / "shard-00000.h5").string(); }, 0,
       "where this writer's shard 0 is 'shard-00000.h5'"},
      {"reordered", [](auto& r, auto&, auto&) { std::swap(r[0], r[1]); }, 0, "names 'shard-00001.h5'"},
      {"another writer's shard", [](auto& r, auto&, auto&) { r[0].file = "shard-g001-00000.h5"; }, 0, "names"},
      {"first sample after the group's", [](auto&, auto&, auto& w) { w.first_sample = 10; }, 0,
       "starts at sample 0, the writer's samples start at 10"},
      {"past the group's end", [](auto&, auto&, auto& w) { w.end_sample = 4; }, 2, "past the writer's last sample 3"},
      {"gap between records", [](auto& r, auto&, auto&) { r.erase(r.begin() + 1); }, 1, "names 'shard-00002.h5'"},
      {"truncated", [](auto&, auto& d, auto&) { fs::resize_file(d / "shard-00001.h5", 1000); }, 1,
       "the file is 1000 bytes"},
      {"deleted", [](auto&, auto& d, auto&) { fs::remove(d / "shard-00002.h5"); }, 2, "missing"},
      {"symlink", [](auto&, auto& d, auto&) {
         fs::rename(d / "shard-00000.h5", d / "elsewhere.h5");
         fs::create_symlink(d / "elsewhere.h5", d / "shard-00000.h5");
       }, 0, "not a regular file"},
      {"checksum", [](auto& r, auto&, auto&) { r[1].sha256[0] = r[1].sha256[0] == 'a' ? 'b' : 'a'; }, 1, "SHA-256"},
      {"another compression", [](auto&, auto&, auto& w) { w.compression = "zstd:1"; }, 0,
       "compressed as none, this run as zstd:1"},
      {"another model", [](auto&, auto&, auto& w) { w.config_sha256 = "0"; }, 0, "another model"},
  };
  for (const ProgressRow& row : rows) {
    SCOPED_TRACE(row.name);
    TempDir dir;
    const auto meta = test_meta(2, 16, DType::BF16);
    {
      OutputWriter w(dir.path(), "shard", meta, 1);  // one batch (two samples) per shard
      for (int64_t b = 0; b < 3; ++b) w.submit(make_batch({2 * b, 2 * b + 1}, {3, 4}, meta));
      w.finish();
    }
    std::vector<ShardInfo> records = read_progress(dir.path(), "shard");
    ASSERT_EQ(records.size(), 3u);
    ResumeExpectation want;
    want.first_sample = 0;
    want.end_sample = 6;
    want.identity = true;
    want.point_ids = meta.point_ids;
    want.storage_dtype = "bfloat16";
    want.compression = "none";
    want.config_sha256 = meta.config_sha256;
    want.weights_fingerprint = meta.weights_fingerprint;
    row.edit(records, dir.path(), want);
    const ProgressCheck check = check_progress(dir.path(), "shard", records, want);
    EXPECT_EQ(check.dropped_at, row.dropped_at) << check.why;
    EXPECT_EQ(int64_t(check.kept.size()), row.dropped_at < 0 ? int64_t(records.size()) : row.dropped_at);
    EXPECT_NE(check.why.find(row.why), std::string::npos) << "why: '" << check.why << "'";
  }
}

// --on-nonfinite skip leaves samples out of a shard: such a shard is kept on resume like any
// other (its gaps are listed as skipped again); only a sample out of order or outside its record's
// range drops it.
TEST(ResumeProgress, ShardsWithSkippedSamplesAreKept) {
  TempDir dir;
  const auto meta = test_meta(2, 16, DType::BF16);
  {
    OutputWriter w(dir.path(), "shard", meta, 1);  // one batch per shard: 0 2 | 3 4 | 5 7 (1 and 6 skipped)
    for (const std::vector<int64_t>& b : {std::vector<int64_t>{0, 2}, {3, 4}, {5, 7}})
      w.submit(make_batch(b, {3, 4}, meta));
    w.finish();
  }
  const std::vector<ShardInfo> records = read_progress(dir.path(), "shard");
  ASSERT_EQ(records.size(), 3u);
  EXPECT_EQ(records[0].first_sample, 0);
  EXPECT_EQ(records[0].last_sample, 2);
  ResumeExpectation want;
  want.first_sample = 0;
  want.end_sample = 9;
  ProgressCheck check = check_progress(dir.path(), "shard", records, want);
  EXPECT_EQ(check.dropped_at, -1) << check.why;
  EXPECT_EQ(check.kept.size(), 3u);
  // A range that claims the skipped sample's place past the shard's last sample is a lie.
  std::vector<ShardInfo> lying = records;
  lying[0].last_sample = 1;
  lying[0].samples = 2;
  check = check_progress(dir.path(), "shard", lying, want);
  EXPECT_EQ(check.dropped_at, 0);
  EXPECT_NE(check.why.find("outside the record's range 0..1"), std::string::npos) << check.why;
}

TEST(ResumeProgress, MalformedRecordsAreRefusedNamingTheFile) {
  for (const char* text : {"{\"closed_shards\": [", "[]", "{\"closed_shards\": {}}",
                           "{\"closed_shards\": [{\"file\": \"shard-00000.h5\"}]}",
                           "{\"closed_shards\": [{\"file\": 5, \"samples\": 1, \"tokens\": 1, \"first_sample\": 0, "
                           "\"last_sample\": 0, \"bytes\": 1, \"sha256\": \"x\"}]}",
                           "{\"closed_shards\": [{\"file\": \"a\", \"samples\": -1, \"tokens\": 1, \"first_sample\": 0, "
                           "\"last_sample\": 0, \"bytes\": 1, \"sha256\": \"x\"}]}"}) {
    SCOPED_TRACE(text);
    TempDir dir;
    std::ofstream(dir.path() / "shard.progress.json") << text;
    EXPECT_NE(error_of([&] { read_progress(dir.path(), "shard"); }).find("shard.progress.json"), std::string::npos);
  }
  TempDir dir;
  EXPECT_TRUE(read_progress(dir.path(), "shard").empty());  // no record: nothing kept
}

}  // namespace
}  // namespace layertap::io
