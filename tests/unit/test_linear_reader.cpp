// LinearReader on tiny hand-written checkpoints: which decoder a module goes to (plain, FP8 blocks
// by the file's dtype, INT4 by the config's targets/ignore), windows of each decoded by hand, and
// the errors for tensors that disagree with the config (they name the tensor or module and the
// expected shape/dtype).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>

#include "core/error.hpp"
#include "model/linear_reader.hpp"
#include "model/packed_weights.hpp"
#include "model/quant_config.hpp"
#include "model/safetensors.hpp"
#include "safetensors_io.hpp"
#include "error_text.hpp"

namespace layertap {
namespace {

using test::error_of;
using test::has;

namespace fs = std::filesystem;
using nlohmann::json;
using test_io::raw;
using test_io::RawTensors;

// int4 groups of 8 on every Linear but those named "plain*".
QuantConfig int4_config() {
  return parse_quant_config(
      json{{"quant_method", "compressed-tensors"},
           {"format", "pack-quantized"},
           {"config_groups",
            {{"g",
              {{"targets", {"Linear"}},
               {"weights",
                {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"}, {"group_size", 8}}}}}}},
           {"ignore", {"re:plain"}}},
      "config.json");
}

QuantConfig fp8_config() {
  return parse_quant_config(json{{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"weight_block_size", {2, 2}}},
                            "config.json");
}

// FP8 [3, 3] with blocks [2, 2] (partial edge blocks): codes 1, 2, -1, 0.5 ... and scale_inv per block.
void add_fp8(RawTensors& t, const std::string& module) {
  t[module + ".weight"] = raw<uint8_t>("F8_E4M3", {3, 3}, {0x38, 0x40, 0xB8, 0x30, 0x38, 0x40, 0x38, 0x38, 0x40});
  t[module + ".weight_scale_inv"] = raw<float>("F32", {2, 2}, {1, 10, 100, 1000});
}

// INT4 [2, 16], groups of 8: row 0 = 0..7 (scale 1), -8..-1 (scale 0.5); row 1 = 1 x8 (scale 2),
// -1 x8 (scale 0.25). Nibble j of a word holds value + 8 at bits 4 * j.
uint32_t pack(const std::vector<int>& values) {
  uint32_t w = 0;
  for (std::size_t j = 0; j < 8; ++j) w |= uint32_t(values[j] + 8) << (4 * j);
  return w;
}
void add_int4(RawTensors& t, const std::string& module) {
  t[module + ".weight_packed"] = raw<uint32_t>(
      "I32", {2, 2},
      {pack({0, 1, 2, 3, 4, 5, 6, 7}), pack({-8, -7, -6, -5, -4, -3, -2, -1}), pack(std::vector<int>(8, 1)),
       pack(std::vector<int>(8, -1))});
  t[module + ".weight_scale"] = raw<uint16_t>("BF16", {2, 2}, {0x3F80, 0x3F00, 0x4000, 0x3E80});
  t[module + ".weight_shape"] = raw<int64_t>("I64", {2}, {2, 16});
}

class LinearReaderTest : public ::testing::Test {
 protected:
  fs::path dir = fs::temp_directory_path() /
                 ("layertap-linear-reader-" + std::to_string(::getpid()) + "-" +
                  ::testing::UnitTest::GetInstance()->current_test_info()->name());
  void TearDown() override { fs::remove_all(dir); }
  std::unique_ptr<Checkpoint> write(const RawTensors& t) {
    test_io::write_file(dir / "model.safetensors", t);
    return std::make_unique<Checkpoint>(checkpoint_files(dir.string()));
  }
};

}  // namespace

TEST_F(LinearReaderTest, PlainWeightsReadAsStoredWhateverTheConfig) {
  RawTensors t;
  t["plain.weight"] = raw<uint16_t>("BF16", {2, 3}, {0x3F80, 0x4000, 0x4040, 0x4080, 0x40A0, 0x40C0});  // 1..6
  const auto ck = write(t);
  const QuantConfig none, fp8 = fp8_config(), int4 = int4_config();
  for (const QuantConfig* q : {&none, &fp8, &int4}) {
    const LinearReader r(*ck, *q);
    EXPECT_EQ(r.read("plain", 2, 3, {0, 2, 0, 3}), (std::vector<float>{1, 2, 3, 4, 5, 6})) << q->describe();
    EXPECT_EQ(r.read("plain", 2, 3, {1, 1, 1, 2}), (std::vector<float>{5, 6})) << q->describe();
  }
  EXPECT_TRUE(has(error_of([&] { LinearReader(*ck, none).read("plain", 3, 2, {0, 3, 0, 2}); }),
                  "tensor 'plain.weight'"));
}

TEST_F(LinearReaderTest, Fp8BlocksDecodeWithPartialEdges) {
  RawTensors t;
  add_fp8(t, "f");
  const auto ck = write(t);
  const QuantConfig q = fp8_config();  // LinearReader keeps a reference
  const LinearReader r(*ck, q);
  EXPECT_EQ(r.read("f", 3, 3, {0, 3, 0, 3}), (std::vector<float>{1, 2, -10, 0.5, 1, 20, 100, 100, 2000}));
  EXPECT_EQ(r.read("f", 3, 3, {1, 2, 1, 2}), (std::vector<float>{1, 20, 100, 2000}));
}

TEST_F(LinearReaderTest, Fp8WithoutFp8ConfigNamesTheTensor) {
  RawTensors t;
  add_fp8(t, "plain_f");  // "plain*" is in int4_config's ignore list
  const auto ck = write(t);
  const QuantConfig none, int4 = int4_config(), fp8 = fp8_config();
  for (const QuantConfig* q : {&none, &int4}) {
    const std::string e = error_of([&] { LinearReader(*ck, *q).read("plain_f", 3, 3, {0, 3, 0, 3}); });
    EXPECT_TRUE(has(e, "tensor 'plain_f.weight' in '")) << e;
    EXPECT_TRUE(has(e, "is float8_e4m3fn but the config has no fp8 quantization_config")) << e;
    EXPECT_TRUE(has(e, "(it has: " + q->describe() + ")")) << e;
  }
  // The config's [out, in] must be the weight's.
  const std::string e = error_of([&] { LinearReader(*ck, fp8).read("plain_f", 3, 4, {0, 3, 0, 4}); });
  EXPECT_TRUE(has(e, "tensor 'plain_f.weight'") && has(e, "needs [3, 4]")) << e;
}

TEST_F(LinearReaderTest, Fp8ScaleShapeAndDtypeAreChecked) {
  RawTensors t;
  add_fp8(t, "f");
  t["f.weight_scale_inv"].shape = {1, 4};
  add_fp8(t, "h");
  t["h.weight_scale_inv"] = raw<uint16_t>("F16", {2, 2}, {0x3C00, 0x3C00, 0x3C00, 0x3C00});
  add_fp8(t, "m");
  t.erase("m.weight_scale_inv");
  const auto ck = write(t);
  const QuantConfig q = fp8_config();
  const LinearReader r(*ck, q);
  std::string e = error_of([&] { r.read("f", 3, 3, {0, 3, 0, 3}); });
  EXPECT_TRUE(has(e, "tensor 'f.weight_scale_inv'")) << e;
  EXPECT_TRUE(has(e, "has shape [1, 4], fp8 blocks of [2, 2] over [3, 3] needs [2, 2]")) << e;
  e = error_of([&] { r.read("h", 3, 3, {0, 3, 0, 3}); });
  EXPECT_TRUE(has(e, "tensor 'h.weight_scale_inv'") && has(e, "dtype float16") && has(e, "needs float32")) << e;
  e = error_of([&] { r.read("m", 3, 3, {0, 3, 0, 3}); });
  EXPECT_TRUE(has(e, "m.weight_scale_inv")) << e;
}

TEST_F(LinearReaderTest, Int4GroupsDecode) {
  RawTensors t;
  add_int4(t, "q");
  add_int4(t, "q32");
  t["q32.weight_shape"] = raw<int32_t>("I32", {2}, {2, 16});  // int32 weight_shape is accepted too
  add_int4(t, "noshape");
  t.erase("noshape.weight_shape");  // optional
  const auto ck = write(t);
  const QuantConfig q = int4_config();
  const LinearReader r(*ck, q);
  const std::vector<float> want = {0, 1, 2, 3, 4, 5, 6, 7, -4, -3.5, -3, -2.5, -2, -1.5, -1, -0.5,
                                   2, 2, 2, 2, 2, 2, 2, 2, -0.25, -0.25, -0.25, -0.25, -0.25, -0.25, -0.25, -0.25};
  for (const char* m : {"q", "q32", "noshape"}) EXPECT_EQ(r.read(m, 2, 16, {0, 2, 0, 16}), want) << m;
  // A window across the group boundary, starting mid-word.
  EXPECT_EQ(r.read("q", 2, 16, {0, 2, 6, 4}), (std::vector<float>{6, 7, -4, -3.5, 2, 2, -0.25, -0.25}));
}

TEST_F(LinearReaderTest, Int4ErrorsNameTheModule) {
  RawTensors t;
  t["a.weight"] = raw<float>("F32", {2, 16}, std::vector<float>(32, 1.0f));  // targeted but stored plain
  add_int4(t, "s");
  t["s.weight_shape"] = raw<int64_t>("I64", {2}, {2, 8});
  add_int4(t, "p");
  t["p.weight_packed"] = raw<float>("F32", {2, 2}, {0, 0, 0, 0});
  add_int4(t, "g");
  t["g.weight_scale"] = raw<uint16_t>("BF16", {2, 1}, {0x3F80, 0x3F80});
  add_int4(t, "plain_packed");  // in the ignore list, yet packed
  const auto ck = write(t);
  const QuantConfig q = int4_config();
  const LinearReader r(*ck, q);
  std::string e = error_of([&] { r.read("a", 2, 16, {0, 2, 0, 16}); });
  EXPECT_TRUE(has(e, "module 'a' is int4-quantized")) << e;
  EXPECT_TRUE(has(e, "'a.weight_packed' is missing from the checkpoint (it has a float32 .weight)")) << e;
  e = error_of([&] { r.read("absent", 2, 16, {0, 2, 0, 16}); });
  EXPECT_TRUE(has(e, "'absent.weight_packed' is missing")) << e;
  EXPECT_FALSE(has(e, "(it has a")) << e;
  e = error_of([&] { r.read("s", 2, 16, {0, 2, 0, 16}); });
  EXPECT_TRUE(has(e, "tensor 's.weight_shape' records shape [2, 8], the config implies [2, 16]")) << e;
  e = error_of([&] { r.read("p", 2, 16, {0, 2, 0, 16}); });
  EXPECT_TRUE(has(e, "tensor 'p.weight_packed'") && has(e, "dtype float32") && has(e, "needs int32")) << e;
  e = error_of([&] { r.read("g", 2, 16, {0, 2, 0, 16}); });
  EXPECT_TRUE(has(e, "tensor 'g.weight_scale'") && has(e, "int4 groups of 8 over [2, 16] needs [2, 2]")) << e;
  e = error_of([&] { r.read("plain_packed", 2, 16, {0, 2, 0, 16}); });
  EXPECT_TRUE(has(e, "module 'plain_packed' is stored int4-packed (weight_packed) but the config's "
                     "quantization_config (int4 groups of 8")) << e;
  const QuantConfig none;
  e = error_of([&] { LinearReader(*ck, none).read("g", 2, 16, {0, 2, 0, 16}); });
  EXPECT_TRUE(has(e, "module 'g' is stored int4-packed") && has(e, "(none)")) << e;
}

// A Linear's tensors must all be of one stored form; a stray companion (an FP8 scale beside a bf16
// weight, INT4 scales beside an FP8 one, an FP8 scale inside an INT4 module) is named, never ignored.
TEST_F(LinearReaderTest, MixedStoredFormsNameTheStrayTensor) {
  RawTensors t;
  t["x.weight"] = raw<uint16_t>("BF16", {3, 3}, std::vector<uint16_t>(9, 0x3F80));
  t["x.weight_scale_inv"] = raw<float>("F32", {2, 2}, {1, 1, 1, 1});  // FP8 scale beside a bf16 weight
  add_fp8(t, "f");
  t["f.weight_scale"] = raw<uint16_t>("BF16", {3, 1}, {0x3F80, 0x3F80, 0x3F80});  // an INT4 scale beside FP8
  add_int4(t, "plain_i");
  t["plain_i.weight"] = raw<float>("F32", {2, 16}, std::vector<float>(32, 1.0f));  // packed AND plain
  const auto ck = write(t);
  const QuantConfig fp8 = fp8_config();
  std::string e = error_of([&] { LinearReader(*ck, fp8).read("x", 3, 3, {0, 3, 0, 3}); });
  EXPECT_TRUE(has(e, "tensor 'x.weight_scale_inv'") && has(e, "does not belong to module 'x'") &&
              has(e, "plain float weight") && has(e, "model.safetensors")) << e;
  e = error_of([&] { LinearReader(*ck, fp8).read("f", 3, 3, {0, 3, 0, 3}); });
  EXPECT_TRUE(has(e, "tensor 'f.weight_scale'") && has(e, "float8_e4m3fn")) << e;
  const QuantConfig int4 = int4_config();  // "plain*" modules are ignored: plain_i should be a plain weight
  e = error_of([&] { LinearReader(*ck, int4).read("plain_i", 2, 16, {0, 2, 0, 16}); });
  EXPECT_TRUE(has(e, "does not belong to module 'plain_i'") && has(e, "plain_i.weight_")) << e;
  // The packed path (the CUDA backend's load plan) applies the same rule.
  e = error_of([&] { (void)packed_format(*ck, fp8, "x"); });
  EXPECT_TRUE(has(e, "tensor 'x.weight_scale_inv'")) << e;
}

}  // namespace layertap
