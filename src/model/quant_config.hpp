// How a checkpoint's Linear weights are quantized, from its config's `quantization_config`
// (top level, or inside `text_config` for Kimi-K2.5). Two formats are supported:
//   DeepSeek FP8 (`quant_method: fp8`): float8_e4m3fn `X.weight` + float32 `X.weight_scale_inv`
//     per weight_block_size block; which modules are FP8 is read from the file (dtype of X.weight).
//   compressed-tensors `pack-quantized` symmetric int4 groups: `X.weight_packed`, `X.weight_scale`,
//     `X.weight_shape` for every Linear that a config group targets and `ignore` does not name.
//   MXFP4 (`quant_method: mxfp4`, GPT-OSS): the routed experts, stacked over experts, as
//     `X_blocks` uint8 [E, out, in/32, 16] (e2m1 codes, two per byte) and `X_scales` uint8
//     [E, out, in/32] (e8m0 exponents); every other tensor plain.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace layertap {

// The entries of a quantization_config `targets` or `ignore` list, compiled once: exact names in a
// hash set, the "re:" patterns in RE2::Sets (those that begin with ".*", searched anywhere without
// it, in a second one), so a module name is matched in at most two linear-time passes however many
// patterns the list holds (a config is data from the internet: 200,000 patterns, or `(.+)+X`, must
// neither hang nor backtrack).
class ModuleMatcher {
 public:
  ModuleMatcher() = default;  // matches nothing
  // Throws naming `where`, `key` and the pattern when one does not compile, and `where` and `key`
  // when the list exceeds the budgets of its size and of RE2's memory. Polls stop_point while it
  // compiles (a huge list stays interruptible).
  ModuleMatcher(const std::vector<std::string>& entries, const std::string& where, const char* key);
  // compressed-tensors' rule: "re:" patterns as Python's re.match (anchored at the start only),
  // other entries by exact name; with `linear_matches`, the entry "Linear" matches every module.
  bool matches(const std::string& module, bool linear_matches) const;
  std::size_t pattern_count() const;

 private:
  struct Compiled;
  std::shared_ptr<const Compiled> compiled_;  // shared: a QuantConfig is copied
};

struct QuantConfig {
  enum class Method { None, Fp8Block, Int4Group, Mxfp4 };
  Method method = Method::None;
  int64_t block_rows = 0, block_cols = 0;  // Fp8Block: weight_block_size [out, in]
  int64_t group_size = 0;                  // Int4Group, Mxfp4 (32): along the input dim
  std::vector<std::string> targets;        // Int4Group: "Linear" or "re:<regex>"
  std::vector<std::string> ignore;         // Int4Group: module names or "re:<regex>"
  ModuleMatcher target_match, ignore_match;  // the two lists, compiled

  // Int4Group: whether module `name` (full tensor-name prefix, e.g.
  // "language_model.model.layers.3.mlp.experts.7.down_proj") is stored packed. compressed-tensors
  // matches "re:" patterns with Python's re.match (anchored at the start) and other entries by
  // exact name; "Linear" targets every Linear module. A pattern RE2 cannot express (backreferences,
  // lookaround) is refused at parse time, naming it.
  bool int4_packed(const std::string& module) const;
  std::string describe() const;  // e.g. "fp8 blocks [128, 128]", "int4 groups of 32", "none"
};

// Parses `quantization_config` (a JSON object); `src` names the config file in errors. Any other
// quant_method, format or scheme is an error naming it.
QuantConfig parse_quant_config(const nlohmann::json& q, const std::string& src);

}  // namespace layertap
