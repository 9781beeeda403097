// One HDF5 shard of the output (docs/FORMAT.md): ragged samples concatenated along tokens.
//   /hidden_states  [T, P, H]  bf16 (custom float type), float32, or float8_e4m3fn codes (uint8),
//                              chunked along T, extendible; optionally compressed (io/compression.hpp)
//   /hidden_scales  [T, P]     float32, float8 storage only: value = float(code) * scale
//   /input_ids      [T]        int32
//   /loss_mask      [T]        uint8
//   /sample_offsets [S+1]      int64, starts at 0; sample s is rows [off[s], off[s+1])
//   /sample_index   [S]        int64, position of each sample in the input dataset
// plus root attributes describing the capture (OutputMeta). Written as "<dir>/<name>.tmp" and
// renamed to "<dir>/<name>" only once complete and flushed.
//
// Float8 storage and compression work on whole chunks of /hidden_states: the thread calling
// append() interleaves rows into a chunk buffer, worker threads quantize and compress full chunks,
// and finished chunks go to the file in order (H5Dwrite_chunk). A chunk not yet full stays in
// memory until more rows arrive or close().
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/captured_batch.hpp"
#include "core/dtype.hpp"
#include "io/compression.hpp"
#include "io/fp8_storage.hpp"

namespace layertap::io {

// The output format's version: the manifest's format_version and every shard's attribute (the
// Python reader's FORMAT_VERSION, python/layertap/manifest.py, must equal it).
inline constexpr int kFormatVersion = 1;

// Written as root attributes of every shard.
struct OutputMeta {
  std::vector<std::string> point_specs;  // [P] resolved names, e.g. "2", "16", "29", "final"
  std::vector<int64_t> point_ids;        // [P] k in 0..L-1: input to decoder layer k; L: output of
                                         // the last layer (before the final norm); L+1: final
  std::string capture_request;           // what the user typed, e.g. "eagle3"
  std::string convention;                // e.g. "layertap-v1"
  int64_t num_layers = 0, hidden = 0;    // L, H
  DType dtype = DType::BF16;             // storage type of /hidden_states: BF16, F32 or F8_E4M3
  Compression compression;               // lossless filter of /hidden_states (and its threads)
  std::string architecture, config_sha256, weights_fingerprint;
  // MoE models: the layers /routed_experts records (model/routing_record.hpp) and the experts per
  // token; empty and 0 for a dense model (no /routed_experts).
  std::vector<int64_t> routed_layers;
  int64_t routed_top_k = 0;

  int64_t num_points() const { return int64_t(point_ids.size()); }
  int64_t routed_width() const { return int64_t(routed_layers.size()) * routed_top_k; }
  // The dtype of the CapturedBatch states the writer takes: `dtype`, except BF16 for F8_E4M3
  // (the writer quantizes bf16 states and measures its error against them).
  DType batch_dtype() const { return dtype == DType::F8_E4M3 ? DType::BF16 : dtype; }
  void validate() const;  // throws naming the inconsistent field
};

// A storage dtype from the command line or a shard attribute: "bfloat16"/"bf16",
// "float32"/"fp32", "float8_e4m3"/"float8_e4m3fn"/"fp8"; throws naming the accepted names.
DType parse_storage_dtype(std::string_view s);

struct ShardInfo {
  std::string file;  // file name, relative to the output directory
  int64_t samples = 0, tokens = 0;
  int64_t first_sample = -1, last_sample = -1;  // dataset index of its first and last sample
  int64_t bytes = 0;   // size of the shard file on disk
  std::string sha256;  // of the whole shard file
  std::vector<Fp8Fidelity> fp8;  // [P] float8 storage: its error against bf16; empty otherwise
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
                                  // (elem of the storage dtype, before compression)

  // Writes the chunks still in memory, closes the file, fsyncs it, checksums it and renames it
  // into place.
  ShardInfo close();

  // Rows of /hidden_states per chunk: about 2 MiB, at least 1 row.
  static int64_t chunk_rows(int64_t points, int64_t hidden, DType dtype);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace layertap::io
