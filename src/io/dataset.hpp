// Pre-tokenized JSON Lines input (`extract --data`): one sample per non-blank line,
//   {"input_ids": [1, 2, ...], "loss_mask": [0, 1, ...], "id": "abc"}
// `loss_mask` is optional (default all 1); `id` is optional (a string or an integer; default the
// sample's index as a string). Other keys are ignored.
#pragma once
#include <cstdint>
#include <functional>
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

// Where each sample of a dataset file is, built in one validating pass so that ranks can share
// it and each parse only its own samples: 32 bytes per sample, not the dataset.
struct SampleSpan {
  int64_t offset = 0;  // byte offset of its line in the file
  int64_t bytes = 0;   // the line's length, without the newline
  int64_t line = 0;    // 1-based line number, for messages
  int64_t tokens = 0;  // length of input_ids
};

struct DatasetIndex {
  std::vector<SampleSpan> samples;  // the non-blank lines, in order
  std::string sha256;               // of the whole file, hashed as it was read
  int64_t lines = 0;
  int64_t total_tokens() const;
  std::vector<int64_t> lengths() const;  // tokens per sample
};

// Called on every sample during indexing (e.g. to refuse a token the model cannot take); throws
// layertap::Error naming the sample.
using SampleCheck = std::function<void(const Sample&)>;

// Reads the file once, in blocks parsed by `threads` threads (memory: a few blocks), validating
// every line as parse_sample_line does and applying `check`. Errors name the file, the line and
// the sample id: a path that is not a regular file (a pipe would be read once and could not be
// fingerprinted or resumed), malformed JSON or JSON nested deeper than kMaxJsonDepth, missing or
// non-array input_ids, a non-integer or out-of-range token id, empty input_ids, a loss_mask of the
// wrong length or with values other than 0/1, a file with no samples. Messages quote at most a
// short excerpt of the offending value. The first bad line in file order is the one reported.
DatasetIndex index_jsonl_dataset(const std::string& path, int64_t vocab_size, int threads = 1,
                                 const SampleCheck& check = {});

// Samples [first, last) of `index`, read by offset and parsed; refuses a file that changed since
// it was indexed (a line that no longer parses, or holds another number of tokens).
std::vector<Sample> read_samples(const std::string& path, const DatasetIndex& index, std::size_t first,
                                 std::size_t last, int64_t vocab_size);

// One non-blank line as sample `index`; `where` names it in errors ("dataset 'x' line 7").
Sample parse_sample_line(std::string_view line, int64_t index, const std::string& where, int64_t vocab_size);

// A sample line is an object holding arrays (depth 2); deeper input is refused before it is built,
// so hostile nesting cannot exhaust the stack in recursive JSON code.
inline constexpr int kMaxJsonDepth = 16;

}  // namespace layertap::io
