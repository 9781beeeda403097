// libFuzzer target: the JSONL dataset line parser (io/dataset.cpp, layertap::io::parse_sample_line).
// The input is split into lines as read_jsonl_dataset splits a file (blank lines skipped) and each
// line parsed against the smallest and the largest vocabulary read_jsonl_dataset allows. A
// layertap::Error is the expected outcome for a bad line; any other exception, a crash, a sanitizer
// report or an accepted sample that breaks the Sample contract is a finding.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <string>
#include <string_view>

#include "core/error.hpp"
#include "io/dataset.hpp"

namespace {

bool is_blank(std::string_view line) { return line.find_first_not_of(" \t\r\n") == std::string_view::npos; }

void check(const layertap::io::Sample& s, int64_t index, int64_t vocab_size) {
  if (s.index != index || s.input_ids.empty() || s.loss_mask.size() != s.input_ids.size()) std::abort();
  for (int32_t id : s.input_ids)
    if (id < 0 || id >= vocab_size) std::abort();
  for (uint8_t m : s.loss_mask)
    if (m > 1) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  constexpr int64_t kVocabs[] = {1000, int64_t(std::numeric_limits<int32_t>::max()) + 1};
  int64_t index = 0;
  while (!rest.empty()) {
    const std::size_t nl = rest.find('\n');
    const std::string_view line = rest.substr(0, nl);
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
    if (is_blank(line)) continue;
    for (int64_t vocab : kVocabs) {
      try {
        check(layertap::io::parse_sample_line(line, index, "fuzz.jsonl line 1", vocab), index, vocab);
      } catch (const layertap::Error&) {
        // A refused line: the expected outcome.
      }
    }
    ++index;
  }
  return 0;
}
