// What identifies a run, in process: run_identity (job/run_manifest: run.json, what a --resume must
// match, "everything that changes what the output holds") and ExtractOptions::job_identity
// (job/extract_options: the options every rank must agree on; threads, logging and the command
// line's spelling may differ). Equal inputs give equal identities; each input that counts changes
// the identity under its own key and no other; the inputs that must not count leave it equal.
#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "comm/world_layout.hpp"
#include "core/dtype.hpp"
#include "io/compression.hpp"
#include "io/shard_writer.hpp"
#include "job/extract_options.hpp"
#include "job/run_manifest.hpp"

namespace layertap::job {
namespace {

using nlohmann::json;

// The inputs of run_identity, as one value to vary.
struct RunInputs {
  io::OutputMeta meta;
  std::string dataset_sha256 = std::string(64, 'd');
  int64_t dataset_samples = 60;
  WorldLayout world = make_world_layout(0, 4, 2);
  MoeSplit moe_split = MoeSplit::Experts;
  std::string backend = "cpu";

  RunInputs() {
    meta.point_specs = {"2", "4", "final"};
    meta.point_ids = {2, 4, 9};
    meta.capture_request = "2,4,final";
    meta.convention = "layertap-v1";
    meta.num_layers = 8;
    meta.hidden = 64;
    meta.dtype = DType::BF16;
    meta.compression = io::parse_compression("lz4");
    meta.architecture = "LlamaForCausalLM";
    meta.config_sha256 = std::string(64, 'c');
    meta.weights_fingerprint = std::string(64, 'w');
  }
  json identity() const { return run_identity(meta, dataset_sha256, dataset_samples, world, moe_split, backend); }
};

// The top-level keys whose values differ between two JSON objects (present in one only included).
std::set<std::string> differing_keys(const json& a, const json& b) {
  std::set<std::string> keys;
  for (const auto& [k, v] : a.items())
    if (!b.contains(k) || b[k] != v) keys.insert(k);
  for (const auto& [k, v] : b.items())
    if (!a.contains(k)) keys.insert(k);
  return keys;
}

TEST(RunIdentity, EqualInputsGiveEqualIdentities) {
  const RunInputs a, b;
  EXPECT_EQ(a.identity(), b.identity());
  EXPECT_EQ(a.identity().dump(), b.identity().dump());  // as run.json spells it
  EXPECT_TRUE(a.identity().is_object());
}

TEST(RunIdentity, EachInputThatChangesTheOutputChangesItsOwnKey) {
  struct Row {
    const char* key;
    std::function<void(RunInputs&)> edit;
  };
  const std::vector<Row> rows = {
      {"model_config_sha256", [](RunInputs& r) { r.meta.config_sha256 = std::string(64, 'C'); }},
      {"model_weights_fingerprint", [](RunInputs& r) { r.meta.weights_fingerprint = std::string(64, 'W'); }},
      {"dataset_sha256", [](RunInputs& r) { r.dataset_sha256 = std::string(64, 'e'); }},
      {"dataset_samples", [](RunInputs& r) { r.dataset_samples = 61; }},
      {"capture_point_ids", [](RunInputs& r) { r.meta.point_ids = {2, 5, 9}; }},
      {"capture_point_ids", [](RunInputs& r) { r.meta.point_ids = {2, 4}; }},
      {"storage_dtype", [](RunInputs& r) { r.meta.dtype = DType::F32; }},
      {"storage_dtype", [](RunInputs& r) { r.meta.dtype = DType::F8_E4M3; }},
      {"compression", [](RunInputs& r) { r.meta.compression = io::parse_compression("none"); }},
      {"compression", [](RunInputs& r) { r.meta.compression = io::parse_compression("zstd:3"); }},
      {"world_size", [](RunInputs& r) { r.world = make_world_layout(0, 8, 2); }},  // more data-parallel groups
      {"tp", [](RunInputs& r) { r.world = make_world_layout(0, 4, 4); }},          // same world, other TP
      {"moe_split", [](RunInputs& r) { r.moe_split = MoeSplit::Intermediate; }},
      // float32-exact and bf16-bound shards must not mix under one manifest
      {"backend", [](RunInputs& r) { r.backend = "cuda"; }},
  };
  const json base = RunInputs().identity();
  for (const Row& row : rows) {
    SCOPED_TRACE(row.key);
    RunInputs changed;
    row.edit(changed);
    const json now = changed.identity();
    EXPECT_NE(now, base);
    EXPECT_EQ(differing_keys(base, now), std::set<std::string>{row.key}) << base.dump() << "\n" << now.dump();
  }
}

TEST(RunIdentity, WhatDoesNotChangeTheOutputLeavesItEqual) {
  struct Row {
    const char* name;
    std::function<void(RunInputs&)> before, now;
  };
  const auto nothing = [](RunInputs&) {};
  const std::vector<Row> rows = {
      // Chunks are the same bytes whatever the number of workers encoding them.
      {"compression threads", nothing, [](RunInputs& r) { r.meta.compression.threads = 7; }},
      // zstd level 0 means its default, 1: the same codec.
      {"zstd level 0 and 1", [](RunInputs& r) { r.meta.compression = io::Compression{io::Codec::Zstd, 1, 0}; },
       [](RunInputs& r) { r.meta.compression = io::Compression{io::Codec::Zstd, 0, 0}; }},
      // Every rank of the world computes it alike.
      {"the rank", nothing, [](RunInputs& r) { r.world = make_world_layout(3, 4, 2); }},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    RunInputs before, now;
    row.before(before);
    row.now(now);
    EXPECT_EQ(now.identity(), before.identity());
  }
}

// --- ExtractOptions::job_identity -----------------------------------------------------------------

// Options with every field away from its default, so that a change of any is seen.
ExtractOptions some_options() {
  ExtractOptions o;
  o.model = "/models/llama";
  o.data = "/data/train.jsonl";
  o.out = "/scratch/out";
  o.capture = "2,4,final";
  o.backend = BackendRequest::Cpu;
  o.tp = 2;
  o.moe_split = MoeSplit::Experts;
  o.max_batch_tokens = 4096;
  o.threads = 4;
  o.store_dtype = DType::BF16;
  o.compress = io::parse_compression("lz4");
  o.shard_size_mib = 512;
  o.on_nonfinite = NonFinitePolicy::Fail;
  o.calibrate_batches = 2;
  o.gpu_memory_gib = 40;
  o.progress_seconds = 30;
  o.log_level = "info";
  o.command = "layertap extract --model /models/llama ...";
  return o;
}

// The options that differ between two job identities (JSON objects, one key per option).
std::set<std::string> differing_lines(const std::string& a, const std::string& b) {
  return differing_keys(json::parse(a), json::parse(b));
}

TEST(JobIdentity, EqualOptionsGiveEqualIdentities) {
  EXPECT_EQ(some_options().job_identity(), some_options().job_identity());
  EXPECT_EQ(ExtractOptions().job_identity(), ExtractOptions().job_identity());
  EXPECT_NE(some_options().job_identity(), ExtractOptions().job_identity());
}

TEST(JobIdentity, EveryOptionRanksMustShareChangesItsOwnLine) {
  struct Row {
    const char* name;
    std::function<void(ExtractOptions&)> edit;
  };
  const std::vector<Row> rows = {
      {"model", [](ExtractOptions& o) { o.model = "/models/qwen"; }},
      {"data", [](ExtractOptions& o) { o.data = "/data/other.jsonl"; }},
      {"out", [](ExtractOptions& o) { o.out = "/scratch/out2"; }},
      {"capture", [](ExtractOptions& o) { o.capture = "eagle3"; }},
      {"backend", [](ExtractOptions& o) { o.backend = BackendRequest::Auto; }},
      {"tp", [](ExtractOptions& o) { o.tp = 4; }},
      {"moe-split", [](ExtractOptions& o) { o.moe_split = MoeSplit::Intermediate; }},
      {"max-batch-tokens", [](ExtractOptions& o) { o.max_batch_tokens = 8192; }},
      {"max-sample-tokens", [](ExtractOptions& o) { o.max_sample_tokens = 65536; }},
      {"store-dtype", [](ExtractOptions& o) { o.store_dtype = DType::F8_E4M3; }},
      {"compress", [](ExtractOptions& o) { o.compress = io::parse_compression("zstd:2"); }},
      {"shard-size-mib", [](ExtractOptions& o) { o.shard_size_mib = 1024; }},
      {"overwrite", [](ExtractOptions& o) { o.overwrite = true; }},
      {"resume", [](ExtractOptions& o) { o.resume = true; }},
      {"on-nonfinite", [](ExtractOptions& o) { o.on_nonfinite = NonFinitePolicy::Skip; }},
      {"dry-run", [](ExtractOptions& o) { o.dry_run = true; }},
      {"calibrate-batches", [](ExtractOptions& o) { o.calibrate_batches = 0; }},
      {"ignore-free-space", [](ExtractOptions& o) { o.ignore_free_space = true; }},
      {"no-lock", [](ExtractOptions& o) { o.no_lock = true; }},
      {"read-weights", [](ExtractOptions& o) { o.read_weights = true; }},
      {"gpu-memory", [](ExtractOptions& o) { o.gpu_memory_gib = 80; }},
  };
  const std::string base = some_options().job_identity();
  for (const Row& row : rows) {
    SCOPED_TRACE(row.name);
    ExtractOptions o = some_options();
    row.edit(o);
    EXPECT_EQ(differing_lines(base, o.job_identity()), std::set<std::string>{row.name}) << o.job_identity();
  }
}

// A value holding a newline and another option's "name=value" cannot pass for that option.
TEST(JobIdentity, ValuesCannotForgeAnotherOption) {
  ExtractOptions a = some_options(), b = some_options();
  a.model = "/models/llama\ndata=/data/x.jsonl";
  b.data = "/data/x.jsonl";
  b.model = "/models/llama";
  EXPECT_NE(a.job_identity(), b.job_identity());
  EXPECT_EQ(json::parse(a.job_identity()).at("model"), a.model);
}

TEST(JobIdentity, ThreadsLoggingAndTheCommandsSpellingMayDiffer) {
  const std::string base = some_options().job_identity();
  const std::vector<std::function<void(ExtractOptions&)>> edits = {
      [](ExtractOptions& o) { o.threads = 1; },                 // OpenBLAS threads per rank
      [](ExtractOptions& o) { o.compress.threads = 9; },        // chunk-encoding workers
      [](ExtractOptions& o) { o.log_level = "debug"; },
      [](ExtractOptions& o) { o.progress_seconds = 5; },        // rank 0's progress lines
      [](ExtractOptions& o) { o.command = "layertap extract --model=/models/llama ..."; },
  };
  for (std::size_t i = 0; i < edits.size(); ++i) {
    SCOPED_TRACE(i);
    ExtractOptions o = some_options();
    edits[i](o);
    EXPECT_EQ(o.job_identity(), base);
  }
}

}  // namespace
}  // namespace layertap::job
