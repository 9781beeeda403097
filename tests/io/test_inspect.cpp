#include <gtest/gtest.h>

#include <functional>
#include <sstream>

#include "cli/inspect.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "io/output_lock.hpp"
#include "io/output_writer.hpp"

#include <unistd.h>

#include <optional>
#include "io_test_util.hpp"

namespace layertap::io {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using test::make_batch;
using test::TempDir;
using test::test_meta;

// Writes three shards and a manifest that describes them (the keys `layertap extract` writes).
json write_output(const fs::path& dir) {
  const auto meta = test_meta(4, 16, DType::BF16);
  OutputWriter w(dir, "shard", meta, 1);  // one batch per shard
  int64_t samples = 0, tokens = 0;
  for (int i = 0; i < 3; ++i) {
    w.submit(make_batch({samples, samples + 1}, {5, 2 + i}, meta));
    samples += 2;
    tokens += 7 + i;
  }
  json shards = json::array();
  int64_t bytes = 0;
  for (const auto& s : w.finish()) {
    shards.push_back({{"file", s.file}, {"samples", s.samples}, {"tokens", s.tokens},
                      {"first_sample", s.first_sample}, {"last_sample", s.last_sample},
                      {"bytes", s.bytes}, {"sha256", s.sha256}});
    bytes += s.bytes;
  }
  json points = json::array();
  const std::vector<std::string> meanings = {"input to decoder layer 2", "input to decoder layer 4",
                                             "input to decoder layer 5", "after the final norm"};
  for (std::size_t p = 0; p < 4; ++p)
    points.push_back(
        {{"spec", meta.point_specs[p]}, {"id", meta.point_ids[p]}, {"meaning", meanings[p]}});
  json m = {
      {"format_version", kFormatVersion},
      {"complete", true},
      {"capture", {{"request", "eagle3"}, {"convention", "layertap-v1"}, {"points", points}}},
      {"model", {{"dir", "/models/tiny-llama"}, {"architecture", meta.architecture},
                 {"num_hidden_layers", 8}, {"hidden_size", 16}, {"vocab_size", 1000},
                 {"config_sha256", meta.config_sha256},
                 {"weights_fingerprint", meta.weights_fingerprint}}},
      {"dataset", {{"path", "/data/train.jsonl"}, {"sha256", std::string(64, 'd')},
                   {"samples", samples}, {"tokens", tokens}}},
      {"storage_dtype", "bfloat16"},
      {"shards", shards},
      {"totals", {{"samples", samples}, {"tokens", tokens}, {"bytes", bytes}}},
      {"run", {{"command", "layertap extract --capture eagle3"}, {"world_size", 2}, {"tp", 2},
               {"dp", 1}, {"seconds", 1.25}, {"tokens_per_s", 19.2},
               {"layertap_version", "0.1.0"}, {"created", "2025-01-01T00:00:00Z"}}},
  };
  write_json_atomically(dir / "manifest.json", m);
  return m;
}

int inspect(const fs::path& dir, std::string& text) {
  std::ostringstream out;
  const int rc = cli::run_inspect(dir, out);
  text = out.str();
  return rc;
}

void expect_contains(const std::string& text, const std::string& part) {
  EXPECT_NE(text.find(part), std::string::npos) << "missing '" << part << "' in:\n" << text;
}

TEST(Inspect, SummarisesAGoodOutput) {
  TempDir dir;
  write_output(dir.path());
  std::string text;
  EXPECT_EQ(inspect(dir.path(), text), 0) << text;
  for (const char* part : {"complete", "LlamaForCausalLM", "8 layers", "hidden 16", "eagle3",
                           "layertap-v1", "after the final norm", "input to decoder layer 4",
                           "shard-00000.h5", "shard-00002.h5", "[9, 4, 16]", "bfloat16",
                           "6 samples, 24 tokens", "OK"})
    expect_contains(text, part);
  EXPECT_EQ(text.find("ERROR"), std::string::npos) << text;
}

TEST(Inspect, ReportsShardsThatDisagreeWithTheManifest) {
  struct Case {
    const char* name;
    std::function<void(json&, const fs::path&)> spoil;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {"samples", [](json& m, const fs::path&) { m["shards"][1]["samples"] = 3; },
       "shard-00001.h5: holds 2 samples, manifest says 3"},
      {"tokens", [](json& m, const fs::path&) { m["shards"][0]["tokens"] = 8; },
       "shard-00000.h5: holds 7 tokens, manifest says 8"},
      {"hidden size", [](json& m, const fs::path&) { m["model"]["hidden_size"] = 32; },
       "manifest implies [tokens, points, hidden] = [7, 4, 32]"},
      {"dtype", [](json& m, const fs::path&) { m["storage_dtype"] = "float32"; },
       "stored as bfloat16, manifest says float32"},
      {"points", [](json& m, const fs::path&) { m["capture"]["points"][3]["id"] = 8; },
       "capture point ids [2, 4, 5, 9], manifest says [2, 4, 5, 8]"},
      {"missing shard", [](json&, const fs::path& d) { fs::remove(d / "shard-00002.h5"); },
       "shard-00002.h5: missing"},
      {"bytes", [](json& m, const fs::path&) { m["shards"][2]["bytes"] = 5; },
       "manifest says 5"},
      {"not a shard", [](json&, const fs::path& d) { fs::resize_file(d / "shard-00001.h5", 100); },
       "shard-00001.h5: cannot be read"},
      {"incomplete", [](json& m, const fs::path&) { m["complete"] = false; }, "incomplete"},
      {"missing key", [](json& m, const fs::path&) { m.erase("totals"); }, "missing key 'totals'"},
      {"wrong type", [](json& m, const fs::path&) { m["shards"][0]["tokens"] = "7"; },
       "shards[0]: key 'tokens' must be an integer, found string"},
      {"path outside", [](json& m, const fs::path&) { m["shards"][0]["file"] = "../shard-00000.h5"; },
       "shard file '../shard-00000.h5' is not a plain file name inside the output directory"},
      {"absolute path", [](json& m, const fs::path&) { m["shards"][0]["file"] = "/etc/passwd"; },
       "shard file '/etc/passwd' is not a plain file name"},
      {"point id out of range", [](json& m, const fs::path&) { m["capture"]["points"][0]["id"] = 99; },
       "key 'id' = 99 is outside [0, 9]"},
      {"huge counts", [](json& m, const fs::path&) { m["shards"][0]["tokens"] = int64_t(1) << 61; },
       "manifest implies [tokens, points, hidden] = [2305843009213693952, 4, 16]"},
      // The count rule (io::manifest_count_problems) that verify and --resume apply too.
      {"a sample neither held nor skipped", [](json& m, const fs::path&) { m["dataset"]["samples"] = 7; },
       "manifest.json: its shards hold 6 samples and it lists 0 skipped, not the dataset's 7"},
      {"skipped twice",
       [](json& m, const fs::path&) {
         m["dataset"]["samples"] = 8;
         m["skipped_samples"] = json::array({{{"index", 6}}, {{"index", 6}}});
       },
       "skipped_samples lists index 6 twice"},
      {"skipped outside the dataset",
       [](json& m, const fs::path&) {
         m["dataset"]["samples"] = 7;
         m["skipped_samples"] = json::array({{{"index", 7}}});
       },
       "skipped_samples lists index 7, outside the dataset's 7 samples"},
      {"skipped without an index", [](json& m, const fs::path&) { m["skipped_samples"] = json::array({json::object()}); },
       "skipped_samples[0]: missing key 'index'"},
      {"complete without dataset.samples", [](json& m, const fs::path&) { m["dataset"].erase("samples"); },
       "names no dataset.samples"},
      {"totals bytes", [](json& m, const fs::path&) { m["totals"]["bytes"] = 1; }, "differ from the sum over its shards"},
      // Manifest order is dataset order, each sample held once, only finished shards listed.
      {"entries swapped", [](json& m, const fs::path&) { std::swap(m["shards"][0], m["shards"][1]); },
       "shards[1]: first_sample 0 is not after the previous shards' last sample 3"},
      {"an entry repeating samples",
       [](json& m, const fs::path&) {
         m["shards"][1]["first_sample"] = 1;
       },
       "shards[1]: first_sample 1 is not after the previous shards' last sample 1"},
      {"first and last against the shard", [](json& m, const fs::path&) { m["shards"][2]["last_sample"] = 4; },
       "shard-00002.h5: /sample_index runs from 4 to 5, manifest says first_sample 4, last_sample 4"},
      {"first and last missing", [](json& m, const fs::path&) { m["shards"][0].erase("first_sample"); },
       "shards[0]: missing key 'first_sample'"},
      {"an unfinished shard listed",
       [](json& m, const fs::path& d) {
         fs::rename(d / "shard-00002.h5", d / "shard-00002.h5.tmp");
         m["shards"][2]["file"] = "shard-00002.h5.tmp";
       },
       "shard file 'shard-00002.h5.tmp' does not end in .h5"},
      {"complete over an empty dataset",
       [](json& m, const fs::path&) {
         m["shards"] = json::array();
         m["totals"] = {{"samples", 0}, {"tokens", 0}, {"bytes", 0}};
         m["dataset"]["samples"] = 0;
       },
       "complete over a dataset of 0 samples"},
      // A version this reader does not know, whatever its shards say (the Python reader refuses it too).
      {"format version", [](json& m, const fs::path&) { m["format_version"] = kFormatVersion + 1; },
       "this reader knows " + std::to_string(kFormatVersion)},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    TempDir dir;
    json m = write_output(dir.path());
    c.spoil(m, dir.path());
    write_json_atomically(dir.path() / "manifest.json", m);
    std::string text;
    EXPECT_NE(inspect(dir.path(), text), 0) << text;
    expect_contains(text, "ERROR: ");
    expect_contains(text, c.expected);
  }
}

// A complete --on-nonfinite skip run: the dataset's samples are the shards' plus the skipped ones.
TEST(Inspect, AcceptsACompleteRunWithSkippedSamples) {
  TempDir dir;
  json m = write_output(dir.path());
  m["dataset"]["samples"] = 7;
  m["skipped_samples"] = json::array({{{"index", 6}, {"id", "s6"}, {"reason", "non-finite states"}}});
  write_json_atomically(dir.path() / "manifest.json", m);
  std::string text;
  EXPECT_EQ(inspect(dir.path(), text), 0) << text;
  expect_contains(text, "1 sample(s) skipped");
  EXPECT_EQ(text.find("ERROR"), std::string::npos) << text;
}

// inspect takes the --out lock shared: refused while a job holds it, naming the job; a leftover
// lock file (its job gone) is no obstacle and no foreign file.
TEST(Inspect, RefusesAnOutputAJobHoldsAndReadsALeftoverLockFile) {
  TempDir dir;
  write_output(dir.path());
  std::string text;
  {
    OutputLock held = OutputLock::exclusive(dir.path());
    EXPECT_NE(inspect(dir.path(), text), 0) << text;
    expect_contains(text, "is being written by a layertap job (host ");
    expect_contains(text, layertap::cat("pid ", ::getpid()));
    expect_contains(text, ".layertap.lock");
    const LockProbe probe = probe_output_lock(dir.path());
    EXPECT_TRUE(probe.held);
    EXPECT_EQ(probe.why.rfind("--out is in use by another layertap job (host ", 0), 0u) << probe.why;
    // A second exclusive holder is refused naming the first.
    std::string err;
    try {
      OutputLock::exclusive(dir.path());
    } catch (const Error& e) {
      err = e.what();
    }
    EXPECT_NE(err.find("is in use by another layertap job (host "), std::string::npos) << err;
  }
  EXPECT_TRUE(fs::exists(dir.path() / kLockFileName));
  EXPECT_EQ(inspect(dir.path(), text), 0) << text;
  EXPECT_EQ(probe_output_lock(dir.path()).why, "");
  {
    // While inspect-like readers hold it shared, a job is refused naming them.
    const std::optional<OutputLock> reader = OutputLock::shared(dir.path());
    ASSERT_TRUE(reader.has_value());
    std::string err;
    try {
      OutputLock::exclusive(dir.path());
    } catch (const Error& e) {
      err = e.what();
    }
    EXPECT_NE(err.find("is being read by layertap inspect, verify or a --dry-run"), std::string::npos) << err;
  }
}

TEST(Inspect, MissingManifestIsAnError) {
  TempDir dir;
  std::string text;
  EXPECT_NE(inspect(dir.path(), text), 0);
  expect_contains(text, "ERROR: no readable manifest.json");
}

}  // namespace
}  // namespace layertap::io
