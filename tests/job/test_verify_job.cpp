// job::run_verify in process, on an output that job::run_extract writes from the llama fixture
// (as tests/e2e/test_verify.py does through the CLI): a good output passes with every sample
// recomputed, tampering is named, --samples 0 recomputes nothing. MPI (a world of one, for
// run_extract) is initialised once, in main.
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../io/io_test_util.hpp"  // TempDir
#include "comm/mpi_env.hpp"
#include "core/digest.hpp"
#include "core/log.hpp"
#include "io/durable_file.hpp"
#include "io/manifest.hpp"
#include "io/output_lock.hpp"
#include "io/shard_reader.hpp"
#include "job/extract_job.hpp"
#include "job/verify_job.hpp"

namespace layertap::job {
namespace {

namespace fs = std::filesystem;
using io::test::TempDir;
using nlohmann::json;

const MpiEnv* g_mpi = nullptr;

// The llama fixture (4 layers) over golden.jsonl, points 0, 2, last, final, bf16: written once per
// process (run_extract is one run per process) and copied by each test that edits it.
const fs::path& good_output() {
  static TempDir dir;
  static const fs::path out = [] {
    ExtractOptions o;
    o.model = LAYERTAP_FIXTURES "/models/llama";
    o.data = LAYERTAP_FIXTURES "/data/golden.jsonl";
    o.out = (dir.path() / "good").string();
    o.capture = "0,2,last,final";
    o.backend = BackendRequest::Cpu;
    o.threads = 1;
    o.no_lock = true;
    o.command = "test_verify_job";
    set_log_level(LogLevel::Warn);
    EXPECT_EQ(run_extract(o, *g_mpi), 0);
    return fs::path(o.out);
  }();
  return out;
}

struct Verified {
  int rc;
  std::string text;
  int count(const std::string& part) const {  // occurrences in the text
    int n = 0;
    for (auto at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
    return n;
  }
  std::string last_line() const {
    const std::string t = text.substr(0, text.find_last_not_of('\n') + 1);
    return t.substr(t.rfind('\n') + 1);  // the whole text when it is one line
  }
};

Verified verify(const fs::path& out, VerifyOptions o = {}) {
  o.out_dir = out;
  o.threads = 1;
  std::ostringstream text;
  const int rc = run_verify(o, text);
  return {rc, text.str()};
}

VerifyOptions samples(int64_t n) {
  VerifyOptions o;
  o.samples = n;
  return o;
}

fs::path copy_of_good(const TempDir& dir) {
  const fs::path out = dir.path() / "copy";
  fs::copy(good_output(), out, fs::copy_options::recursive);
  return out;
}

// Sets input_ids[row] of `shard` in place, through the HDF5 C API.
void set_token(const fs::path& shard, hsize_t row, int32_t id) {
  const hid_t f = H5Fopen(shard.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  ASSERT_GE(f, 0);
  const hid_t d = H5Dopen2(f, "input_ids", H5P_DEFAULT);
  const hid_t space = H5Dget_space(d);
  const hsize_t one = 1;
  H5Sselect_hyperslab(space, H5S_SELECT_SET, &row, nullptr, &one, nullptr);
  const hid_t mem = H5Screate_simple(1, &one, nullptr);
  EXPECT_GE(H5Dwrite(d, H5T_NATIVE_INT32, mem, space, H5P_DEFAULT, &id), 0);
  H5Sclose(mem);
  H5Sclose(space);
  H5Dclose(d);
  H5Fclose(f);
}

// Records every shard's current size and SHA-256 in the manifest, as a writer that checksummed
// wrong data would have: only recomputation can then tell.
void rechecksum(const fs::path& out) {
  json m = json::parse(std::ifstream(out / "manifest.json"));
  int64_t bytes = 0;
  for (json& s : m["shards"]) {
    const fs::path file = out / s["file"].get<std::string>();
    s["bytes"] = int64_t(fs::file_size(file));
    s["sha256"] = sha256_file(file.string());
    bytes += s["bytes"].get<int64_t>();
  }
  m["totals"]["bytes"] = bytes;
  io::write_json_atomically(out / "manifest.json", m);
}

TEST(RunVerify, AGoodOutputPassesWithEverySampleRecomputed) {
  const io::Manifest m = io::read_manifest(good_output());
  ASSERT_EQ(m.total_samples, 5);
  const Verified v = verify(good_output(), samples(-1));
  EXPECT_EQ(v.rc, 0) << v.text;
  EXPECT_EQ(v.last_line(), "OK: 0 problem(s), 5 sample(s) recomputed") << v.text;
  EXPECT_EQ(v.count("ok sample "), 5) << v.text;
  EXPECT_EQ(v.count("PROBLEM"), 0) << v.text;
  EXPECT_EQ(v.count("of the allowed difference (point "), 5) << v.text;
}

TEST(RunVerify, ASeededSubsetIsRecomputedAlikeEachTime) {
  VerifyOptions o = samples(2);
  o.seed = 3;
  const Verified a = verify(good_output(), o), b = verify(good_output(), o);
  EXPECT_EQ(a.rc, 0) << a.text;
  EXPECT_EQ(a.last_line(), "OK: 0 problem(s), 2 sample(s) recomputed") << a.text;
  EXPECT_EQ(a.count("ok sample "), 2) << a.text;
  EXPECT_EQ(a.text, b.text);
}

TEST(RunVerify, AChangedTokenIsCaughtByRecomputationOnly) {
  TempDir dir;
  const fs::path out = copy_of_good(dir);
  const io::Manifest m = io::read_manifest(out);
  const fs::path shard = out / m.shards[0].file;
  int64_t row = 0, sample = 0;
  int32_t token = 0;
  {  // closed before the file is written
    const io::ShardReader r(shard);
    ASSERT_GE(r.num_samples(), 2);
    row = r.sample_offsets()[1];  // the first token of the shard's second sample
    sample = r.sample_index()[1];
    token = int32_t((r.input_ids()[std::size_t(row)] + 1) % m.vocab_size);
  }
  set_token(shard, hsize_t(row), token);
  rechecksum(out);
  ASSERT_EQ(io::ShardReader(shard).input_ids()[std::size_t(row)], token);

  const Verified v = verify(out, samples(-1));
  EXPECT_EQ(v.rc, 1) << v.text;
  EXPECT_EQ(v.count("PROBLEM "), 1) << v.text;
  EXPECT_NE(v.text.find("PROBLEM sample " + std::to_string(sample) + " (" + m.shards[0].file +
                        " #1, "), std::string::npos) << v.text;
  EXPECT_NE(v.text.find("recomputed states differ at point "), std::string::npos) << v.text;
  EXPECT_EQ(v.last_line(), "FAILED: 1 problem(s), 5 sample(s) recomputed") << v.text;

  // --samples 0: the shard and manifest agree, nothing is recomputed, so nothing is found.
  const Verified none = verify(out, samples(0));
  EXPECT_EQ(none.rc, 0) << none.text;
  EXPECT_EQ(none.count("ok sample "), 0) << none.text;
  EXPECT_EQ(none.last_line(), "OK: 0 problem(s), 0 sample(s) recomputed") << none.text;
}

TEST(RunVerify, SamplesZeroNeverOpensTheModel) {
  VerifyOptions o = samples(0);
  o.model = "/nonexistent-layertap-model";
  const Verified none = verify(good_output(), o);
  EXPECT_EQ(none.rc, 0) << none.text;
  EXPECT_EQ(none.last_line(), "OK: 0 problem(s), 0 sample(s) recomputed") << none.text;

  o.samples = 1;  // the same model is now opened, and cannot be
  const Verified one = verify(good_output(), o);
  EXPECT_EQ(one.rc, 1) << one.text;
  EXPECT_NE(one.text.find("PROBLEM "), std::string::npos) << one.text;
  EXPECT_NE(one.text.find("/nonexistent-layertap-model"), std::string::npos) << one.text;
  EXPECT_EQ(one.last_line(), "FAILED: 1 problem(s), 0 sample(s) recomputed") << one.text;
}

TEST(RunVerify, AFlippedByteNamesTheShard) {
  TempDir dir;
  const fs::path out = copy_of_good(dir);
  const std::string file = io::read_manifest(out).shards[0].file;
  {
    std::fstream f(out / file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-100, std::ios::end);
    const char c = char(f.peek());
    f.seekp(-100, std::ios::end);
    f.put(char(~c));
  }
  const Verified v = verify(out, samples(0));
  EXPECT_EQ(v.rc, 1) << v.text;
  EXPECT_NE(v.text.find("PROBLEM " + file + ": SHA-256 differs from the manifest"), std::string::npos) << v.text;
  EXPECT_EQ(v.last_line().rfind("FAILED: ", 0), 0u) << v.text;
}

TEST(RunVerify, AnIncompleteRunAndAGarbageManifestFail) {
  TempDir dir;
  const fs::path out = copy_of_good(dir);
  json m = json::parse(std::ifstream(out / "manifest.json"));
  m["complete"] = false;
  io::write_json_atomically(out / "manifest.json", m);
  Verified v = verify(out, samples(0));
  EXPECT_EQ(v.rc, 1) << v.text;
  EXPECT_NE(v.text.find("PROBLEM the manifest marks the run incomplete"), std::string::npos) << v.text;

  std::ofstream(out / "manifest.json") << R"({"format_version": 1, "complete": tru)";
  v = verify(out, samples(0));
  EXPECT_EQ(v.rc, 1) << v.text;
  EXPECT_NE(v.text.find("malformed JSON"), std::string::npos) << v.text;
  EXPECT_EQ(v.last_line(), "FAILED: 1 problem(s), 0 sample(s) recomputed") << v.text;
}

TEST(RunVerify, AnOutputAJobHoldsIsRefusedNamingIt) {
  TempDir dir;
  const fs::path out = copy_of_good(dir);
  const io::OutputLock job = io::OutputLock::exclusive(out);  // another open file: flock conflicts
  const Verified v = verify(out, samples(0));
  EXPECT_EQ(v.rc, 1) << v.text;
  EXPECT_NE(v.text.find("' is being written by a layertap job (host "), std::string::npos) << v.text;
  EXPECT_NE(v.text.find(", pid " + std::to_string(::getpid()) + ", "), std::string::npos) << v.text;
  EXPECT_EQ(v.last_line(), "FAILED: 1 problem(s), 0 sample(s) recomputed") << v.text;
}

TEST(RunVerify, LmHeadAndTokenStatistics) {
  VerifyOptions o = samples(0);
  o.lm_head = -1;
  o.token_stats = true;
  const Verified v = verify(good_output(), o);
  EXPECT_EQ(v.rc, 0) << v.text;
  // The shards' loss-masked tokens, counted here.
  int64_t masked = 0;
  for (const io::ShardInfo& s : io::read_manifest(good_output()).shards)
    for (uint8_t bit : io::ShardReader(good_output() / s.file).loss_mask()) masked += bit;
  EXPECT_NE(v.text.find("tokens: " + std::to_string(masked) + " loss-masked, "), std::string::npos) << v.text;
  std::smatch top1;
  const std::regex line(R"(lm head: 5 sample\(s\), \d+ loss-masked next tokens predicted from 'final': )"
                        R"(top-1 agreement ([\d.]+)%)");
  ASSERT_TRUE(std::regex_search(v.text, top1, line)) << v.text;
  const double rate = std::stod(top1[1]) / 100;
  ASSERT_LT(rate, 1.0);
  o.min_top1 = std::min(1.0, rate + 0.1);  // more than the output gives
  const Verified low = verify(good_output(), o);
  EXPECT_EQ(low.rc, 1) << low.text;
  EXPECT_NE(low.text.find("% is below --min-top1 "), std::string::npos) << low.text;
}

}  // namespace
}  // namespace layertap::job

int main(int argc, char** argv) {
  const layertap::MpiEnv mpi(argc, argv);
  layertap::job::g_mpi = &mpi;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
