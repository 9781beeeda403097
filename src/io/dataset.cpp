#include "io/dataset.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/digest.hpp"
#include "core/error.hpp"
#include "core/regular_file.hpp"
#include "core/text.hpp"
#include "model/json_fields.hpp"

namespace layertap::io {
namespace {

using nlohmann::json;

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

}  // namespace

Sample parse_sample_line(std::string_view line, int64_t index, const std::string& where,
                         int64_t vocab_size) {
  Sample s;
  s.index = index;
  const json j = parse_json(line, where, kMaxJsonDepth);
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
    s.id = excerpt(s.id);
  }
  const std::string who = cat(where, " (sample '", s.id, "')");

  const auto ids = j.find("input_ids");
  LT_CHECK(ids != j.end(), who, ": missing \"input_ids\"");
  LT_CHECK(ids->is_array(), who, ": \"input_ids\" must be an array, found ", ids->type_name());
  LT_CHECK(!ids->empty(), who, ": \"input_ids\" is empty");
  s.input_ids.resize(ids->size());
  for (std::size_t t = 0; t < ids->size(); ++t) {
    const json& v = (*ids)[t];
    LT_CHECK(v.is_number_integer(), who, ": input_ids[", t, "] = ", excerpt(v.dump()),
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
    return s;
  }
  LT_CHECK(mask->is_array(), who, ": \"loss_mask\" must be an array, found ", mask->type_name());
  LT_CHECK(mask->size() == ids->size(), who, ": \"loss_mask\" has ", mask->size(),
           " entries for ", ids->size(), " input_ids");
  s.loss_mask.resize(mask->size());
  for (std::size_t t = 0; t < mask->size(); ++t) {
    const json& v = (*mask)[t];
    LT_CHECK(v.is_number_integer() && (v.get<int64_t>() == 0 || v.get<int64_t>() == 1), who,
             ": loss_mask[", t, "] = ", excerpt(v.dump()), " (must be 0 or 1)");
    s.loss_mask[t] = uint8_t(v.get<int64_t>());
  }
  return s;
}

Dataset read_jsonl_dataset(const std::string& path, int64_t vocab_size) {
  LT_CHECK(vocab_size > 0 && vocab_size <= int64_t(std::numeric_limits<int32_t>::max()) + 1,
           "dataset '", path, "': invalid vocabulary size ", vocab_size);
  // A pipe would be read once and could not be fingerprinted for --resume: regular files only.
  const RegularFile file(path, "dataset");
  const int fd = file.fd();

  Dataset d;
  Sha256 hash;
  int64_t line_no = 0;
  std::string pending;  // the current line's bytes read so far
  const auto take_line = [&](std::string_view line) {
    ++line_no;
    if (is_blank(line)) return;
    d.samples.push_back(parse_sample_line(line, int64_t(d.samples.size()),
                                          cat("dataset '", path, "' line ", line_no), vocab_size));
  };
  std::vector<char> buf(std::size_t(1) << 20);
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    LT_CHECK(n >= 0, "read error in dataset '", path, "' after line ", line_no, ": ", std::strerror(errno));
    if (n == 0) break;
    hash.update(buf.data(), std::size_t(n));
    std::string_view chunk(buf.data(), std::size_t(n));
    for (std::size_t nl; (nl = chunk.find('\n')) != std::string_view::npos; chunk.remove_prefix(nl + 1)) {
      if (pending.empty()) {
        take_line(chunk.substr(0, nl));
      } else {
        pending.append(chunk.substr(0, nl));
        take_line(pending);
        pending.clear();
      }
    }
    pending.append(chunk);
  }
  if (!pending.empty()) take_line(pending);  // a last line without a newline
  LT_CHECK(!d.samples.empty(), "dataset '", path, "' holds no samples (", line_no, " lines)");
  d.sha256 = hash.hex();
  return d;
}

}  // namespace layertap::io
