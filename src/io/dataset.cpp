#include "io/dataset.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <deque>
#include <future>
#include <limits>

#include <nlohmann/json.hpp>

#include "core/digest.hpp"
#include "core/error.hpp"
#include "core/failpoint.hpp"
#include "core/stop_request.hpp"
#include "core/regular_file.hpp"
#include "core/text.hpp"
#include "model/json_fields.hpp"

namespace layertap::io {
namespace {

using nlohmann::json;

bool is_blank(std::string_view line) {
  return line.find_first_not_of(" \t\r\n") == std::string_view::npos;
}

// The common case, fast: a SAX pass that fills a Sample without building a JSON tree (about 3x
// faster than parse_sample_line on token arrays). It only says whether the line is a valid sample;
// when it is not, parse_sample_line parses the line again to say why, so both agree on every rule
// (and on duplicate keys, where the last one wins) by construction.
class FastSampleParser {
 public:
  using json = nlohmann::json;
  FastSampleParser(Sample& s, int64_t vocab) : s_(s), vocab_(vocab) {}

  bool valid_end() const { return has_ids_ && !s_.input_ids.empty() && (!has_mask_ || s_.loss_mask.size() == s_.input_ids.size()); }

  bool null() { return scalar(); }
  bool boolean(bool) { return scalar(); }
  bool number_float(json::number_float_t, const json::string_t&) { return scalar(); }
  bool binary(json::binary_t&) { return false; }
  bool number_integer(json::number_integer_t v) {  // negative: nlohmann reports non-negative as unsigned
    if (depth_ == 1 && key_ == Key::Id) return set_id(std::to_string(v));
    return scalar();  // a negative token id or mask value is invalid
  }
  bool number_unsigned(json::number_unsigned_t v) {
    if (depth_ == 2 && key_ == Key::Ids) {
      if (v >= uint64_t(vocab_)) return false;
      s_.input_ids.push_back(int32_t(v));
      return true;
    }
    if (depth_ == 2 && key_ == Key::Mask) {
      if (v > 1) return false;
      s_.loss_mask.push_back(uint8_t(v));
      return true;
    }
    if (depth_ == 1 && key_ == Key::Id) return set_id(std::to_string(v));
    return scalar();
  }
  bool string(json::string_t& v) {
    if (depth_ == 1 && key_ == Key::Id) return set_id(std::move(v));
    return scalar();
  }
  bool start_object(std::size_t) {
    if (depth_ == 0) return ++depth_, true;
    return open_other();
  }
  bool end_object() { return --depth_, true; }
  bool start_array(std::size_t) {
    if (depth_ == 0) return false;  // a sample is an object
    if (depth_ == 1 && key_ == Key::Ids) {
      has_ids_ = true;
      s_.input_ids.clear();
      return ++depth_, true;
    }
    if (depth_ == 1 && key_ == Key::Mask) {
      has_mask_ = true;
      s_.loss_mask.clear();
      return ++depth_, true;
    }
    return open_other();
  }
  bool end_array() { return --depth_, true; }
  bool key(json::string_t& k) {
    if (depth_ != 1) return true;  // inside another key's object
    key_ = k == "input_ids" ? Key::Ids : k == "loss_mask" ? Key::Mask : k == "id" ? Key::Id : Key::Other;
    return true;
  }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) { return false; }

 private:
  enum class Key { Other, Ids, Mask, Id };
  // A scalar is valid only as another key's value (or inside it).
  bool scalar() const { return depth_ >= 1 && key_ == Key::Other; }
  // A container is valid only inside another key's value, and not too deep.
  bool open_other() {
    if (key_ != Key::Other || depth_ + 1 >= kMaxJsonDepth) return false;
    return ++depth_, true;
  }
  bool set_id(std::string id) {
    s_.id = excerpt(id);
    has_id_ = true;
    return true;
  }
  Sample& s_;
  const int64_t vocab_;
  int depth_ = 0;
  Key key_ = Key::Other;
  bool has_ids_ = false, has_mask_ = false, has_id_ = false;

 public:
  bool has_id() const { return has_id_; }
};

// `line` as sample `index`: the fast path, else parse_sample_line (which throws saying why, or
// accepts what the fast path was too strict for).
Sample parse_sample(std::string_view line, int64_t index, const std::string& where, int64_t vocab_size) {
  Sample s;
  s.index = index;
  FastSampleParser sax(s, vocab_size);
  if (nlohmann::json::sax_parse(line, &sax) && sax.valid_end()) {
    if (!sax.has_id()) s.id = std::to_string(index);
    if (s.loss_mask.empty()) s.loss_mask.assign(s.input_ids.size(), 1);
    return s;
  }
  return parse_sample_line(line, index, where, vocab_size);
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

int64_t DatasetIndex::total_tokens() const {
  int64_t n = 0;
  for (const SampleSpan& s : samples) n += s.tokens;
  return n;
}

std::vector<int64_t> DatasetIndex::lengths() const {
  std::vector<int64_t> out;
  out.reserve(samples.size());
  for (const SampleSpan& s : samples) out.push_back(s.tokens);
  return out;
}

namespace {

// Blocks of whole lines are parsed in parallel; a line longer than a block makes its block longer.
constexpr std::size_t kBlockBytes = std::size_t(8) << 20;

// What one block of whole lines holds. Line numbers and sample indices are relative to the block
// until merged in file order.
struct BlockResult {
  std::vector<SampleSpan> spans;  // offsets absolute, lines relative (1-based within the block)
  int64_t lines = 0;
  bool failed = false;
  int64_t bad_line = 0;      // relative line of the first failure
  std::string bad_text;      // its bytes, parsed again with its real line number for the message
};

BlockResult index_block(const std::string& text, int64_t base, int64_t vocab_size, const SampleCheck& check) {
  BlockResult r;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string::npos) end = text.size();
    const std::string_view line(text.data() + pos, end - pos);
    ++r.lines;
    if (!is_blank(line)) {
      try {
        const Sample s = parse_sample(line, int64_t(r.spans.size()), "", vocab_size);
        if (check) check(s);
        r.spans.push_back({base + int64_t(pos), int64_t(line.size()), r.lines, int64_t(s.input_ids.size())});
      } catch (const Error&) {
        r.failed = true;
        r.bad_line = r.lines;
        r.bad_text = std::string(line);
        return r;
      }
    }
    pos = end + 1;
  }
  return r;
}

}  // namespace

DatasetIndex index_jsonl_dataset(const std::string& path, int64_t vocab_size, int threads, const SampleCheck& check) {
  LT_CHECK(vocab_size > 0 && vocab_size <= int64_t(std::numeric_limits<int32_t>::max()) + 1,
           "dataset '", path, "': invalid vocabulary size ", vocab_size);
  // A pipe would be read once and could not be fingerprinted for --resume: regular files only.
  const RegularFile file(path, "dataset");
  DatasetIndex index;
  Sha256 hash;
  std::deque<std::future<BlockResult>> running;  // blocks in file order
  const auto merge_front = [&] {
    BlockResult r = running.front().get();
    running.pop_front();
    if (r.failed) {
      // Parse the bad line again where its number and sample index are known: the message is the
      // one a sequential reader would give.
      const int64_t line = index.lines + r.bad_line, sample = int64_t(index.samples.size() + r.spans.size());
      const Sample s = parse_sample_line(r.bad_text, sample, cat("dataset '", path, "' line ", line), vocab_size);
      if (check) check(s);
      LT_FAIL("dataset '", path, "' line ", line, " could not be indexed");  // not reached: the parse threw
    }
    for (SampleSpan& span : r.spans) {
      span.line += index.lines;
      index.samples.push_back(span);
    }
    index.lines += r.lines;
  };
  try {
    std::string carry;  // bytes after the last newline read so far
    int64_t carry_offset = 0;
    std::vector<char> buf(kBlockBytes);
    for (bool eof = false; !eof;) {
      failpoint("index");
      stop_point("indexing the dataset");
      ssize_t n = 0;
      do n = ::read(file.fd(), buf.data(), buf.size());
      while (n < 0 && errno == EINTR);
      LT_CHECK(n >= 0, "read error in dataset '", path, "': ", std::strerror(errno));
      eof = n == 0;
      hash.update(buf.data(), std::size_t(n));
      carry.append(buf.data(), std::size_t(n));
      const std::size_t cut = eof ? carry.size() : carry.rfind('\n') + 1;  // npos + 1 = 0: no whole line yet
      if (cut == 0 || (!eof && carry.size() < kBlockBytes)) continue;
      std::string block = carry.substr(0, cut);
      carry.erase(0, cut);
      const int64_t base = carry_offset;
      carry_offset += int64_t(cut);
      if (int(running.size()) >= std::max(1, threads)) merge_front();
      running.push_back(std::async(std::launch::async, [block = std::move(block), base, vocab_size, &check] {
        return index_block(block, base, vocab_size, check);
      }));
    }
    while (!running.empty()) merge_front();
  } catch (...) {
    for (auto& f : running) f.wait();  // no task may outlive what it references
    throw;
  }
  LT_CHECK(!index.samples.empty(), "dataset '", path, "' holds no samples (", index.lines, " lines)");
  index.sha256 = hash.hex();
  return index;
}

std::vector<Sample> read_samples(const std::string& path, const DatasetIndex& index, std::size_t first,
                                 std::size_t last, int64_t vocab_size) {
  LT_CHECK(first <= last && last <= index.samples.size(), "dataset '", path, "': samples [", first, ", ", last,
           ") are outside its ", index.samples.size());
  const RegularFile file(path, "dataset");
  std::vector<Sample> out;
  out.reserve(last - first);
  std::string line;
  for (std::size_t i = first; i < last; ++i) {
    if ((i - first) % 4096 == 0) stop_point("reading this rank's samples");
    const SampleSpan& span = index.samples[i];
    line.resize(std::size_t(span.bytes));
    std::size_t got = 0;
    while (got < line.size()) {
      const ssize_t n = ::pread(file.fd(), line.data() + got, line.size() - got, off_t(span.offset) + off_t(got));
      if (n < 0 && errno == EINTR) continue;
      LT_CHECK(n > 0, "dataset '", path, "' line ", span.line, ": ",
               n == 0 ? "the file is shorter than when it was indexed" : std::strerror(errno));
      got += std::size_t(n);
    }
    const std::string where = cat("dataset '", path, "' line ", span.line);
    Sample s = parse_sample(line, int64_t(i), where, vocab_size);
    LT_CHECK(int64_t(s.input_ids.size()) == span.tokens, where, " holds ", s.input_ids.size(), " tokens, ",
             span.tokens, " when the dataset was indexed: the file changed during the run");
    out.push_back(std::move(s));
  }
  return out;
}

}  // namespace layertap::io
