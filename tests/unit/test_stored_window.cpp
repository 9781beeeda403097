// model/stored_window.hpp: windows read with pread in blocks of rows (a column window in one
// preadv per 512 rows, not one read per row), a file truncated after it was opened named instead
// of SIGBUS, and the one value rule (finite weights, finite positive scales) as the CPU backend's
// readers apply it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "error_text.hpp"
#include "model/linear_reader.hpp"
#include "model/packed_weights.hpp"
#include "model/quant_config.hpp"
#include "model/safetensors.hpp"
#include "model/stored_window.hpp"
#include "safetensors_io.hpp"

namespace layertap {
namespace {

using test::error_of;
using test::has;
using test_io::raw;
using test_io::RawTensors;
namespace fs = std::filesystem;

class StoredWindowTest : public ::testing::Test {
 protected:
  fs::path dir = fs::temp_directory_path() / ("layertap-stored-window-" + std::to_string(::getpid()) + "-" +
                                              ::testing::UnitTest::GetInstance()->current_test_info()->name());
  void TearDown() override { fs::remove_all(dir); }
  std::unique_ptr<Checkpoint> write(const RawTensors& t) {
    test_io::write_file(dir / "model.safetensors", t);
    return std::make_unique<Checkpoint>(checkpoint_files(dir.string()));
  }
};

// [rows, cols] float32 with value r * 1000 + c.
RawTensors grid(int64_t rows, int64_t cols) {
  std::vector<float> v(std::size_t(rows * cols));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) v[std::size_t(r * cols + c)] = float(r * 1000 + c);
  RawTensors t;
  t["w"] = raw<float>("F32", {rows, cols}, v);
  return t;
}

QuantConfig fp8_config() {
  return parse_quant_config(nlohmann::json{{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {2, 2}}},
                            "config.json");
}

}  // namespace

TEST_F(StoredWindowTest, ColumnWindowsReadInBlocksOfRows) {
  const int64_t rows = 1500, cols = 12;
  const auto ck = write(grid(rows, cols));
  const std::uint64_t before = window_read_calls();
  const std::vector<float> got = ck->read_cols("w", {rows, cols}, 4, 5);
  // 1500 rows in calls of at most 512 rows (IOV_MAX / 2 on Linux): 3 calls, not 1500.
  EXPECT_LE(window_read_calls() - before, 3u);
  ASSERT_EQ(got.size(), std::size_t(rows * 5));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < 5; ++c) ASSERT_EQ(got[std::size_t(r * 5 + c)], float(r * 1000 + 4 + c)) << r << " " << c;
  // A window inside the rows and columns, and rows r0.. of it.
  const StoredWindow w = float_window(ck->info("w"), 700, 600, 11, 1);
  std::vector<float> tail(100);
  read_window_rows(w, 500, 100, reinterpret_cast<std::byte*>(tail.data()));
  for (int64_t r = 0; r < 100; ++r) EXPECT_EQ(tail[std::size_t(r)], float((1200 + r) * 1000 + 11)) << r;
}

TEST_F(StoredWindowTest, AFileTruncatedAfterOpeningIsNamed) {
  const auto ck = write(grid(64, 64));
  fs::resize_file(dir / "model.safetensors", fs::file_size(dir / "model.safetensors") - 4096);
  const std::string e = error_of([&] { ck->read("w", {64, 64}); });
  EXPECT_TRUE(has(e, "model.safetensors")) << e;
  EXPECT_TRUE(has(e, "inside tensor 'w'")) << e;
  EXPECT_TRUE(has(e, "truncated")) << e;
}

TEST_F(StoredWindowTest, FloatWeightsMustBeFiniteAlsoInBfloat16) {
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::max()}) {
    RawTensors t = grid(3, 4);
    std::memcpy(t["w"].bytes.data() + 4 * (2 * 4 + 1), &bad, 4);
    const auto ck = write(t);
    const std::string e = error_of([&] { ck->read("w", {3, 4}); });
    EXPECT_TRUE(has(e, "tensor 'w'") && has(e, "model.safetensors") && has(e, "[2, 1]")) << e;
    EXPECT_TRUE(has(e, std::isfinite(bad) ? "beyond bfloat16's range" : "weights must be finite")) << e;
    // The columns without it read (a rank checks its own window).
    EXPECT_EQ(ck->read_cols("w", {3, 4}, 2, 2).size(), 6u);
  }
  // The largest float32 that stays finite in bfloat16 (0x7f7f7fff rounds down to 0x7f7f) is taken.
  RawTensors t = grid(1, 2);
  const std::uint32_t edge = 0x7f7f7fffu;
  std::memcpy(t["w"].bytes.data(), &edge, 4);
  EXPECT_EQ(write(t)->read("w", {1, 2}).size(), 2u);
}

TEST_F(StoredWindowTest, QuantizedReadersRefuseBadScalesAndNanCodes) {
  const QuantConfig q = fp8_config();
  // FP8 [3, 3], blocks [2, 2]: scale_inv [2, 2].
  const std::vector<uint8_t> codes = {0x38, 0x40, 0xB8, 0x30, 0x38, 0x40, 0x38, 0x38, 0x40};
  struct Case {
    const char* what;
    std::vector<uint8_t> codes;
    std::vector<float> scales;
    const char* needle;
  };
  const Case cases[] = {
      {"zero scale", codes, {1, 0, 100, 1000}, "holds the scale 0 at [0, 1]"},
      {"negative scale", codes, {1, 10, -100, 1000}, "holds the scale -100 at [1, 0]"},
      {"NaN scale", codes, {1, 10, 100, std::nanf("")}, "at [1, 1]: quantization scales must be finite and positive"},
      {"NaN code", {0x38, 0x40, 0xB8, 0x30, 0x7f, 0x40, 0x38, 0x38, 0x40}, {1, 10, 100, 1000}, "at [1, 1]: weights"},
  };
  for (const Case& c : cases) {
    RawTensors t;
    t["f.weight"] = raw<uint8_t>("F8_E4M3", {3, 3}, c.codes);
    t["f.weight_scale_inv"] = raw<float>("F32", {2, 2}, c.scales);
    const auto ck = write(t);
    const std::string cpu = error_of([&] { LinearReader(*ck, q).read("f", 3, 3, {0, 3, 0, 3}); });
    const std::string packed = error_of([&] { read_packed_linear(*ck, q, "f", 3, 3, {0, 3, 0, 3}); });
    for (const std::string& e : {cpu, packed}) {
      EXPECT_TRUE(has(e, c.needle) && has(e, "model.safetensors") && has(e, "'f.weight")) << c.what << ": " << e;
    }
  }
  {  // A zero scale outside a rank's window is another rank's to refuse.
    RawTensors t;
    t["f.weight"] = raw<uint8_t>("F8_E4M3", {3, 3}, codes);
    t["f.weight_scale_inv"] = raw<float>("F32", {2, 2}, {1, 10, 0, 1000});
    const auto ck = write(t);
    EXPECT_EQ(LinearReader(*ck, q).read("f", 3, 3, {0, 2, 0, 3}).size(), 6u);
    EXPECT_TRUE(has(error_of([&] { LinearReader(*ck, q).read("f", 3, 3, {1, 2, 0, 3}); }), "holds the scale 0"));
  }
}

TEST_F(StoredWindowTest, Int4ScalesMustBePositive) {
  const QuantConfig q = parse_quant_config(
      nlohmann::json{{"quant_method", "compressed-tensors"},
                     {"format", "pack-quantized"},
                     {"config_groups",
                      {{"g",
                        {{"targets", {"Linear"}},
                         {"weights",
                          {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"}, {"group_size", 8}}}}}}}},
      "config.json");
  RawTensors t;
  t["m.weight_packed"] = raw<uint32_t>("I32", {2, 2}, {0x88888888u, 0x88888888u, 0x88888888u, 0x88888888u});
  t["m.weight_scale"] = raw<uint16_t>("BF16", {2, 2}, {0x3F80, 0x3F00, 0x0000, 0x3E80});  // [1, 0] is zero
  const auto ck = write(t);
  for (const std::string& e : {error_of([&] { LinearReader(*ck, q).read("m", 2, 16, {0, 2, 0, 16}); }),
                               error_of([&] { read_packed_linear(*ck, q, "m", 2, 16, {0, 2, 0, 16}); })})
    EXPECT_TRUE(has(e, "tensor 'm.weight_scale'") && has(e, "holds the scale 0 at [1, 0]")) << e;
  EXPECT_EQ(LinearReader(*ck, q).read("m", 2, 16, {0, 2, 8, 8}).size(), 16u);  // its window avoids the zero
}

TEST_F(StoredWindowTest, AnEmptyWeightMapNamesTheIndex) {
  fs::create_directories(dir);
  std::ofstream(dir / "model.safetensors.index.json") << R"({"metadata": {}, "weight_map": {}})";
  const std::string e = error_of([&] { checkpoint_files(dir.string()); });
  EXPECT_TRUE(has(e, "model.safetensors.index.json") && has(e, "empty weight_map")) << e;
}

}  // namespace layertap
