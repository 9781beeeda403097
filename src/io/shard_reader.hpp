// Reads a shard written by ShardWriter (docs/FORMAT.md): its attributes, its [T] and [S] datasets
// and rows of /hidden_states. Used by `layertap inspect` and by tests.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "io/shard_writer.hpp"

namespace layertap::io {

class ShardReader {
 public:
  explicit ShardReader(const std::filesystem::path& file);  // throws naming the file
  ~ShardReader();
  ShardReader(const ShardReader&) = delete;
  ShardReader& operator=(const ShardReader&) = delete;

  int64_t format_version() const;
  const OutputMeta& meta() const;  // from the root attributes

  std::vector<int64_t> hidden_shape() const;  // dims of /hidden_states: [T, P, H]
  std::string hidden_dtype() const;           // its stored type: "bfloat16", "float32", ...
  int64_t num_tokens() const;                 // length of /input_ids
  int64_t num_samples() const;                // length of /sample_index

  std::vector<int64_t> sample_offsets() const;  // [S+1]
  std::vector<int64_t> sample_index() const;    // [S]
  std::vector<int32_t> input_ids() const;       // [T]
  std::vector<uint8_t> loss_mask() const;       // [T]
  // Rows [t0, t1) of /hidden_states converted to float32: [t1 - t0, P, H].
  std::vector<float> hidden_states(int64_t t0, int64_t t1) const;

  // Disagreements between the datasets and the attributes (lengths, shape, offsets that do not
  // rise from 0 to T), one readable line each; empty for a well-formed shard.
  std::vector<std::string> structure_problems() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// "[1024, 4, 4096]"
std::string format_shape(const std::vector<int64_t>& dims);

}  // namespace layertap::io
