// One HDF5 shard of the output (docs/FORMAT.md): ragged samples concatenated along tokens.
//   /hidden_states  [T, P, H]  bf16 (custom float type) or float32, chunked along T, extendible
//   /input_ids      [T]        int32
//   /loss_mask      [T]        uint8
//   /sample_offsets [S+1]      int64, starts at 0; sample s is rows [off[s], off[s+1])
//   /sample_index   [S]        int64, position of each sample in the input dataset
// plus root attributes describing the capture (OutputMeta). Written as "<dir>/<name>.tmp" and
// renamed to "<dir>/<name>" only once complete and flushed.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "core/captured_batch.hpp"
#include "core/dtype.hpp"

namespace layertap::io {

inline constexpr int kFormatVersion = 1;

// Written as root attributes of every shard.
struct OutputMeta {
  std::vector<std::string> point_specs;  // [P] resolved names, e.g. "2", "16", "29", "final"
  std::vector<int64_t> point_ids;        // [P] k in 0..L-1: input to decoder layer k; L: output of
                                         // the last layer (before the final norm); L+1: final
  std::string capture_request;           // what the user typed, e.g. "eagle3"
  std::string convention;                // e.g. "layertap-v1"
  int64_t num_layers = 0, hidden = 0;    // L, H
  DType dtype = DType::BF16;             // storage type of /hidden_states: BF16 or F32
  std::string architecture, config_sha256, weights_fingerprint;

  int64_t num_points() const { return int64_t(point_ids.size()); }
  void validate() const;  // throws naming the inconsistent field
};

struct ShardInfo {
  std::string file;  // file name, relative to the output directory
  int64_t samples = 0, tokens = 0;
  int64_t first_sample = -1, last_sample = -1;  // dataset index of its first and last sample
  int64_t bytes = 0;   // size of the shard file on disk
  std::string sha256;  // of the whole shard file
};

class ShardWriter {
 public:
  ShardWriter(std::filesystem::path dir, std::string name, OutputMeta meta);
  ~ShardWriter();  // if not closed: closes handles and removes the .tmp file
  ShardWriter(const ShardWriter&) = delete;
  ShardWriter& operator=(const ShardWriter&) = delete;

  // Validates `batch` against the meta (points, hidden size, dtype, offsets, sizes) and appends
  // its samples to every dataset. After a failed append the shard is unusable (close() throws).
  void append(const CapturedBatch& batch);

  int64_t samples() const;
  int64_t tokens() const;
  int64_t bytes_written() const;  // hidden-state payload bytes so far: T * P * H * elem

  // Closes the file, fsyncs it, checksums it and renames it into place.
  ShardInfo close();

  // Rows of /hidden_states per chunk: about 2 MiB, at least 1 row.
  static int64_t chunk_rows(int64_t points, int64_t hidden, DType dtype);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace layertap::io
