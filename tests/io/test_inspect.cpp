#include <gtest/gtest.h>

#include <functional>
#include <sstream>

#include "cli/inspect.hpp"
#include "io/output_writer.hpp"
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

TEST(Inspect, MissingManifestIsAnError) {
  TempDir dir;
  std::string text;
  EXPECT_NE(inspect(dir.path(), text), 0);
  expect_contains(text, "ERROR: no readable manifest.json");
}

}  // namespace
}  // namespace layertap::io
