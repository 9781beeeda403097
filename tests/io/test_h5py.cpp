// Real clients read a shard: Debian's h5py (float32 view of the bf16 type, attributes, the reading
// example of docs/FORMAT.md) and h5ls.
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

#include "core/error.hpp"
#include "io/shard_writer.hpp"
#include "io_test_util.hpp"

namespace layertap::io {
namespace {

namespace fs = std::filesystem;
using test::make_batch;
using test::TempDir;
using test::test_meta;

// Runs `command` through the shell; returns its exit status and stdout + stderr.
int run(const std::string& command, std::string& output) {
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (!p) return -1;
  std::string out;
  char buf[4096];
  for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, p)) > 0;) out.append(buf, n);
  output = out;
  const int status = ::pclose(p);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

// Writes one bf16 shard of two batches and, next to it, the expected [T, P, H] bf16 bits.
fs::path write_shard(const TempDir& dir) {
  const auto meta = test_meta(4, 24, DType::BF16);
  const std::vector<CapturedBatch> batches = {make_batch({0, 1}, {5, 9}, meta),
                                              make_batch({2}, {4}, meta)};
  const fs::path file = dir.path() / "shard-00000.h5";
  ShardWriter w(dir.path(), file.filename(), meta);
  for (const auto& b : batches) w.append(b);
  w.close();
  std::vector<uint16_t> bits;  // [T, P, H]
  for (const auto& b : batches)
    for (int64_t t = 0; t < b.num_tokens(); ++t)
      for (int64_t p = 0; p < 4; ++p)
        for (int64_t h = 0; h < 24; ++h) {
          uint16_t v;
          std::memcpy(&v, b.states[p].data() + 2 * (t * 24 + h), 2);
          bits.push_back(v);
        }
  std::ofstream(dir.path() / "expected.u16", std::ios::binary)
      .write(reinterpret_cast<const char*>(bits.data()), std::streamsize(2 * bits.size()));
  return file;
}

constexpr const char* kScript = R"(
import sys
import h5py
import numpy as np

path, expected_path = sys.argv[1], sys.argv[2]
with h5py.File(path, "r") as f:
    hs = f["hidden_states"]
    assert hs.dtype == np.float32, hs.dtype
    assert hs.shape == (18, 4, 24), hs.shape
    bits = np.fromfile(expected_path, dtype="<u2").reshape(18, 4, 24)
    want = (bits.astype(np.uint32) << 16).view(np.float32)
    got = hs[...]
    assert np.array_equal(got.view(np.uint32), want.view(np.uint32)), "values differ"

    # The reading example of docs/FORMAT.md: sample i is rows off[i]:off[i+1].
    off = f["sample_offsets"]
    assert list(off[...]) == [0, 5, 14, 18], list(off[...])
    x = f["hidden_states"][off[1]:off[2]]
    assert x.shape == (9, 4, 24) and x.dtype == np.float32
    assert np.array_equal(x.view(np.uint32), want[5:14].view(np.uint32))
    assert list(f["sample_index"][...]) == [0, 1, 2]
    assert f["input_ids"].dtype == np.int32 and f["input_ids"].shape == (18,)
    assert f["loss_mask"].dtype == np.uint8

    a = f.attrs
    assert int(a["format_version"]) == 1
    assert list(a["capture_points"]) == ["2", "4", "5", "final"], a["capture_points"]
    assert list(a["capture_point_ids"]) == [2, 4, 5, 9]
    assert a["capture_request"] == "eagle3" and a["capture_convention"] == "layertap-v1"
    assert a["dtype"] == "bfloat16" and int(a["hidden_size"]) == 24 and int(a["num_layers"]) == 8
    assert a["architecture"] == "LlamaForCausalLM"
print("h5py OK")
)";

TEST(RealClients, H5pyReadsBf16AsFloat32) {
  std::string out;
  if (run(std::string(LAYERTAP_H5PY_PYTHON) + " -c 'import h5py'", out) != 0)
    GTEST_SKIP() << LAYERTAP_H5PY_PYTHON << " cannot import h5py: " << out;
  TempDir dir;
  const fs::path file = write_shard(dir);
  std::ofstream(dir.path() / "check.py") << kScript;
  const std::string cmd = cat(LAYERTAP_H5PY_PYTHON, " ", (dir.path() / "check.py").string(), " ",
                              file.string(), " ", (dir.path() / "expected.u16").string());
  EXPECT_EQ(run(cmd, out), 0) << out;
  EXPECT_NE(out.find("h5py OK"), std::string::npos) << out;
}

TEST(RealClients, H5lsShowsTheBf16Type) {
  std::string out;
  if (run("h5ls --version", out) != 0) GTEST_SKIP() << "h5ls not found";
  TempDir dir;
  const fs::path file = write_shard(dir);
  ASSERT_EQ(run("h5ls -v " + file.string() + "/hidden_states", out), 0) << out;
  EXPECT_NE(out.find("16-bit little-endian floating-point"), std::string::npos) << out;
  EXPECT_NE(out.find("{18/Inf, 4/4, 24/24}"), std::string::npos) << out;
}

}  // namespace
}  // namespace layertap::io
