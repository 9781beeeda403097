#include <gtest/gtest.h>

#include <sys/stat.h>

#include <fstream>
#include <functional>

#include "core/digest.hpp"
#include "core/error.hpp"
#include "io/dataset.hpp"
#include "io_test_util.hpp"

namespace layertap::io {
namespace {

using test::TempDir;

std::string test_error(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

std::string write_file(const TempDir& dir, const std::string& content) {
  const auto path = (dir.path() / "data.jsonl").string();
  std::ofstream(path, std::ios::binary) << content;
  return path;
}

struct Read {
  std::vector<Sample> samples;
  std::string sha256;
};

// Every sample of a file, as the ranks together read it: the index pass, then the samples by offset.
Read read_jsonl_dataset(const std::string& path, int64_t vocab, int threads = 2) {
  const DatasetIndex index = index_jsonl_dataset(path, vocab, threads);
  return {read_samples(path, index, 0, index.samples.size(), vocab), index.sha256};
}

// The message of the Error that reading `content` throws ("" if none).
std::string error_of(const std::string& content, int64_t vocab = 100) {
  TempDir dir;
  try {
    read_jsonl_dataset(write_file(dir, content), vocab);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(Dataset, ReadsSamplesWithDefaults) {
  TempDir dir;
  const std::string content =
      "{\"input_ids\": [1, 2, 3], \"loss_mask\": [0, 1, 1], \"id\": \"first\"}\n"
      "\n"
      "   \n"
      "{\"input_ids\": [99], \"id\": 42, \"text\": \"ignored\"}\r\n"
      "{\"input_ids\": [0, 5]}";  // no trailing newline
  const auto [samples, sha256] = read_jsonl_dataset(write_file(dir, content), 100);
  EXPECT_EQ(sha256, sha256_hex(content));  // the bytes parsed are the bytes fingerprinted
  ASSERT_EQ(samples.size(), 3u);
  EXPECT_EQ(samples[0].index, 0);
  EXPECT_EQ(samples[0].id, "first");
  EXPECT_EQ(samples[0].input_ids, (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(samples[0].loss_mask, (std::vector<uint8_t>{0, 1, 1}));
  EXPECT_EQ(samples[1].index, 1);  // blank lines are not counted
  EXPECT_EQ(samples[1].id, "42");
  EXPECT_EQ(samples[1].input_ids, (std::vector<int32_t>{99}));
  EXPECT_EQ(samples[1].loss_mask, (std::vector<uint8_t>{1}));  // default: all 1
  EXPECT_EQ(samples[2].index, 2);
  EXPECT_EQ(samples[2].id, "2");  // default: the index
  EXPECT_EQ(samples[2].loss_mask, (std::vector<uint8_t>{1, 1}));
}

struct BadCase {
  const char* name;
  std::string content;
  std::vector<std::string> expected;  // substrings of the message
};

TEST(Dataset, EachMalformedLineNamesLineSampleAndCause) {
  const std::string good = "{\"input_ids\": [1]}\n\n";  // sample 0 on line 1; line 3 is next
  const std::vector<BadCase> cases = {
      {"malformed JSON", good + "{\"input_ids\": [1, 2\n", {"line 3", "malformed JSON"}},
      {"not an object", good + "[1, 2]\n", {"line 3", "expected a JSON object"}},
      {"missing input_ids", good + "{\"id\": \"a\"}\n",
       {"line 3", "sample 'a'", "missing \"input_ids\""}},
      {"input_ids not an array", good + "{\"id\": \"b\", \"input_ids\": 5}\n",
       {"line 3", "sample 'b'", "must be an array"}},
      {"empty input_ids", good + "{\"input_ids\": []}\n", {"line 3", "sample '1'", "is empty"}},
      {"float token", good + "{\"input_ids\": [1, 2.5]}\n",
       {"line 3", "sample '1'", "input_ids[1] = 2.5", "not an integer"}},
      {"string token", good + "{\"input_ids\": [\"7\"]}\n",
       {"line 3", "input_ids[0]", "not an integer"}},
      {"token too large", good + "{\"id\": 7, \"input_ids\": [1, 100]}\n",
       {"line 3", "sample '7'", "input_ids[1] = 100", "outside the vocabulary [0, 100)"}},
      {"negative token", good + "{\"input_ids\": [-1]}\n",
       {"line 3", "input_ids[0] = -1", "[0, 100)"}},
      {"huge token", good + "{\"input_ids\": [18446744073709551615]}\n",
       {"line 3", "outside the vocabulary"}},
      {"mask length", good + "{\"input_ids\": [1, 2], \"loss_mask\": [1]}\n",
       {"line 3", "sample '1'", "\"loss_mask\" has 1 entries for 2 input_ids"}},
      {"mask value", good + "{\"input_ids\": [1, 2], \"loss_mask\": [1, 2]}\n",
       {"line 3", "loss_mask[1] = 2", "must be 0 or 1"}},
      {"mask not an array", good + "{\"input_ids\": [1], \"loss_mask\": 1}\n",
       {"line 3", "\"loss_mask\" must be an array"}},
      {"bad id", good + "{\"input_ids\": [1], \"id\": [1]}\n",
       {"line 3", "\"id\" must be a string or an integer"}},
      {"empty dataset", "\n  \n\n", {"holds no samples"}},
      // Hostile lines: nesting that would exhaust a recursive parser's stack, and a huge invalid
      // element that must not be echoed whole.
      {"deep nesting", good + "{\"input_ids\": " + std::string(100000, '[') + "\n",
       {"line 3", "nested deeper than"}},
      {"deep nesting inside a token", good + "{\"input_ids\": [" + std::string(20, '[') +
                                          std::string(21, ']') + "}\n",
       {"line 3", "nested deeper than"}},
      {"huge invalid token", good + "{\"input_ids\": [\"" + std::string(5'000'000, 'x') + "\"]}\n",
       {"line 3", "input_ids[0] = \"xxxx", "... (5000002 bytes)", "not an integer"}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string msg = error_of(c.content);
    ASSERT_FALSE(msg.empty()) << "no error for: " << c.content;
    EXPECT_NE(msg.find("data.jsonl"), std::string::npos) << msg;
    for (const auto& part : c.expected) EXPECT_NE(msg.find(part), std::string::npos) << msg;
  }
}

TEST(Dataset, UnreadableFileIsNamed) {
  TempDir dir;
  const auto missing = (dir.path() / "nope.jsonl").string();
  try {
    read_jsonl_dataset(missing, 100);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nope.jsonl"), std::string::npos) << e.what();
  }
  EXPECT_THROW(read_jsonl_dataset(dir.path().string(), 100), Error);  // a directory
}

// A file of many blocks: the index is the same whatever the thread count, line numbers and offsets
// are absolute, the samples read back by offset are the ones written, and the first bad line in
// file order is the one reported, even when a later block fails too.
TEST(Dataset, IndexOfManyBlocksIsExactAndThreadIndependent) {
  TempDir dir;
  std::string content;
  std::vector<std::size_t> line_offsets;
  const int n = 60000;  // about 20 MB: several 8 MB blocks
  for (int i = 0; i < n; ++i) {
    if (i % 1000 == 7) content += "\n";  // blank lines are counted as lines, not samples
    line_offsets.push_back(content.size());
    content += "{\"id\": " + std::to_string(i) + ", \"input_ids\": [";
    for (int t = 0; t <= i % 50; ++t) content += (t ? ", " : "") + std::to_string((i + t) % 97);
    content += "], \"pad\": \"" + std::string(std::size_t(200 + i % 300), 'p') + "\"}\n";
  }
  content += "{\"id\": \"huge\", \"input_ids\": [" + std::string(9'000'000, ' ') + "1]}";  // longer than a block
  const std::string path = write_file(dir, content);
  const DatasetIndex one = index_jsonl_dataset(path, 100, 1), three = index_jsonl_dataset(path, 100, 3);
  ASSERT_EQ(one.samples.size(), std::size_t(n + 1));
  EXPECT_EQ(one.sha256, sha256_hex(content));
  EXPECT_EQ(three.sha256, one.sha256);
  EXPECT_EQ(one.lines, n + n / 1000 + 1);
  for (std::size_t i = 0; i < one.samples.size(); ++i) {
    const SampleSpan &a = one.samples[i], &b = three.samples[i];
    ASSERT_TRUE(a.offset == b.offset && a.bytes == b.bytes && a.line == b.line && a.tokens == b.tokens) << i;
  }
  EXPECT_EQ(one.samples[12345].offset, int64_t(line_offsets[12345]));
  EXPECT_EQ(one.samples[12345].line, 12345 + 13 + 1);  // 13 blank lines before it (7, 1007, ..., 12007)
  EXPECT_EQ(one.samples[12345].tokens, 12345 % 50 + 1);
  const auto part = read_samples(path, three, 30000, 30003, 100);
  ASSERT_EQ(part.size(), 3u);
  EXPECT_EQ(part[1].id, "30001");
  EXPECT_EQ(part[1].index, 30001);
  EXPECT_EQ(part[1].input_ids.size(), std::size_t(30001 % 50 + 1));
  EXPECT_EQ(read_samples(path, three, n, n + 1, 100)[0].id, "huge");

  // Two bad lines in different blocks: the earlier one is reported with its absolute line number.
  std::string bad = content;
  bad.replace(line_offsets[50000], 1, "[");
  bad.replace(line_offsets[40000], 1, "[");
  const std::string bad_path = write_file(dir, bad);
  for (int threads : {1, 4}) {
    try {
      index_jsonl_dataset(bad_path, 100, threads);
      FAIL() << "no error";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("line " + std::to_string(40000 + 40 + 1) + ":"), std::string::npos)
          << e.what();
    }
  }
}

TEST(Dataset, ReadRefusesAFileChangedSinceIndexing) {
  TempDir dir;
  const std::string path = write_file(dir, "{\"input_ids\": [1, 2, 3]}\n{\"input_ids\": [4]}\n");
  const DatasetIndex index = index_jsonl_dataset(path, 100);
  write_file(dir, "{\"input_ids\": [1, 2, 7]}\n{\"input_ids\": [4, 5]}\n");
  EXPECT_EQ(read_samples(path, index, 0, 1, 100)[0].input_ids, (std::vector<int32_t>{1, 2, 7}));
  const std::string msg = test_error([&] { read_samples(path, index, 1, 2, 100); });
  EXPECT_NE(msg.find("line 2"), std::string::npos) << msg;
}

TEST(Dataset, CheckRunsOnEverySampleWithItsIndex) {
  TempDir dir;
  const std::string path = write_file(dir, "{\"input_ids\": [1]}\n\n{\"id\": \"x\", \"input_ids\": [2, 9]}\n");
  const SampleCheck no_nines = [](const Sample& s) {
    for (int32_t t : s.input_ids) LT_CHECK(t != 9, "sample ", s.index, " (id '", s.id, "') holds 9");
  };
  const std::string msg = test_error([&] { index_jsonl_dataset(path, 100, 1, no_nines); });
  EXPECT_NE(msg.find("sample 1 (id 'x') holds 9"), std::string::npos) << msg;
}

// Lines are read by a fast SAX pass and explained by the JSON-tree parser: both must accept the
// same samples with the same contents.
TEST(Dataset, FastPathAgreesWithTheTreeParser) {
  const std::vector<std::string> lines = {
      R"({"input_ids": [1, 2, 3]})",
      R"({"id": "", "input_ids": [0]})",
      R"({"id": -5, "input_ids": [99], "loss_mask": [0]})",
      R"({"id": 18446744073709551615, "input_ids": [7]})",
      R"({"meta": {"a": [1, -2, {"b": null}], "c": 1.5, "d": true}, "input_ids": [4, 5], "loss_mask": [1, 0]})",
      R"({"input_ids": [1], "input_ids": [2, 3]})",            // the last of duplicate keys wins
      R"({"input_ids": ["x"], "input_ids": [2, 3]})",          // even after an invalid first value
      R"({"loss_mask": [1, 1], "input_ids": [2, 3], "loss_mask": [0, 1]})",
      R"({"input_ids": [1, 2], "loss_mask": []})",
      R"({"input_ids": [1, -2]})",
      R"({"input_ids": [1, 2], "loss_mask": [1, 2]})",
      R"({"input_ids": [[1], 2]})",
      R"({"id": null, "input_ids": [1]})",
      R"({"id": 1.0, "input_ids": [1]})",
      R"({"input_ids": []})",
      R"([{"input_ids": [1]}])",
      R"({"input_ids": [1]} trailing)",
      R"({"input_ids": [100]})",
  };
  for (const std::string& line : lines) {
    SCOPED_TRACE(line);
    std::string tree_error;
    Sample want;
    try {
      want = parse_sample_line(line, 0, "line", 100);
    } catch (const Error& e) {
      tree_error = e.what();
    }
    const std::string got_error = error_of(line + "\n");
    EXPECT_EQ(got_error.empty(), tree_error.empty()) << got_error << " | " << tree_error;
    if (!tree_error.empty()) continue;
    TempDir dir;
    const auto got = read_jsonl_dataset(write_file(dir, line + "\n"), 100).samples.at(0);
    EXPECT_EQ(got.id, want.id);
    EXPECT_EQ(got.input_ids, want.input_ids);
    EXPECT_EQ(got.loss_mask, want.loss_mask);
  }
}

TEST(Dataset, PipeIsRefusedNotReadTwice) {
  // A FIFO with no writer: opening must not block, and a stream cannot be fingerprinted for --resume.
  TempDir dir;
  const auto fifo = (dir.path() / "data.fifo").string();
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  try {
    read_jsonl_dataset(fifo, 100);
    FAIL() << "no error";
  } catch (const Error& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("data.fifo"), std::string::npos) << msg;
    EXPECT_NE(msg.find("not a regular file"), std::string::npos) << msg;
  }
}

TEST(Dataset, ErrorMessagesStayShort) {
  // Whatever the offending line holds, the message quotes an excerpt only.
  const std::string msg = error_of("{\"id\": \"" + std::string(1'000'000, 'a') + "\", \"input_ids\": [1.5]}\n");
  EXPECT_LT(msg.size(), 400u) << msg.substr(0, 400);
  EXPECT_NE(msg.find("not an integer"), std::string::npos);
}

}  // namespace
}  // namespace layertap::io
