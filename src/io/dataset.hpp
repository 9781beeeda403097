// Pre-tokenized JSON Lines input (DESIGN.md section 5): one sample per non-blank line,
//   {"input_ids": [1, 2, ...], "loss_mask": [0, 1, ...], "id": "abc"}
// `loss_mask` is optional (default all 1); `id` is optional (a string or an integer; default the
// sample's index as a string). Other keys are ignored.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace layertap::io {

struct Sample {
  int64_t index = 0;               // 0-based position among the samples (blank lines not counted)
  std::string id;                  // the line's "id", or the index as a string
  std::vector<int32_t> input_ids;  // [T_s], each in [0, vocab_size)
  std::vector<uint8_t> loss_mask;  // [T_s], each 0 or 1
};

// Reads and validates the whole file. Every error is a layertap::Error naming the file, the line
// number and the sample id where known: unreadable file, malformed JSON, missing or non-array
// input_ids, a non-integer or out-of-range token id, empty input_ids, a loss_mask of the wrong
// length or with values other than 0/1, a file with no samples.
std::vector<Sample> read_jsonl_dataset(const std::string& path, int64_t vocab_size);

}  // namespace layertap::io
