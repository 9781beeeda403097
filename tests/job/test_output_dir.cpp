// The output directory's life cycle (job/output_dir), in process: the projection the free-space
// check compares with; prepare_output_dir for a fresh run, a second run refused, --overwrite and
// --resume (identity checked key by key); keep_verified_shards on resume, over real shards and the
// progress record their writer keeps: intact shards kept, a changed shard dropped with every later
// one and the writer's files after them removed, the record rewritten, the writer's sample range
// applied, a malformed record refused naming it.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../io/io_test_util.hpp"  // TempDir, test_meta, make_batch
#include "comm/world_layout.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/regular_file.hpp"
#include "io/output_lock.hpp"
#include "io/output_writer.hpp"
#include "io/progress.hpp"
#include "job/output_dir.hpp"
#include "job/run_manifest.hpp"

namespace layertap::job {
namespace {

namespace fs = std::filesystem;
using io::test::TempDir;
using nlohmann::json;

constexpr auto error_of = io::test::error_of<Error>;  // a layertap::Error, nothing else

json read_json_file(const fs::path& p) {
  std::ifstream in(p);
  return json::parse(in);
}

// The names of the entries of `dir`, sorted.
std::vector<std::string> files_in(const fs::path& dir) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(dir)) names.push_back(e.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

std::vector<std::string> names_of(const std::vector<io::ShardInfo>& records) {
  std::vector<std::string> names;
  for (const auto& r : records) names.push_back(r.file);
  return names;
}

// Expects `got` to be the first `n` of `want`, record by record.
void expect_leading_records(const std::vector<io::ShardInfo>& got, const std::vector<io::ShardInfo>& want, std::size_t n) {
  ASSERT_EQ(got.size(), n);
  for (std::size_t i = 0; i < n; ++i) {
    EXPECT_EQ(got[i].file, want[i].file);
    EXPECT_EQ(got[i].sha256, want[i].sha256);
    EXPECT_EQ(got[i].bytes, want[i].bytes);
    EXPECT_EQ(got[i].first_sample, want[i].first_sample);
    EXPECT_EQ(got[i].last_sample, want[i].last_sample);
    EXPECT_EQ(got[i].samples, want[i].samples);
  }
}

const io::OutputMeta& shard_meta() {
  static const io::OutputMeta meta = io::test::test_meta(2, 16, DType::BF16);
  return meta;
}

json identity_of(const io::OutputMeta& meta, const std::string& dataset_sha256 = std::string(64, 'd')) {
  return run_identity(meta, dataset_sha256, 6, make_world_layout(0, 1, 1), MoeSplit::Experts, "cpu");
}

// A resumable run in `dir`, as a run stopped after three shards leaves it: run.json (written by
// prepare_output_dir), shard-00000..00002.h5 of samples 0-1, 2-3 and 4-5 (writer "shard", one batch
// per shard) and the progress record the writer kept. Returns the record.
std::vector<io::ShardInfo> stopped_run(const fs::path& dir) {
  EXPECT_EQ(prepare_output_dir(dir, identity_of(shard_meta()), false, false, /*take_lock=*/false), OutputState::Fresh);
  {
    io::OutputWriter w(dir, "shard", shard_meta(), 1);
    for (int64_t b = 0; b < 3; ++b) w.submit(io::test::make_batch({2 * b, 2 * b + 1}, {3, 4}, shard_meta()));
    w.finish();
  }
  std::vector<io::ShardInfo> records = io::read_progress(dir, "shard");
  EXPECT_EQ(names_of(records), (std::vector<std::string>{"shard-00000.h5", "shard-00001.h5", "shard-00002.h5"}));
  return records;
}

class OutputDir : public ::testing::Test {
 protected:
  void SetUp() override { set_log_level(LogLevel::Error); }  // the resume warnings are expected
  void TearDown() override { set_log_level(LogLevel::Info); }
  TempDir tmp;
  const fs::path out = tmp.path() / "out";
};

using KeepVerifiedShards = OutputDir;
using PrepareOutputDir = OutputDir;

}  // namespace

TEST(ProjectedOutputBytes, CountsEveryStoredValueAndGrowsWithShards) {
  const int64_t tokens = 10000, samples = 50, points = 4, hidden = 64;
  const int64_t states = tokens * points * hidden * 2;  // bf16
  const OutputShape bf16{tokens, samples, points, hidden, DType::BF16};
  const int64_t one = projected_output_bytes(bf16, 1, int64_t(1) << 40);
  EXPECT_GE(one, states);
  EXPECT_LT(one, states + states / 2);  // token ids, masks and offsets are small beside the states
  // float8: one byte per value plus a float32 scale per token and point.
  const OutputShape fp8_shape{tokens, samples, points, hidden, DType::F8_E4M3};
  EXPECT_EQ(fp8_shape.point_bytes_per_token(), hidden + 4);
  const int64_t fp8 = projected_output_bytes(fp8_shape, 1, int64_t(1) << 40);
  EXPECT_GE(fp8, tokens * points * (hidden + 4));
  EXPECT_LT(fp8, one);
  // More writers and smaller shards add per-shard metadata, never remove bytes.
  EXPECT_GE(projected_output_bytes(bf16, 4, 1 << 20), one);
}

TEST_F(KeepVerifiedShards, IntactShardsAreAllKept) {
  const auto records = stopped_run(out);
  const auto before = files_in(out);
  const auto kept = keep_verified_shards(out, "shard");
  expect_leading_records(kept, records, 3);
  EXPECT_EQ(files_in(out), before);
  expect_leading_records(io::read_progress(out, "shard"), records, 3);
  // The writer's sample range, when given, is the one the shards hold.
  expect_leading_records(keep_verified_shards(out, "shard", SampleRange{0, 6}), records, 3);
}

TEST_F(KeepVerifiedShards, AChangedShardIsDroppedWithEveryLaterOne) {
  const auto records = stopped_run(out);
  {  // one byte of shard 1 changed, its size kept: only its SHA-256 tells
    std::fstream f(out / "shard-00001.h5", std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char c = char(f.get());
    f.seekp(-1, std::ios::end);
    f.put(char(~c));
  }
  EXPECT_EQ(fs::file_size(out / "shard-00001.h5"), uint64_t(records[1].bytes));
  std::ofstream(out / "shard-00003.h5.tmp") << "unfinished";    // this writer's unfinished shard
  std::ofstream(out / "shard-g001-00000.h5") << "other writer";  // not this writer's
  std::ofstream(out / "notes.txt") << "someone's";

  const auto kept = keep_verified_shards(out, "shard");
  expect_leading_records(kept, records, 1);
  EXPECT_EQ(files_in(out), (std::vector<std::string>{"notes.txt", "run.json", "shard-00000.h5", "shard-g001-00000.h5",
                                                     "shard.progress.json"}));
  expect_leading_records(io::read_progress(out, "shard"), records, 1);  // the record rewritten to the kept shard
  // A resume after this one keeps the same shard.
  expect_leading_records(keep_verified_shards(out, "shard"), records, 1);
}

TEST_F(KeepVerifiedShards, TheWritersSampleRangeIsApplied) {
  {  // a record that does not start at the writer's first sample: nothing kept
    stopped_run(out);
    EXPECT_TRUE(keep_verified_shards(out, "shard", SampleRange{1, 6}).empty());
    EXPECT_TRUE(io::read_progress(out, "shard").empty());
    EXPECT_EQ(files_in(out), (std::vector<std::string>{"run.json", "shard.progress.json"}));
  }
  fs::remove_all(out);
  {  // a writer whose samples end at 4: the shard of samples 4-5 is not its own
    const auto records = stopped_run(out);
    expect_leading_records(keep_verified_shards(out, "shard", SampleRange{0, 4}), records, 2);
    EXPECT_FALSE(fs::exists(out / "shard-00002.h5"));
    expect_leading_records(io::read_progress(out, "shard"), records, 2);
  }
}

TEST_F(KeepVerifiedShards, AMalformedRecordIsRefusedNamingTheFile) {
  for (const char* text : {"{\"closed_shards\": [", "{\"closed_shards\": [{\"file\": \"shard-00000.h5\"}]}", "[]"}) {
    SCOPED_TRACE(text);
    fs::remove_all(out);
    stopped_run(out);
    std::ofstream(out / "shard.progress.json") << text;
    const std::string err = error_of([&] { keep_verified_shards(out, "shard"); });
    EXPECT_NE(err.find((out / "shard.progress.json").string()), std::string::npos) << "error: '" << err << "'";
    // Refused, not acted on: the shards are still there.
    EXPECT_TRUE(fs::exists(out / "shard-00000.h5"));
    EXPECT_TRUE(fs::exists(out / "shard-00002.h5"));
  }
}

TEST_F(PrepareOutputDir, AFreshRunWritesRunJson) {
  const json identity = identity_of(shard_meta());
  EXPECT_EQ(prepare_output_dir(out, identity, false, false, false), OutputState::Fresh);
  EXPECT_TRUE(fs::is_directory(out));
  EXPECT_EQ(read_json_file(out / "run.json"), identity);
  EXPECT_EQ(files_in(out), std::vector<std::string>{"run.json"});
}

// The write probe never writes through a link planted at its name (here to a file outside --out).
TEST_F(PrepareOutputDir, TheWriteProbeDoesNotFollowALink) {
  const fs::path victim = tmp.path() / "victim.txt";
  std::ofstream(victim) << "someone's data";
  fs::create_directories(out);
  fs::create_symlink(victim, out / ".layertap-write-test");
  EXPECT_EQ(prepare_output_dir(out, identity_of(shard_meta()), false, false, false), OutputState::Fresh);
  EXPECT_EQ(read_regular_file(victim.string(), "victim"), "someone's data");
  EXPECT_FALSE(fs::exists(fs::symlink_status(out / ".layertap-write-test")));
  EXPECT_EQ(files_in(out), std::vector<std::string>{"run.json"});
}

// A FIFO at the lock file's name is refused at once by the job, the readers and the dry run's
// probe (opening it to read used to block until a writer came).
TEST_F(PrepareOutputDir, ALockFileThatIsAFifoIsRefusedWithoutBlocking) {
  fs::create_directories(out);
  const fs::path lock = out / io::kLockFileName;
  ASSERT_EQ(::mkfifo(lock.c_str(), 0644), 0);
  const std::string shared = error_of([&] { (void)io::OutputLock::shared(out); });
  EXPECT_NE(shared.find("not a regular file"), std::string::npos) << shared;
  const io::LockProbe probe = io::probe_output_lock(out);
  EXPECT_NE(probe.why.find("not a regular file"), std::string::npos) << probe.why;
  const std::string job = error_of([&] { prepare_output_dir(out, identity_of(shard_meta()), false, false, true); });
  EXPECT_NE(job.find("not a regular file"), std::string::npos) << job;
}

TEST_F(PrepareOutputDir, ASecondFreshRunIsRefusedNamingTheDirectory) {
  stopped_run(out);
  const auto before = files_in(out);
  const std::string err = error_of([&] { prepare_output_dir(out, identity_of(shard_meta()), false, false, false); });
  EXPECT_NE(err.find("'" + out.string() + "'"), std::string::npos) << err;
  EXPECT_NE(err.find("already holds a run"), std::string::npos) << err;
  EXPECT_EQ(files_in(out), before);  // nothing removed
  // Someone's directory is refused too.
  const fs::path theirs = tmp.path() / "theirs";
  fs::create_directories(theirs);
  std::ofstream(theirs / "notes.txt") << "someone's";
  const std::string foreign = error_of([&] { prepare_output_dir(theirs, identity_of(shard_meta()), false, false, false); });
  EXPECT_NE(foreign.find("'" + theirs.string() + "'"), std::string::npos) << foreign;
  EXPECT_NE(foreign.find("not layertap's"), std::string::npos) << foreign;
  EXPECT_EQ(files_in(theirs), std::vector<std::string>{"notes.txt"});
}

TEST_F(PrepareOutputDir, OverwriteEmptiesTheEarlierRun) {
  stopped_run(out);
  std::ofstream(out / "notes.txt") << "someone's";  // --overwrite leaves foreign files alone
  io::OutputMeta other = shard_meta();
  other.dtype = DType::F32;
  const json identity = identity_of(other);
  EXPECT_EQ(prepare_output_dir(out, identity, /*overwrite=*/true, false, false), OutputState::Fresh);
  EXPECT_EQ(files_in(out), (std::vector<std::string>{"notes.txt", "run.json"}));
  EXPECT_EQ(read_json_file(out / "run.json"), identity);
}

TEST_F(PrepareOutputDir, ResumeNeedsTheSameIdentityAndNamesTheKeyThatDiffers) {
  const auto records = stopped_run(out);
  const auto before = files_in(out);
  EXPECT_EQ(prepare_output_dir(out, identity_of(shard_meta()), false, /*resume=*/true, false), OutputState::Resume);
  EXPECT_EQ(files_in(out), before);  // the shards stay for keep_verified_shards
  const std::string err =
      error_of([&] { prepare_output_dir(out, identity_of(shard_meta(), std::string(64, 'e')), false, true, false); });
  EXPECT_NE(err.find("cannot resume the run in '" + out.string() + "'"), std::string::npos) << err;
  EXPECT_NE(err.find("dataset_sha256: earlier run \"" + std::string(64, 'd') + "\", now \"" + std::string(64, 'e')),
            std::string::npos)
      << err;
  for (const char* same : {"storage_dtype", "compression", "capture_point_ids", "model_config_sha256"})
    EXPECT_EQ(err.find(same), std::string::npos) << same << " does not differ: " << err;
  EXPECT_EQ(files_in(out), before);
  EXPECT_EQ(read_json_file(out / "run.json"), identity_of(shard_meta()));
}

}  // namespace layertap::job
