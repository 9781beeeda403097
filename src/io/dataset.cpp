#include "io/dataset.hpp"

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace layertap::io {
namespace {

using nlohmann::json;

bool is_blank(const std::string& line) {
  return line.find_first_not_of(" \t\r\n") == std::string::npos;
}

// Parses one non-blank line into `s` (whose index is already set). `where` names the file and line.
void parse_sample(const std::string& line, const std::string& where, int64_t vocab_size,
                  Sample& s) {
  json j;
  try {
    j = json::parse(line);
  } catch (const json::parse_error& e) {
    // e.what() reads "[json.exception.parse_error.101] parse error at line 1, column 28: <why>";
    // the line is ours, so keep the column and the reason.
    const std::string what = e.what();
    const auto why = what.find(": ", what.find("column"));
    LT_FAIL(where, ": malformed JSON at column ", e.byte, ": ",
            why == std::string::npos ? what : what.substr(why + 2));
  }
  LT_CHECK(j.is_object(), where, ": expected a JSON object, found ", j.type_name());

  // The id first, so every later message can name the sample.
  s.id = std::to_string(s.index);
  if (const auto it = j.find("id"); it != j.end()) {
    if (it->is_string())
      s.id = it->get<std::string>();
    else if (it->is_number_integer())
      s.id = it->dump();
    else
      LT_FAIL(where, ": \"id\" must be a string or an integer, found ", it->type_name());
  }
  const std::string who = cat(where, " (sample '", s.id, "')");

  const auto ids = j.find("input_ids");
  LT_CHECK(ids != j.end(), who, ": missing \"input_ids\"");
  LT_CHECK(ids->is_array(), who, ": \"input_ids\" must be an array, found ", ids->type_name());
  LT_CHECK(!ids->empty(), who, ": \"input_ids\" is empty");
  s.input_ids.resize(ids->size());
  for (std::size_t t = 0; t < ids->size(); ++t) {
    const json& v = (*ids)[t];
    LT_CHECK(v.is_number_integer(), who, ": input_ids[", t, "] = ", v.dump(),
             " is not an integer token id");
    const bool in_range = v.is_number_unsigned() ? v.get<uint64_t>() < uint64_t(vocab_size)
                                                 : v.get<int64_t>() >= 0 &&
                                                       v.get<int64_t>() < vocab_size;
    LT_CHECK(in_range, who, ": input_ids[", t, "] = ", v.dump(),
             " is outside the vocabulary [0, ", vocab_size, ")");
    s.input_ids[t] = int32_t(v.get<int64_t>());
  }

  const auto mask = j.find("loss_mask");
  if (mask == j.end()) {
    s.loss_mask.assign(s.input_ids.size(), 1);
    return;
  }
  LT_CHECK(mask->is_array(), who, ": \"loss_mask\" must be an array, found ", mask->type_name());
  LT_CHECK(mask->size() == ids->size(), who, ": \"loss_mask\" has ", mask->size(),
           " entries for ", ids->size(), " input_ids");
  s.loss_mask.resize(mask->size());
  for (std::size_t t = 0; t < mask->size(); ++t) {
    const json& v = (*mask)[t];
    LT_CHECK(v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1), who,
             ": loss_mask[", t, "] = ", v.dump(), " (must be 0 or 1)");
    s.loss_mask[t] = uint8_t(v.get<int64_t>());
  }
}

}  // namespace

std::vector<Sample> read_jsonl_dataset(const std::string& path, int64_t vocab_size) {
  LT_CHECK(vocab_size > 0 && vocab_size <= int64_t(std::numeric_limits<int32_t>::max()) + 1,
           "dataset '", path, "': invalid vocabulary size ", vocab_size);
  std::error_code ec;
  LT_CHECK(!std::filesystem::is_directory(path, ec), "dataset '", path, "' is a directory");
  std::ifstream in(path);
  LT_CHECK(in, "cannot open dataset '", path, "'");

  std::vector<Sample> samples;
  std::string line;
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (is_blank(line)) continue;
    Sample s;
    s.index = int64_t(samples.size());
    parse_sample(line, cat("dataset '", path, "' line ", line_no), vocab_size, s);
    samples.push_back(std::move(s));
  }
  LT_CHECK(in.eof(), "read error in dataset '", path, "' after line ", line_no);
  LT_CHECK(!samples.empty(), "dataset '", path, "' holds no samples (", line_no, " lines)");
  return samples;
}

}  // namespace layertap::io
