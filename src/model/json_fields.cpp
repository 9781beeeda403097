#include "model/json_fields.hpp"

#include <cmath>

#include "core/error.hpp"
#include "core/text.hpp"

namespace layertap {

nlohmann::json parse_json(std::string_view text, const std::string& where, int max_depth) {
  using nlohmann::json;
  // The callback sees every container as it opens, before anything nested is built.
  const json::parser_callback_t depth_limit = [&](int depth, json::parse_event_t event, json&) {
    if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) &&
        depth >= max_depth)
      LT_FAIL(where, ": JSON nested deeper than ", max_depth, " levels");
    return true;
  };
  try {
    return json::parse(text, depth_limit);
  } catch (const json::parse_error& e) {
    // e.what() reads "[json.exception.parse_error.101] parse error at line 1, column 28: <why>";
    // keep the reason, and say where by byte.
    const std::string what = e.what();
    const auto why = what.find(": ", what.find("column"));
    LT_FAIL(where, ": malformed JSON at byte ", e.byte, ": ", why == std::string::npos ? what : what.substr(why + 2));
  } catch (const json::exception& e) {  // e.g. out_of_range 406: a number beyond double
    LT_FAIL(where, ": malformed JSON: ", e.what());
  }
}

JsonFields::JsonFields(const nlohmann::json& object, std::string where) : j_(object), where_(std::move(where)) {
  LT_CHECK(j_.is_object(), where_, ": expected a JSON object, found ", j_.type_name());
}

bool JsonFields::has(const char* key) const {
  const auto it = j_.find(key);
  return it != j_.end() && !it->is_null();
}

std::string JsonFields::name(const char* key) const { return cat(where_, ": key '", key, "'"); }

void JsonFields::fail_type(const char* key, const char* expected) const {
  LT_FAIL(name(key), " must be ", expected, ", found ", j_.at(key).type_name(), " ", excerpt(j_.at(key).dump()));
}

int64_t JsonFields::integer(const char* key, int64_t lo, int64_t hi) const {
  LT_CHECK(has(key), where_, ": missing key '", key, "'");
  const nlohmann::json& v = j_.at(key);
  if (!v.is_number_integer()) fail_type(key, "an integer");
  // nlohmann parses non-negative integers as unsigned: compare those as unsigned, so 2^64-1 is not -1.
  const bool in_range = v.is_number_unsigned()
                            ? v.get<uint64_t>() <= uint64_t(std::max<int64_t>(hi, 0)) &&
                                  int64_t(v.get<uint64_t>()) >= lo
                            : v.get<int64_t>() >= lo && v.get<int64_t>() <= hi;
  LT_CHECK(in_range, name(key), " = ", excerpt(v.dump()), " is outside [", lo, ", ", hi, "]");
  return v.get<int64_t>();
}

int64_t JsonFields::integer_or(const char* key, int64_t fallback, int64_t lo, int64_t hi) const {
  return has(key) ? integer(key, lo, hi) : fallback;
}

double JsonFields::number_or(const char* key, double fallback, Interval range) const {
  if (!has(key)) return fallback;
  const nlohmann::json& v = j_.at(key);
  if (!v.is_number()) fail_type(key, "a number");
  const double x = v.get<double>();
  LT_CHECK(std::isfinite(x) && range.contains(x), name(key), " = ", excerpt(v.dump()), " is outside ",
           range.open_lo ? "(" : "[", range.lo, ", ", range.hi, "]");
  return x;
}

bool JsonFields::boolean_or(const char* key, bool fallback) const {
  if (!has(key)) return fallback;
  if (!j_.at(key).is_boolean()) fail_type(key, "true or false");
  return j_.at(key).get<bool>();
}

std::string JsonFields::string_or(const char* key, const std::string& fallback) const {
  if (!has(key)) return fallback;
  if (!j_.at(key).is_string()) fail_type(key, "a string");
  return j_.at(key).get<std::string>();
}

bool JsonFields::boolean(const char* key) const {
  LT_CHECK(has(key), where_, ": missing key '", key, "'");
  return boolean_or(key, false);
}

std::string JsonFields::string(const char* key) const {
  LT_CHECK(has(key), where_, ": missing key '", key, "'");
  return string_or(key, "");
}

JsonFields JsonFields::object(const char* key) const {
  LT_CHECK(has(key), where_, ": missing key '", key, "'");
  if (!j_.at(key).is_object()) fail_type(key, "an object");
  return JsonFields(j_.at(key), cat(where_, " ", key));
}

const nlohmann::json& JsonFields::array(const char* key) const {
  LT_CHECK(has(key), where_, ": missing key '", key, "'");
  if (!j_.at(key).is_array()) fail_type(key, "an array");
  return j_.at(key);
}

std::vector<int64_t> JsonFields::integers_or_empty(const char* key, int64_t lo, int64_t hi) const {
  if (!has(key)) return {};
  const nlohmann::json& a = j_.at(key);
  if (!a.is_array()) fail_type(key, "an array of integers");
  std::vector<int64_t> out;
  for (std::size_t i = 0; i < a.size(); ++i) {
    LT_CHECK(a[i].is_number_integer(), name(key), "[", i, "] must be an integer, found ", excerpt(a[i].dump()));
    const int64_t v = a[i].get<int64_t>();
    LT_CHECK(v >= lo && v <= hi, name(key), "[", i, "] = ", v, " is outside [", lo, ", ", hi, "]");
    out.push_back(v);
  }
  return out;
}

}  // namespace layertap
