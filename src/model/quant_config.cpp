#include "model/quant_config.hpp"

#include <re2/re2.h>
#include <re2/set.h>

#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <string_view>
#include <unordered_set>

#include "core/error.hpp"
#include "core/stop_request.hpp"
#include "core/text.hpp"
#include "model/json_fields.hpp"

namespace layertap {
namespace {

using nlohmann::json;

constexpr int64_t kMaxBlock = 1 << 16;  // FP8 block sides and INT4 group sizes

// Budgets of one targets/ignore list's "re:" patterns (a config is data from the internet; real
// lists hold a few dozen patterns of a few dozen characters). Each pattern alone must compile as
// RE2 compiles a regexp by default (8 MiB), as before the list became a set. The list as a whole:
// at most 50,000 patterns of at most 512 characters; at most 800,000 syntax nodes by node_bound
// (RE2 walks the list's combined pattern with at most 1,000,000 visits, and logs a line per subtree
// past them); at most 1,000,000 compiled instructions (about 130 bytes each while a set compiles:
// 130 MB). Each of its two sets then compiles, and caches its DFA states, within 128 MiB.
constexpr std::size_t kMaxPatternChars = 512;
constexpr std::size_t kMaxPatterns = 50'000;
constexpr std::size_t kMaxPatternNodes = 800'000;
constexpr int64_t kMaxPatternInsts = 1'000'000;
constexpr int64_t kMaxPatternSetBytes = int64_t(128) << 20;
constexpr const char* kPhase = "reading quantization_config";

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

bool is_pattern(const std::string& entry) { return entry.rfind("re:", 0) == 0; }

// At least as many nodes as RE2 parses `p` into: a run of plain characters is at most one (a
// literal string), a special character or an escape ("\.", "\d") at most two (its own, and a
// concatenation or alternation around it), and a pattern in a set adds at most six (its
// concatenation, its match marker, the factoring of the set's alternation).
std::size_t node_bound(std::string_view p) {
  std::size_t nodes = 6;
  bool in_run = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    if (std::string_view("\\.^$*+?()[]{}|").find(p[i]) != std::string_view::npos) {
      nodes += 2;
      in_run = false;
      if (p[i] == '\\') ++i;  // the escaped character is part of the same node
    } else if (!in_run) {
      ++nodes;
      in_run = true;
    }
  }
  return nodes;
}

// When `p` is ".*R" (or ".*?R", "^.*R") with no top-level '|' in R, returns R: matched at the start
// of a name that is ASCII without a newline (where '.' matches every character), ".*R" is R
// searched anywhere in it. A set of such R searched anywhere shares one ".*" loop; a set of ".*R"
// anchored at the start runs one per pattern at every character (measured over 1,170 names: 2,000
// patterns 0.5 s against 0.002 s, 50,000 17 s against 0.002 s). When unsure, returns nothing (the
// pattern is then matched as written, which is never wrong).
std::optional<std::string_view> dotstar_rest(std::string_view p) {
  if (p.substr(0, 3) == "^.*") p.remove_prefix(1);
  if (p.substr(0, 2) != ".*") return std::nullopt;
  p.remove_prefix(2);
  if (!p.empty() && p[0] == '?') p.remove_prefix(1);  // lazy or greedy: the same names match
  if (!p.empty() && (p[0] == '*' || p[0] == '+' || p[0] == '?' || p[0] == '{')) return std::nullopt;
  // Scans R as RE2 parses it for a top-level '|' ("re:.*a|b" is ".*a" or "b" at the start).
  int depth = 0;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      if (i + 1 < p.size() && p[i + 1] == 'Q') {  // \Q...\E (or to the end) is literal
        const std::size_t e = p.find("\\E", i + 2);
        if (e == std::string_view::npos) break;
        i = e + 1;
      } else {
        ++i;  // the escaped character; what follows (x{41}, p{Greek}) holds no ( ) [ |
      }
    } else if (c == '[') {  // a class: to its ']', which may come first (after '^'), or in [:alpha:]
      std::size_t j = i + 1;
      if (j < p.size() && p[j] == '^') ++j;
      if (j < p.size() && p[j] == ']') ++j;
      for (; j < p.size() && p[j] != ']'; ++j) {
        if (p[j] == '\\') {
          ++j;
        } else if (p[j] == '[' && j + 1 < p.size() && p[j + 1] == ':') {
          const std::size_t e = p.find(":]", j + 2);  // RE2 takes the first ":]" (or none: a literal '[')
          if (e != std::string_view::npos) j = e + 1;
        }
      }
      if (j >= p.size()) return std::nullopt;
      i = j;
    } else if (c == '(') {
      ++depth;
    } else if (c == ')') {
      if (--depth < 0) return std::nullopt;
    } else if (c == '|' && depth == 0) {
      return std::nullopt;
    }
  }
  if (depth != 0) return std::nullopt;
  return p;
}

// Whether `name` is ASCII without a newline: where '.' matches each of its characters (RE2's '.'
// matches neither '\n' nor a byte of invalid UTF-8, and the set searching anywhere skips bytes).
bool dot_matches_all(const std::string& name) {
  for (const char ch : name)
    if (ch == '\n' || static_cast<unsigned char>(ch) >= 0x80) return false;
  return true;
}

}  // namespace

struct ModuleMatcher::Compiled {
  std::unordered_set<std::string> names;  // the entries that are not "re:" patterns
  std::unique_ptr<RE2::Set> at_start;     // patterns matched from a name's first character
  std::unique_ptr<RE2::Set> anywhere;     // ".*R" patterns as R, searched anywhere (dotstar_rest)
  std::vector<std::string> dotstar;       // those ".*R" as written: for the other names, compiled on first use
  mutable std::once_flag dotstar_once;
  mutable std::unique_ptr<RE2::Set> dotstar_at_start;
  std::size_t pattern_count = 0;
  std::string list;  // "config.json (quantization_config): quantization_config 'ignore'", for errors

  RE2::Options options() const {
    RE2::Options o;
    o.set_log_errors(false);
    o.set_max_mem(kMaxPatternSetBytes);
    return o;
  }
  void compile(RE2::Set& set, std::size_t n) const {
    LT_CHECK(set.Compile(), list, " holds ", n, " \"re:\" patterns, more than RE2 compiles in one set within ",
             kMaxPatternSetBytes >> 20, " MiB");
  }
  bool match(const RE2::Set& set, const std::string& module) const {
    RE2::Set::ErrorInfo info{};
    if (set.Match(module, nullptr, &info)) return true;
    LT_CHECK(info.kind == RE2::Set::kNoError, list, ": matching '", excerpt(module),
             "' against its patterns ran out of RE2's memory budget (", kMaxPatternSetBytes >> 20, " MiB)");
    return false;
  }
  // The ".*R" patterns anchored at the start as written, for a name with a newline or a non-ASCII byte.
  const RE2::Set& dotstar_set() const {
    std::call_once(dotstar_once, [this] {
      auto set = std::make_unique<RE2::Set>(options(), RE2::ANCHOR_START);
      for (const std::string& p : dotstar) LT_CHECK(set->Add(p, nullptr) >= 0, list, ": pattern 're:", excerpt(p), "'");
      compile(*set, dotstar.size());
      dotstar_at_start = std::move(set);
    });
    return *dotstar_at_start;
  }
};

ModuleMatcher::ModuleMatcher(const std::vector<std::string>& entries, const std::string& where, const char* key) {
  auto c = std::make_shared<Compiled>();
  c->list = cat(where, ": quantization_config '", key, "'");
  // The list's size first, from its text alone: one far past the budget is refused at once.
  std::size_t count = 0, nodes = 0;
  for (const std::string& s : entries) {
    if (!is_pattern(s)) continue;
    ++count;
    nodes += node_bound(std::string_view(s).substr(3));
  }
  LT_CHECK(count <= kMaxPatterns, c->list, " holds ", count, " \"re:\" patterns, more than the ", kMaxPatterns,
           " layertap takes in one list");
  LT_CHECK(nodes <= kMaxPatternNodes, c->list, " holds ", count, " \"re:\" patterns of up to ", nodes,
           " syntax nodes in all, more than the ", kMaxPatternNodes,
           " layertap takes in one list (RE2 walks a set's patterns with at most 1,000,000 visits)");
  RE2::Options alone_options;  // one pattern alone: RE2's defaults, as each was compiled before
  alone_options.set_log_errors(false);
  auto at_start = std::make_unique<RE2::Set>(c->options(), RE2::ANCHOR_START);
  auto anywhere = std::make_unique<RE2::Set>(c->options(), RE2::UNANCHORED);
  std::size_t n_at_start = 0;
  int64_t insts = 0;
  for (const std::string& s : entries) {
    if (!is_pattern(s)) {
      c->names.insert(s);
      continue;
    }
    LT_CHECK(s.size() <= kMaxPatternChars, c->list, " pattern '", excerpt(s), "' is longer than ", kMaxPatternChars,
             " characters");
    const std::string_view p = std::string_view(s).substr(3);
    const RE2 alone(p, alone_options);
    LT_CHECK(alone.ok(), c->list, " pattern '", excerpt(s),
             "' is not a regular expression layertap can match in linear time (RE2 syntax: no backreferences or "
             "lookaround): ", alone.error());
    insts += alone.ProgramSize();
    LT_CHECK(insts <= kMaxPatternInsts, c->list, " pattern '", excerpt(s), "' (", c->pattern_count + 1, " of ", count,
             ") brings its \"re:\" patterns past ", kMaxPatternInsts,
             " compiled RE2 instructions, the most layertap takes in one list");
    std::string error;
    const std::optional<std::string_view> rest = dotstar_rest(p);
    LT_CHECK((rest ? anywhere->Add(*rest, &error) : at_start->Add(p, &error)) >= 0, c->list, " pattern '",
             excerpt(s), "' does not join the list's RE2 set: ", error);
    if (rest)
      c->dotstar.emplace_back(p);
    else
      ++n_at_start;
    if (++c->pattern_count % 1024 == 0) stop_point(kPhase);
  }
  stop_point(kPhase);
  if (n_at_start > 0) {
    c->compile(*at_start, n_at_start);
    c->at_start = std::move(at_start);
  }
  if (!c->dotstar.empty()) {
    stop_point(kPhase);
    c->compile(*anywhere, c->dotstar.size());
    c->anywhere = std::move(anywhere);
  }
  compiled_ = std::move(c);
}

bool ModuleMatcher::matches(const std::string& module, bool linear_matches) const {
  if (!compiled_) return false;
  const Compiled& c = *compiled_;
  if (c.names.count(module) != 0 || (linear_matches && c.names.count("Linear") != 0)) return true;
  if (c.at_start && c.match(*c.at_start, module)) return true;
  if (!c.anywhere) return false;
  return dot_matches_all(module) ? c.match(*c.anywhere, module) : c.match(c.dotstar_set(), module);
}

std::size_t ModuleMatcher::pattern_count() const { return compiled_ ? compiled_->pattern_count : 0; }

QuantConfig parse_quant_config(const json& q, const std::string& src) {
  const JsonFields fields(q, src + " (quantization_config)");
  const std::string method = fields.string_or("quant_method", "");
  if (method == "fp8") return parse_fp8(fields);
  if (method == "compressed-tensors") return parse_compressed_tensors(fields);
  if (method == "mxfp4") {
    // GPT-OSS: which tensors are MXFP4 is the layout's (its stacked experts); modules_to_not_convert
    // names the rest, which are read plain.
    QuantConfig c;
    c.method = QuantConfig::Method::Mxfp4;
    c.group_size = 32;
    return c;
  }
  LT_FAIL(fields.where(), ": quant_method '", excerpt(method), "' is not supported (supported: fp8 with "
          "weight_block_size, compressed-tensors pack-quantized int4, mxfp4)");
}

bool QuantConfig::int4_packed(const std::string& module) const {
  return method == Method::Int4Group && target_match.matches(module, true) && !ignore_match.matches(module, false);
}

std::string QuantConfig::describe() const {
  switch (method) {
    case Method::None: return "none";
    case Method::Fp8Block: return cat("fp8 e4m3 blocks [", block_rows, ", ", block_cols, "]");
    case Method::Int4Group: return cat("int4 groups of ", group_size, " (compressed-tensors pack-quantized)");
    case Method::Mxfp4: return "mxfp4 (e2m1 in groups of 32, e8m0 scales)";
  }
  return "?";
}

}  // namespace layertap
