#include <gtest/gtest.h>

#include <sys/stat.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "model/safetensors.hpp"
#include "error_text.hpp"

namespace layertap {
namespace {

using test::error_of;

namespace fs = std::filesystem;

// Writes a safetensors file holding `a` [2, 3] float32 = 0..5 and `b` [3] bf16 = 1, -2, 0.5.
fs::path write_sample(const fs::path& dir, const std::string& header_override = "") {
  fs::create_directories(dir);
  std::vector<float> a = {0, 1, 2, 3, 4, 5};
  std::vector<uint16_t> b = {0x3f80, 0xc000, 0x3f00};
  nlohmann::json h;
  h["a"] = {{"dtype", "F32"}, {"shape", {2, 3}}, {"data_offsets", {0, 24}}};
  h["b"] = {{"dtype", "BF16"}, {"shape", {3}}, {"data_offsets", {24, 30}}};
  h["__metadata__"] = {{"format", "pt"}};
  const std::string header = header_override.empty() ? h.dump() : header_override;
  const uint64_t n = header.size();
  const fs::path path = dir / "model.safetensors";
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(header.data(), std::streamsize(n));
  out.write(reinterpret_cast<const char*>(a.data()), 24);
  out.write(reinterpret_cast<const char*>(b.data()), 6);
  return path;
}

class Safetensors : public ::testing::Test {
 protected:
  fs::path dir = fs::temp_directory_path() / ("layertap-st-" + std::to_string(::getpid()));
  void TearDown() override { fs::remove_all(dir); }
};

}  // namespace

TEST_F(Safetensors, ReadsWholeTensorsRowsAndColumns) {
  write_sample(dir);
  const Checkpoint ck(checkpoint_files(dir.string()));
  EXPECT_EQ(ck.read("a", {2, 3}), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(ck.read("b", {3}), (std::vector<float>{1, -2, 0.5}));
  EXPECT_EQ(ck.read_rows("a", {2, 3}, 1, 1), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(ck.read_cols("a", {2, 3}, 1, 2), (std::vector<float>{1, 2, 4, 5}));
  EXPECT_EQ(ck.fingerprint().size(), 64u);
}

TEST_F(Safetensors, ErrorsNameTheTensorAndTheFile) {
  write_sample(dir);
  const Checkpoint ck(checkpoint_files(dir.string()));
  EXPECT_NE(error_of([&] { ck.read("c", {1}); }).find("tensor 'c' is missing"), std::string::npos);
  EXPECT_NE(error_of([&] { ck.read("a", {3, 2}); }).find("tensor 'a' in '"), std::string::npos);
  EXPECT_NE(error_of([&] { ck.read_rows("a", {2, 3}, 1, 2); }).find("row slice"), std::string::npos);
  EXPECT_NE(error_of([] { checkpoint_files("/nonexistent/model"); }).find("does not exist"), std::string::npos);
}

TEST_F(Safetensors, RejectsOffsetsThatDisagreeWithShapes) {
  write_sample(dir, R"({"a": {"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 24]}})");
  EXPECT_NE(error_of([&] { Checkpoint ck(checkpoint_files(dir.string())); }).find("tensor 'a'"), std::string::npos);
  write_sample(dir, R"({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 4000]}})");
  EXPECT_NE(error_of([&] { Checkpoint ck(checkpoint_files(dir.string())); }).find("data_offsets"), std::string::npos);
}

// The format's header rules (one row per rule), on the 30-byte data block of write_sample.
TEST_F(Safetensors, EnforcesTheHeaderRules) {
  const struct {
    const char* header;
    const char* message;
  } rows[] = {
      {R"({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
           "a": {"dtype": "BF16", "shape": [3], "data_offsets": [24, 30]}})",
       "tensor 'a' appears twice in the header"},
      {R"({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]},
           "b": {"dtype": "BF16", "shape": [3], "data_offsets": [18, 24]}})",
       "tensor data overlaps at byte 18"},
      {R"({"a": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
           "b": {"dtype": "BF16", "shape": [3], "data_offsets": [24, 30]}})",
       "tensor data leaves a gap at byte 16"},
      {R"({"a": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}})", "the tensors cover 24 of the 30 bytes"},
      {R"({"a": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 0]}})", "overflows 64 bits"},
      {R"({"a": {"dtype": "F8_E5M2", "shape": [30], "data_offsets": [0, 30]}})", "unsupported safetensors dtype"},
      // Floats where integers belong (found by fuzzing under UBSan: the conversion was undefined).
      {R"({"a": {"dtype": "U8", "shape": [1e30], "data_offsets": [0, 30]}})", "'shape' holds 1e+30, not an integer"},
      {R"({"a": {"dtype": "U8", "shape": [30], "data_offsets": [0, 3e19]}})", "'data_offsets' holds 3e+19, not an integer"},
      {R"({"a": {"dtype": "U8", "shape": [30], "data_offsets": [-1, 30]}})", "negative offset"},
      {R"([1, 2])", "the header is not a JSON object"},
  };
  for (const auto& row : rows) {
    write_sample(dir, row.header);
    const std::string e = error_of([&] { Checkpoint ck(checkpoint_files(dir.string())); });
    EXPECT_NE(e.find(row.message), std::string::npos) << row.message << " / got: " << e;
    EXPECT_NE(e.find("model.safetensors"), std::string::npos) << e;
  }
}

TEST_F(Safetensors, ReadsSixteenBitTensorsAtOddOffsets) {
  write_sample(dir, R"({"u": {"dtype": "U8", "shape": [13], "data_offsets": [0, 13]},
                        "h": {"dtype": "BF16", "shape": [1], "data_offsets": [13, 15]},
                        "r": {"dtype": "U8", "shape": [15], "data_offsets": [15, 30]}})");
  // Bytes 12..15 of the data block hold the float32 3.0 (00 00 40 40): bytes 13..14 (00 40) are
  // the bf16 0x4000 = 2.0, at an odd address.
  const Checkpoint ck(checkpoint_files(dir.string()));
  EXPECT_EQ(ck.read("h", {1}), (std::vector<float>{2.0f}));
}

TEST_F(Safetensors, RefusesAFifoInsteadOfBlocking) {
  fs::create_directories(dir);
  ASSERT_EQ(::mkfifo((dir / "model.safetensors").c_str(), 0600), 0);
  EXPECT_NE(error_of([&] { Checkpoint ck(checkpoint_files(dir.string())); }).find("is not a regular file"),
            std::string::npos);
}

TEST_F(Safetensors, IndexEntriesStayInsideTheModelDirectory) {
  write_sample(dir);
  for (const char* entry : {R"("../model.safetensors")", R"("/etc/passwd")", R"("")", "7", R"("sub/x.safetensors")"}) {
    std::ofstream(dir / "model.safetensors.index.json") << R"({"weight_map": {"a": )" << entry << "}}";
    const std::string e = error_of([&] { checkpoint_files(dir.string()); });
    EXPECT_NE(e.find("model.safetensors.index.json': tensor 'a' maps to"), std::string::npos) << entry << ": " << e;
  }
}

TEST_F(Safetensors, FollowsTheShardIndex) {
  write_sample(dir);
  fs::rename(dir / "model.safetensors", dir / "part-1.safetensors");
  std::ofstream(dir / "model.safetensors.index.json") << R"({"weight_map": {"a": "part-1.safetensors", "b": "part-1.safetensors"}})";
  const Checkpoint ck(checkpoint_files(dir.string()));
  EXPECT_EQ(ck.files().size(), 1u);
  EXPECT_TRUE(ck.has("a") && ck.has("b"));
}

}  // namespace layertap
