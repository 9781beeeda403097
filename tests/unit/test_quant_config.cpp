// quantization_config parsing (DeepSeek fp8 blocks, compressed-tensors int4 groups, refusals naming
// the unsupported method/scheme) and QuantConfig::int4_packed: which modules are stored packed,
// with compressed-tensors' matching rules ("re:" = Python re.match, anchored at the start only;
// other entries match whole module names; the target "Linear" matches every Linear).
#include <gtest/gtest.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/stop_request.hpp"
#include "model/hf_config.hpp"
#include "model/quant_config.hpp"
#include "error_text.hpp"

namespace layertap {
namespace {

using test::has;

using nlohmann::json;

// A compressed-tensors int4 config with the given targets and ignore list.
json int4(json targets, json ignore) {
  return json{{"quant_method", "compressed-tensors"},
              {"format", "pack-quantized"},
              {"config_groups",
               {{"group_0",
                 {{"targets", std::move(targets)},
                  {"input_activations", nullptr},
                  {"output_activations", nullptr},
                  {"weights",
                   {{"num_bits", 4}, {"type", "int"}, {"symmetric", true}, {"strategy", "group"}, {"group_size", 32}}}}}}},
              {"ignore", std::move(ignore)}};
}

std::string error_of(const json& q) {
  try {
    parse_quant_config(q, "config.json");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

const QuantConfig& kimi_k25() {
  static const QuantConfig q =
      load_model_config(std::string(LAYERTAP_FIXTURES) + "/models/kimi_k25_int4/config.json").quant;
  return q;
}

}  // namespace

TEST(QuantConfig, KimiK25IgnoreListPacksOnlyRoutedExperts) {
  const QuantConfig& q = kimi_k25();
  ASSERT_EQ(q.method, QuantConfig::Method::Int4Group);
  const std::string p = "language_model.model.layers.1.";
  for (const char* proj : {"gate_proj", "up_proj", "down_proj"})
    EXPECT_TRUE(q.int4_packed(p + "mlp.experts.3." + proj)) << proj;
  EXPECT_TRUE(q.int4_packed(p + "mlp.experts.0.down_proj"));
  for (const std::string& m : {p + "self_attn.q_a_proj", p + "self_attn.kv_b_proj", p + "self_attn.o_proj",
                              p + "mlp.shared_experts.gate_proj", p + "mlp.shared_experts.down_proj",
                              std::string("language_model.model.layers.0.mlp.gate_proj"),
                              std::string("language_model.model.layers.0.mlp.up_proj"),
                              std::string("language_model.model.layers.0.mlp.down_proj"),
                              std::string("language_model.lm_head"), std::string("vision_tower.encoder.blocks.0.wqkv"),
                              std::string("mm_projector.proj.0")})
    EXPECT_FALSE(q.int4_packed(m)) << m;
}

TEST(QuantConfig, RePatternsAnchorAtTheStartOnly) {
  const QuantConfig start = parse_quant_config(int4({"Linear"}, {"re:mlp"}), "c");
  EXPECT_TRUE(start.int4_packed("x.mlp"));    // re.match("mlp", "x.mlp") is None
  EXPECT_FALSE(start.int4_packed("mlp.x"));   // matches at the start
  EXPECT_FALSE(start.int4_packed("mlpx"));    // not anchored at the end either
  const QuantConfig any = parse_quant_config(int4({"Linear"}, {"re:.*mlp"}), "c");
  EXPECT_FALSE(any.int4_packed("x.mlp"));
  EXPECT_FALSE(any.int4_packed("x.mlp.experts.0.up_proj"));  // prefix match, not fullmatch
  EXPECT_TRUE(any.int4_packed("x.attn"));
  // Escaped dots and alternation as Kimi writes them.
  const QuantConfig kimi = parse_quant_config(int4({"Linear"}, {R"(re:.*mlp\.(gate|up|gate_up|down)_proj.*)"}), "c");
  EXPECT_FALSE(kimi.int4_packed("m.layers.0.mlp.gate_up_proj"));
  EXPECT_TRUE(kimi.int4_packed("m.layers.0.mlpXgate_proj"));  // '\.' is a literal dot
  EXPECT_TRUE(kimi.int4_packed("m.layers.0.mlp.experts.1.gate_proj"));
}

// Catastrophic patterns for a backtracking engine (exponential in the name's length): RE2 matches
// them in time linear in the name, so these return at once instead of hanging the load (the test's
// own timeout is the check that they return at all).
TEST(QuantConfig, CatastrophicPatternsTerminate) {
  const std::string name = "language_model.model.layers.60.mlp.experts.383.down_proj" + std::string(200, 'a');
  const QuantConfig q =
      parse_quant_config(int4({"Linear"}, {"re:(.+)+X", "re:(a|a)*b", "re:((a*)*)*c", "re:(.*a){20}Z"}), "config.json");
  EXPECT_TRUE(q.int4_packed(name));  // none of the four matches it
  EXPECT_FALSE(q.int4_packed(name.substr(0, name.size() - 200) + "X"));  // the first one matches this one
  // Python's named groups and the real configs' patterns are RE2 syntax too.
  const QuantConfig named = parse_quant_config(int4({"Linear"}, {"re:(?P<x>.*mlp)\\.(gate|up|down)_proj.*"}), "c");
  EXPECT_FALSE(named.int4_packed("model.layers.0.mlp.gate_proj"));
  EXPECT_TRUE(named.int4_packed("model.layers.1.mlp.experts.0.gate_proj"));
}

TEST(QuantConfig, PlainEntriesMatchWholeNames) {
  const QuantConfig q = parse_quant_config(int4({"Linear"}, {"model.layers.1.mlp"}), "c");
  EXPECT_FALSE(q.int4_packed("model.layers.1.mlp"));
  EXPECT_TRUE(q.int4_packed("model.layers.1.mlp.experts.0.up_proj"));
  EXPECT_TRUE(q.int4_packed("xmodel.layers.1.mlp"));
  EXPECT_TRUE(q.int4_packed("model.layers.1.ml"));
}

TEST(QuantConfig, TargetsLinearOrPattern) {
  const QuantConfig linear = parse_quant_config(int4({"Linear"}, json::array()), "c");
  EXPECT_TRUE(linear.int4_packed("model.layers.0.self_attn.o_proj"));
  EXPECT_TRUE(linear.int4_packed("anything"));
  const QuantConfig experts = parse_quant_config(int4({"re:.*experts.*"}, json::array()), "c");
  EXPECT_TRUE(experts.int4_packed("model.layers.1.mlp.experts.0.down_proj"));
  EXPECT_FALSE(experts.int4_packed("model.layers.0.mlp.down_proj"));
  EXPECT_FALSE(experts.int4_packed("model.layers.1.self_attn.o_proj"));
  // Ignore wins over targets.
  const QuantConfig both = parse_quant_config(int4({"re:.*experts.*"}, {"re:.*experts\\.0\\..*"}), "c");
  EXPECT_FALSE(both.int4_packed("m.experts.0.up_proj"));
  EXPECT_TRUE(both.int4_packed("m.experts.1.up_proj"));
}

TEST(QuantConfig, NoneAndFp8PackNothing) {
  EXPECT_FALSE(QuantConfig{}.int4_packed("model.layers.1.mlp.experts.0.down_proj"));
  const QuantConfig fp8 = parse_quant_config(
      json{{"quant_method", "fp8"}, {"fmt", "e4m3"}, {"activation_scheme", "dynamic"}, {"weight_block_size", {128, 128}}},
      "c");
  EXPECT_EQ(fp8.method, QuantConfig::Method::Fp8Block);
  EXPECT_EQ(fp8.block_rows, 128);
  EXPECT_EQ(fp8.block_cols, 128);
  EXPECT_EQ(fp8.describe(), "fp8 e4m3 blocks [128, 128]");
  EXPECT_FALSE(fp8.int4_packed("model.layers.1.mlp.experts.0.down_proj"));
  EXPECT_EQ(QuantConfig{}.describe(), "none");
}

TEST(QuantConfig, RefusalsNameTheProblem) {
  for (const char* method : {"awq", "gptq", "bitsandbytes"})
    EXPECT_TRUE(has(error_of(json{{"quant_method", method}, {"bits", 4}}),
                    std::string("quant_method '") + method + "' is not supported"))
        << method;
  // fp8
  EXPECT_TRUE(has(error_of(json{{"quant_method", "fp8"}, {"fmt", "e4m3"}}), "weight_block_size"));
  EXPECT_TRUE(has(error_of(json{{"quant_method", "fp8"}, {"weight_block_size", {128}}}), "weight_block_size"));
  EXPECT_TRUE(has(error_of(json{{"quant_method", "fp8"}, {"fmt", "e5m2"}, {"weight_block_size", {128, 128}}}),
                  "format 'e5m2'"));
  EXPECT_TRUE(has(error_of(json{{"quant_method", "fp8"}, {"weight_block_size", {0, 128}}}), "weight_block_size"));
  // compressed-tensors
  json q = int4({"Linear"}, json::array());
  q["config_groups"]["group_0"]["weights"]["num_bits"] = 8;
  EXPECT_TRUE(has(error_of(q), "num_bits 8")) << error_of(q);
  q = int4({"Linear"}, json::array());
  q["config_groups"]["group_0"]["weights"]["symmetric"] = false;
  EXPECT_TRUE(has(error_of(q), "symmetric 0")) << error_of(q);
  q = int4({"Linear"}, json::array());
  q["config_groups"]["group_0"]["weights"]["strategy"] = "channel";
  EXPECT_TRUE(has(error_of(q), "strategy 'channel'")) << error_of(q);
  q = int4({"Linear"}, json::array());
  q["config_groups"]["group_0"]["input_activations"] = {{"num_bits", 8}, {"type", "float"}};
  EXPECT_TRUE(has(error_of(q), "quantizes input_activations")) << error_of(q);
  // GPTQ group activation ordering: columns map to groups through weight_g_idx, which is not applied.
  for (const json& actorder : {json("group"), json("dynamic"), json(true)}) {
    q = int4({"Linear"}, json::array());
    q["config_groups"]["group_0"]["weights"]["actorder"] = actorder;
    EXPECT_TRUE(has(error_of(q), "actorder " + actorder.dump() + " is not supported")) << error_of(q);
  }
  for (const json& actorder : {json(nullptr), json("weight"), json("static"), json(false)}) {
    q = int4({"Linear"}, json::array());
    q["config_groups"]["group_0"]["weights"]["actorder"] = actorder;
    EXPECT_EQ(error_of(q), "") << actorder.dump();
  }
  q = int4({"Linear"}, json::array());
  q["format"] = "float-quantized";
  EXPECT_TRUE(has(error_of(q), "format 'float-quantized'")) << error_of(q);
  q = int4({"Linear"}, json::array());
  q["config_groups"]["group_0"]["format"] = "naive-quantized";  // a group's own format wins
  EXPECT_TRUE(has(error_of(q), "format 'naive-quantized'")) << error_of(q);
  q = int4({"Linear"}, json::array());
  q["config_groups"] = json::object();
  EXPECT_TRUE(has(error_of(q), "no config_groups")) << error_of(q);
  q = int4({"Linear"}, json::array());
  q["config_groups"]["group_1"] = q["config_groups"]["group_0"];
  q["config_groups"]["group_1"]["weights"]["group_size"] = 64;
  EXPECT_TRUE(has(error_of(q), "group_size 64 differs")) << error_of(q);
  // Patterns without a linear-time match (backreferences, lookaround) are refused naming them.
  for (const char* p : {"re:(mlp)\\1", "re:.*(?=mlp)", "re:(?<!x)mlp"})
    EXPECT_TRUE(has(error_of(int4({"Linear"}, {p})), std::string("pattern '") + p + "'")) << error_of(int4({"Linear"}, {p}));
  EXPECT_TRUE(has(error_of(int4({"Linear"}, "re:.*mlp")), "'ignore' must be a list"));
}

}  // namespace layertap

namespace layertap {

// Thousands of patterns are matched at once (RE2::Sets): the verdicts are those of matching each
// pattern alone (checked here against a list where exactly the expected names match), and a bad
// pattern deep in a long list is still named.
TEST(QuantConfig, LongPatternListsMatchAsEachPatternWould) {
  json ignore = json::array();
  for (int i = 0; i < 20000; ++i)  // half anchored at the start, half beginning with ".*"
    ignore.push_back(i % 2 == 0 ? "re:model\\.layers\\." + std::to_string(100000 + i) + "\\."
                                : "re:.*\\.layers\\." + std::to_string(100000 + i) + "\\.mlp");
  ignore.push_back("re:.*\\.layers\\.(3|7)\\.self_attn");  // the one that matches real names
  ignore.push_back("model.layers.5.mlp.down_proj");         // and one exact name
  const QuantConfig q = parse_quant_config(int4({"Linear"}, ignore), "c");
  EXPECT_EQ(q.ignore_match.pattern_count(), 20001u);
  int packed = 0, modules = 0;  // 1,200 module names: 100 layers of 12 Linear modules
  for (int layer = 0; layer < 100; ++layer)
    for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "mlp.experts.0.gate_proj",
                          "mlp.experts.0.up_proj", "mlp.experts.0.down_proj", "mlp.experts.1.gate_proj",
                          "mlp.experts.1.down_proj"}) {
      const std::string name = "model.layers." + std::to_string(layer) + "." + m;
      const bool ignored = ((layer == 3 || layer == 7) && name.find("self_attn") != std::string::npos) ||
                           name == "model.layers.5.mlp.down_proj";
      EXPECT_EQ(q.int4_packed(name), !ignored) << name;
      packed += q.int4_packed(name);
      ++modules;
    }
  EXPECT_EQ(modules, 1200);
  EXPECT_EQ(packed, 1200 - 9);  // layers 3 and 7's four self_attn projections, and the exact name
  EXPECT_FALSE(q.int4_packed("model.layers.100008.mlp.up_proj"));  // one of the 20000, anchored at the start
  EXPECT_TRUE(q.int4_packed("x.model.layers.100008.mlp.up_proj"));
  EXPECT_FALSE(q.int4_packed("x.layers.100009.mlp.up_proj"));  // one of those beginning with ".*"
  EXPECT_TRUE(q.int4_packed("x.layers.100009.attn"));

  json bad = ignore;
  bad.insert(bad.begin() + 10000, "re:(unbalanced");
  const std::string e = error_of(int4({"Linear"}, bad));
  EXPECT_TRUE(has(e, "quantization_config 'ignore' pattern 're:(unbalanced'") && has(e, "linear time")) << e;
  bad = ignore;
  bad.insert(bad.begin() + 15000, "re:.*(?=mlp)");
  const std::string e2 = error_of(int4({"Linear"}, bad));
  EXPECT_TRUE(has(e2, "'ignore' pattern 're:.*(?=mlp)'")) << e2;
}

// The lists' budgets: each is refused naming quantization_config and the list, before it costs
// time or memory: 200,000 patterns, 800,000 syntax nodes, a pattern RE2 refuses alone (as it did
// before the list became a set), 1,000,000 compiled instructions.
TEST(QuantConfig, PatternListsPastTheirBudgetsAreRefused) {
  json huge = json::array();
  for (int i = 0; i < 200000; ++i) huge.push_back("re:x" + std::to_string(i));
  std::string e = error_of(int4({"Linear"}, huge));
  EXPECT_TRUE(has(e, "quantization_config 'ignore' holds 200000 \"re:\" patterns, more than the 50000")) << e;
  json wide = json::array();  // 2,000 patterns of 100 groups: 1,000,000 nodes (RE2 would log 1,000 lines)
  for (int i = 0; i < 2000; ++i) {
    std::string p = "re:" + std::to_string(i);
    for (int g = 0; g < 100; ++g) p += "(a)";
    wide.push_back(p);
  }
  e = error_of(int4(wide, json::array()));
  EXPECT_TRUE(has(e, "quantization_config 'targets' holds 2000 \"re:\" patterns of up to ") &&
              has(e, "syntax nodes in all, more than the 800000")) << e;
  e = error_of(int4({"Linear"}, {"re:.*mlp", "re:\\pL{1000}"}));
  EXPECT_TRUE(has(e, "'ignore' pattern 're:\\pL{1000}'") && has(e, "pattern too large")) << e;
  json big = json::array();
  for (int i = 0; i < 20; ++i) big.push_back("re:" + std::to_string(i) + "\\pL{100}");  // ~120,000 each
  e = error_of(int4({"Linear"}, big));
  EXPECT_TRUE(has(e, "'ignore' pattern 're:8\\pL{100}' (9 of 20) brings its \"re:\" patterns past 1000000 compiled "
                     "RE2 instructions")) << e;
}

// Patterns beginning with ".*" are searched anywhere without it; that is the same verdict for an
// ASCII name without a newline, and the others are matched as written. Not stripped: a top-level
// '|' ("re:.*a|b" is ".*a" or "b" at the start), and what only looks like one.
TEST(QuantConfig, LeadingDotStarPatternsMatchAsWritten) {
  const QuantConfig q = parse_quant_config(
      int4({"Linear"}, {"re:.*mlp", "re:.*attn|head", "re:^.*?gate$", "re:.*[|]x", "re:.*\\|y", "re:.*(a|b)z",
                        "re:.*\\Q|\\Ew", "re:.*[[:digit:]|]v", "re:.*[]|]u", "re:.*^start"}),
      "c");
  for (const char* ignored : {"x.mlp.y", "mlp", "x.attn", "head.x", "x.gate", "gate", "1|x", "1|y", "1bz", "1|w",
                              "7v", "|v", "|u", "]u", "start.x"})
    EXPECT_FALSE(q.int4_packed(ignored)) << ignored;
  for (const char* packed : {"ml", "x.head", "x.gate.y", "1x", "1y", "1cz", "1w", "av", "au", "x.start"})
    EXPECT_TRUE(q.int4_packed(packed)) << packed;
  // '.' matches neither a newline nor a byte of invalid UTF-8: ".*mlp" does not reach past them.
  EXPECT_TRUE(q.int4_packed("x\nmlp"));
  EXPECT_TRUE(q.int4_packed("\xffmlp"));
  EXPECT_FALSE(q.int4_packed("x.mlp\n"));
  EXPECT_FALSE(q.int4_packed("\xce\xb1.mlp"));  // a valid UTF-8 character is one '.'
}

// Random small patterns (many beginning with ".*", with '|', anchors and classes) against random
// names (some with a newline), checked against std::regex's re.match-like search at the start:
// for these constructs ECMAScript and RE2 agree on whether a match starts there.
TEST(QuantConfig, PatternSetsAgreeWithMatchingEachPatternAlone) {
  const std::vector<std::string> atoms = {"a", "b", "x", "_", "\\.", ".", "a*", "(a|b)", "[ab|]", "b?", ".*", "^",
                                          "$", "(ab)*", "a{2}", "|", "\\b", ".*?", "[^a]", "\\|", "(x|.*a)"};
  const std::string alphabet = "ab.x|_\n";
  std::mt19937 rng(26);
  int verdicts[2] = {0, 0};
  for (int round = 0; round < 1000; ++round) {
    std::vector<std::string> patterns;
    json ignore = json::array();
    for (int k = 1 + int(rng() % 3); k > 0; --k) {
      std::string p = rng() % 2 == 0 ? ".*" : "";
      for (int len = 1 + int(rng() % 4); len > 0; --len) p += atoms[rng() % atoms.size()];
      patterns.push_back(p);
      ignore.push_back("re:" + p);
    }
    const QuantConfig q = parse_quant_config(int4({"Linear"}, ignore), "c");
    std::vector<std::regex> alone;
    for (const std::string& p : patterns) alone.emplace_back(p, std::regex::ECMAScript);
    for (int s = 0; s < 40; ++s) {
      std::string name;
      for (int len = int(rng() % 8); len > 0; --len) name += alphabet[rng() % alphabet.size()];
      bool any = false;
      for (const std::regex& re : alone)
        any = any || std::regex_search(name, re, std::regex_constants::match_continuous);
      ASSERT_EQ(q.int4_packed(name), !any) << "name '" << name << "' patterns " << ignore.dump();
      ++verdicts[any];
    }
  }
  EXPECT_GT(verdicts[0], 10000);  // both verdicts, many times each
  EXPECT_GT(verdicts[1], 10000);
}

// A stop signal while a long list compiles ends it with Stopped, naming the phase. In a child
// process (a death test): the stop flag, once raised, stays raised.
TEST(QuantConfigDeathTest, LongPatternListStopsOnSigterm) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        install_stop_handlers();
        std::raise(SIGTERM);
        json ignore = json::array();
        for (int i = 0; i < 5000; ++i) ignore.push_back("re:x" + std::to_string(i));
        try {
          parse_quant_config(int4({"Linear"}, ignore), "c");
        } catch (const Stopped& e) {
          std::fprintf(stderr, "%s\n", e.what());
          std::_Exit(kExitInterrupted);
        }
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(kExitInterrupted), "stopped by SIGTERM while reading quantization_config");
}

}  // namespace layertap
