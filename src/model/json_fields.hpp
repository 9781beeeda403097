// Typed, range-checked reads of a JSON object's keys (config.json, quantization_config): every
// error names the file (or sub-object) and the key, and says what was expected and what was found,
// before any value is used to size an allocation.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace layertap {

// Parses `text` as JSON, refusing nesting deeper than `max_depth` while parsing (recursive code
// that walks values later, dump() included, cannot then exhaust the stack). Errors read
// "<where>: malformed JSON at byte N: <reason>" or "<where>: JSON nested deeper than N levels".
nlohmann::json parse_json(std::string_view text, const std::string& where, int max_depth);

// A closed interval [lo, hi], or (lo, hi] with open_lo.
struct Interval {
  double lo, hi;
  bool open_lo = false;
  bool contains(double v) const { return (open_lo ? v > lo : v >= lo) && v <= hi; }
};

class JsonFields {
 public:
  // `where` names the object in errors: "config.json", "config.json (text_config)".
  JsonFields(const nlohmann::json& object, std::string where);

  bool has(const char* key) const;  // present and not null
  const std::string& where() const { return where_; }
  const nlohmann::json& raw() const { return j_; }

  // Integers in [lo, hi]; the required form throws when the key is absent or null.
  int64_t integer(const char* key, int64_t lo, int64_t hi) const;
  int64_t integer_or(const char* key, int64_t fallback, int64_t lo, int64_t hi) const;
  // Any JSON number (integer or float), finite and inside `range`.
  double number_or(const char* key, double fallback, Interval range) const;
  bool boolean_or(const char* key, bool fallback) const;
  bool boolean(const char* key) const;
  std::string string_or(const char* key, const std::string& fallback) const;
  std::string string(const char* key) const;
  // The object under `key` (required), named "<where>.<key>" in its errors.
  JsonFields object(const char* key) const;
  // The array under `key` (required); its elements are checked by the caller.
  const nlohmann::json& array(const char* key) const;
  // An array of integers, each in [lo, hi]; empty when absent.
  std::vector<int64_t> integers_or_empty(const char* key, int64_t lo, int64_t hi) const;

 private:
  [[noreturn]] void fail_type(const char* key, const char* expected) const;
  std::string name(const char* key) const;  // "config.json: key 'hidden_size'"
  const nlohmann::json& j_;
  std::string where_;
};

}  // namespace layertap
