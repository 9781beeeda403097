#include "model/quant_config.hpp"

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace layertap {
namespace {

using nlohmann::json;

std::string str_or(const json& j, const char* key, const std::string& fallback) {
  if (!j.contains(key) || j[key].is_null()) return fallback;
  return j[key].get<std::string>();
}

// Splits `entries` into plain names (kept in `names`) and compiled "re:" patterns.
void compile(const json& entries, const char* key, const std::string& src, std::vector<std::string>& names,
             std::vector<std::regex>& patterns) {
  if (entries.is_null()) return;
  LT_CHECK(entries.is_array(), src, ": quantization_config '", key, "' must be a list");
  for (const json& e : entries) {
    LT_CHECK(e.is_string(), src, ": quantization_config '", key, "' holds a non-string entry ", e.dump());
    const std::string s = e.get<std::string>();
    names.push_back(s);
    if (s.rfind("re:", 0) != 0) continue;
    try {
      patterns.emplace_back(s.substr(3), std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& err) {
      LT_FAIL(src, ": quantization_config '", key, "' pattern '", s, "' is not a supported regular expression: ",
              err.what());
    }
  }
}

bool matches(const std::string& module, const std::vector<std::string>& names, const std::vector<std::regex>& res,
             bool linear_matches) {
  for (const std::regex& re : res)  // Python re.match: anchored at the start only
    if (std::regex_search(module, re, std::regex_constants::match_continuous)) return true;
  for (const std::string& n : names)
    if (n == module || (linear_matches && n == "Linear")) return true;
  return false;
}

QuantConfig parse_fp8(const json& q, const std::string& src) {
  QuantConfig c;
  c.method = QuantConfig::Method::Fp8Block;
  const std::string fmt = str_or(q, "fmt", "e4m3");
  LT_CHECK(fmt == "e4m3", src, ": fp8 quantization format '", fmt, "' is not supported (only e4m3)");
  LT_CHECK(q.contains("weight_block_size") && q["weight_block_size"].is_array() && q["weight_block_size"].size() == 2,
           src, ": fp8 quantization_config needs weight_block_size [rows, cols] (per-tensor FP8 is not supported)");
  c.block_rows = q["weight_block_size"][0].get<int64_t>();
  c.block_cols = q["weight_block_size"][1].get<int64_t>();
  LT_CHECK(c.block_rows > 0 && c.block_cols > 0, src, ": weight_block_size must be positive");
  return c;
}

QuantConfig parse_compressed_tensors(const json& q, const std::string& src) {
  QuantConfig c;
  c.method = QuantConfig::Method::Int4Group;
  const std::string format = str_or(q, "format", "");
  LT_CHECK(q.contains("config_groups") && q["config_groups"].is_object() && !q["config_groups"].empty(), src,
           ": compressed-tensors quantization_config has no config_groups");
  for (const auto& [name, g] : q["config_groups"].items()) {
    const std::string where = cat(src, ": compressed-tensors config group '", name, "'");
    const std::string group_format = str_or(g, "format", format);
    LT_CHECK(group_format == "pack-quantized", where, " has format '", group_format,
             "' (supported: pack-quantized int4 weights)");
    for (const char* act : {"input_activations", "output_activations"})
      LT_CHECK(!g.contains(act) || g[act].is_null(), where, " quantizes ", act,
               " (supported: weight-only int4, W4A16)");
    LT_CHECK(g.contains("weights") && g["weights"].is_object(), where, " has no 'weights' scheme");
    const json& w = g["weights"];
    const int64_t bits = w.value("num_bits", int64_t(0));
    const std::string type = str_or(w, "type", "int"), strategy = str_or(w, "strategy", "");
    const bool symmetric = w.value("symmetric", false);
    LT_CHECK(bits == 4 && type == "int" && symmetric && strategy == "group", where, ": weights scheme num_bits ",
             bits, ", type '", type, "', symmetric ", symmetric, ", strategy '", strategy,
             "' is not supported (supported: 4-bit symmetric int, strategy group)");
    // GPTQ activation ordering "group" (alias "dynamic"; `true` in older configs) stores a
    // column-to-group map (X.weight_g_idx) that the int4 decoder does not apply; "weight" (alias
    // "static") leaves the stored format unchanged.
    const json actorder = w.contains("actorder") ? w["actorder"] : json();
    LT_CHECK(actorder.is_null() || actorder == false || actorder == "weight" || actorder == "static", where,
             ": weights actorder ", actorder.dump(),
             " is not supported (groups reordered by weight_g_idx; supported: null, \"weight\")");
    const int64_t group = w.value("group_size", int64_t(0));
    LT_CHECK(group > 0, where, ": group_size must be positive");
    LT_CHECK(c.group_size == 0 || c.group_size == group, where, ": group_size ", group, " differs from ",
             c.group_size, " of another group");
    c.group_size = group;
    compile(g.value("targets", json()), "targets", src, c.targets, c.target_res);
  }
  compile(q.value("ignore", json()), "ignore", src, c.ignore, c.ignore_res);
  return c;
}

}  // namespace

QuantConfig parse_quant_config(const json& q, const std::string& src) {
  LT_CHECK(q.is_object(), src, ": quantization_config must be an object");
  const std::string method = str_or(q, "quant_method", "");
  try {
    if (method == "fp8") return parse_fp8(q, src);
    if (method == "compressed-tensors") return parse_compressed_tensors(q, src);
  } catch (const json::exception& e) {
    LT_FAIL(src, ": malformed quantization_config: ", e.what());
  }
  LT_FAIL(src, ": quant_method '", method, "' is not supported (supported: fp8 with weight_block_size, "
          "compressed-tensors pack-quantized int4)");
}

bool QuantConfig::int4_packed(const std::string& module) const {
  return method == Method::Int4Group && matches(module, targets, target_res, true) &&
         !matches(module, ignore, ignore_res, false);
}

std::string QuantConfig::describe() const {
  switch (method) {
    case Method::None: return "none";
    case Method::Fp8Block: return cat("fp8 e4m3 blocks [", block_rows, ", ", block_cols, "]");
    case Method::Int4Group: return cat("int4 groups of ", group_size, " (compressed-tensors pack-quantized)");
  }
  return "?";
}

}  // namespace layertap
