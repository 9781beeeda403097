// Pre-tokenized JSON Lines input (DESIGN.md section 5): one sample per non-blank line,
//   {"input_ids": [1, 2, ...], "loss_mask": [0, 1, ...], "id": "abc"}
// `loss_mask` is optional (default all 1); `id` is optional (a string or an integer; default the
// sample's index as a string). Other keys are ignored.
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace layertap::io {

struct Sample {
  int64_t index = 0;               // 0-based position among the samples (blank lines not counted)
  std::string id;                  // the line's "id", or the index as a string
  std::vector<int32_t> input_ids;  // [T_s], each in [0, vocab_size)
  std::vector<uint8_t> loss_mask;  // [T_s], each 0 or 1
};

struct Dataset {
  std::vector<Sample> samples;
  std::string sha256;  // of the bytes parsed, hashed as they were read
};

// Reads and validates the whole file, once. Every error is a layertap::Error naming the file, the
// line number and the sample id where known: a path that is not a regular file (a pipe would be
// read once and could not be fingerprinted or resumed), malformed JSON or JSON nested deeper than
// kMaxJsonDepth, missing or non-array input_ids, a non-integer or out-of-range token id, empty
// input_ids, a loss_mask of the wrong length or with values other than 0/1, a file with no samples.
// Messages quote at most a short excerpt of the offending value.
Dataset read_jsonl_dataset(const std::string& path, int64_t vocab_size);

// One non-blank line as sample `index`; `where` names it in errors ("dataset 'x' line 7").
Sample parse_sample_line(std::string_view line, int64_t index, const std::string& where, int64_t vocab_size);

// A sample line is an object holding arrays (depth 2); deeper input is refused before it is built,
// so hostile nesting cannot exhaust the stack in recursive JSON code.
inline constexpr int kMaxJsonDepth = 16;

}  // namespace layertap::io
