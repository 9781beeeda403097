#include "model/quant_config.hpp"

#include <re2/re2.h>
#include <re2/set.h>

#include <nlohmann/json.hpp>
#include <unordered_set>

#include "core/error.hpp"
#include "core/stop_request.hpp"
#include "core/text.hpp"
#include "model/json_fields.hpp"

namespace layertap {
namespace {

using nlohmann::json;

// Real targets/ignore patterns are a few dozen characters; RE2 also bounds its own memory per pattern.
constexpr std::size_t kMaxPatternChars = 512;
constexpr int64_t kMaxBlock = 1 << 16;  // FP8 block sides and INT4 group sizes

// RE2's memory budget for one list's patterns (its default is 8 MiB per regexp), and the most
// patterns a list may hold: 50,000 compile in about a second within it; from about 100,000 RE2
// runs out of it (and from about 200,000 its parser logs on every pattern), so they are refused
// first. Real lists hold a few dozen.
constexpr int64_t kMaxPatternSetBytes = int64_t(256) << 20;
constexpr std::size_t kMaxPatterns = 50'000;

// Appends the string entries of list `key` to `names`.
void collect(const json& entries, const char* key, const std::string& src, std::vector<std::string>& names) {
  if (entries.is_null()) return;
  LT_CHECK(entries.is_array(), src, ": quantization_config '", key, "' must be a list");
  for (const json& e : entries) {
    LT_CHECK(e.is_string(), src, ": quantization_config '", key, "' holds a non-string entry ", excerpt(e.dump()));
    names.push_back(e.get<std::string>());
  }
}

QuantConfig parse_fp8(const JsonFields& q) {
  QuantConfig c;
  c.method = QuantConfig::Method::Fp8Block;
  const std::string fmt = q.string_or("fmt", "e4m3");
  LT_CHECK(fmt == "e4m3", q.where(), ": fp8 quantization format '", excerpt(fmt), "' is not supported (only e4m3)");
  const std::vector<int64_t> block = q.integers_or_empty("weight_block_size", 1, kMaxBlock);
  LT_CHECK(block.size() == 2, q.where(),
           ": fp8 quantization_config needs weight_block_size [rows, cols] (per-tensor FP8 is not supported)");
  c.block_rows = block[0];
  c.block_cols = block[1];
  return c;
}

QuantConfig parse_compressed_tensors(const JsonFields& q) {
  QuantConfig c;
  c.method = QuantConfig::Method::Int4Group;
  const std::string format = q.string_or("format", "");
  LT_CHECK(q.has("config_groups") && q.raw().at("config_groups").is_object() &&
               !q.raw().at("config_groups").empty(),
           q.where(), ": compressed-tensors quantization_config has no config_groups");
  for (const auto& [name, group_json] : q.raw().at("config_groups").items()) {
    const JsonFields g(group_json, cat(q.where(), " config group '", excerpt(name), "'"));
    const std::string group_format = g.string_or("format", format);
    LT_CHECK(group_format == "pack-quantized", g.where(), " has format '", excerpt(group_format),
             "' (supported: pack-quantized int4 weights)");
    for (const char* act : {"input_activations", "output_activations"})
      LT_CHECK(!g.has(act), g.where(), " quantizes ", act, " (supported: weight-only int4, W4A16)");
    LT_CHECK(g.has("weights"), g.where(), " has no 'weights' scheme");
    const JsonFields w(g.raw().at("weights"), g.where() + " weights");
    const int64_t bits = w.integer_or("num_bits", 0, 0, 64);
    const std::string type = w.string_or("type", "int"), strategy = w.string_or("strategy", "");
    const bool symmetric = w.boolean_or("symmetric", false);
    LT_CHECK(bits == 4 && type == "int" && symmetric && strategy == "group", w.where(), ": num_bits ", bits,
             ", type '", excerpt(type), "', symmetric ", symmetric, ", strategy '", excerpt(strategy),
             "' is not supported (supported: 4-bit symmetric int, strategy group)");
    // GPTQ activation ordering "group" (alias "dynamic"; `true` in older configs) stores a
    // column-to-group map (X.weight_g_idx) that the int4 decoder does not apply; "weight" (alias
    // "static") leaves the stored format unchanged.
    const json actorder = w.has("actorder") ? w.raw().at("actorder") : json();
    LT_CHECK(actorder.is_null() || actorder == false || actorder == "weight" || actorder == "static", w.where(),
             ": actorder ", excerpt(actorder.dump()),
             " is not supported (groups reordered by weight_g_idx; supported: null, \"weight\")");
    const int64_t group = w.integer("group_size", 1, kMaxBlock);
    LT_CHECK(c.group_size == 0 || c.group_size == group, w.where(), ": group_size ", group, " differs from ",
             c.group_size, " of another group");
    c.group_size = group;
    collect(group_json.value("targets", json()), "targets", q.where(), c.targets);
  }
  collect(q.raw().value("ignore", json()), "ignore", q.where(), c.ignore);
  c.target_match = ModuleMatcher(c.targets, q.where(), "targets");
  c.ignore_match = ModuleMatcher(c.ignore, q.where(), "ignore");
  return c;
}

}  // namespace

struct ModuleMatcher::Compiled {
  std::unordered_set<std::string> names;
  std::unique_ptr<RE2::Set> patterns;  // null when the list has none
  std::size_t pattern_count = 0;
};

ModuleMatcher::ModuleMatcher(const std::vector<std::string>& entries, const std::string& where, const char* key) {
  auto c = std::make_shared<Compiled>();
  RE2::Options options;
  options.set_log_errors(false);
  options.set_max_mem(kMaxPatternSetBytes);
  auto set = std::make_unique<RE2::Set>(options, RE2::ANCHOR_START);
  for (const std::string& s : entries) {
    if (s.rfind("re:", 0) != 0) {
      c->names.insert(s);
      continue;
    }
    LT_CHECK(s.size() <= kMaxPatternChars, where, ": quantization_config '", key, "' pattern '", excerpt(s),
             "' is longer than ", kMaxPatternChars, " characters");
    LT_CHECK(c->pattern_count < kMaxPatterns, where, ": quantization_config '", key, "' holds more than ",
             kMaxPatterns, " \"re:\" patterns, the most layertap takes in one list");
    std::string error;
    LT_CHECK(set->Add(s.substr(3), &error) >= 0, where, ": quantization_config '", key, "' pattern '", excerpt(s),
             "' is not a regular expression layertap can match in linear time (RE2 syntax: no backreferences or "
             "lookaround): ", error);
    if (++c->pattern_count % 1024 == 0) stop_point("reading quantization_config");
  }
  if (c->pattern_count > 0) {
    stop_point("reading quantization_config");
    LT_CHECK(set->Compile(), where, ": quantization_config '", key, "' holds ", c->pattern_count,
             " patterns, more than RE2 compiles within ", kMaxPatternSetBytes >> 20, " MiB");
    c->patterns = std::move(set);
  }
  compiled_ = std::move(c);
}

bool ModuleMatcher::matches(const std::string& module, bool linear_matches) const {
  if (!compiled_) return false;
  const Compiled& c = *compiled_;
  if (c.names.count(module) != 0 || (linear_matches && c.names.count("Linear") != 0)) return true;
  if (!c.patterns) return false;
  RE2::Set::ErrorInfo info{};
  if (c.patterns->Match(module, nullptr, &info)) return true;
  LT_CHECK(info.kind == RE2::Set::kNoError, "quantization_config: matching '", excerpt(module),
           "' against its patterns ran out of RE2's memory budget (", kMaxPatternSetBytes >> 20, " MiB)");
  return false;
}

std::size_t ModuleMatcher::pattern_count() const { return compiled_ ? compiled_->pattern_count : 0; }

QuantConfig parse_quant_config(const json& q, const std::string& src) {
  const JsonFields fields(q, src + " (quantization_config)");
  const std::string method = fields.string_or("quant_method", "");
  if (method == "fp8") return parse_fp8(fields);
  if (method == "compressed-tensors") return parse_compressed_tensors(fields);
  LT_FAIL(fields.where(), ": quant_method '", excerpt(method), "' is not supported (supported: fp8 with "
          "weight_block_size, compressed-tensors pack-quantized int4)");
}

bool QuantConfig::int4_packed(const std::string& module) const {
  return method == Method::Int4Group && target_match.matches(module, true) && !ignore_match.matches(module, false);
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
