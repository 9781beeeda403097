// Reads a shard written by ShardWriter (docs/FORMAT.md): its attributes, its [T] and [S] datasets
// and rows of /hidden_states as float32 whatever the storage option (bf16, float32, float8 codes
// with their scales; compressed or not: layertap registers its own LZ4 and Zstandard decoders, so
// no HDF5 plugin is needed). Used by `layertap inspect` and `verify`, and by tests.
#pragma once
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "io/compression.hpp"
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
  std::string hidden_dtype() const;           // its stored type: "bfloat16", "float32",
                                              // "float8_e4m3fn" (uint8 codes of a float8 shard), ...
  std::vector<std::string> hidden_filters() const;  // its HDF5 filters: {}, {"shuffle", "lz4"}, ...
  std::vector<ChunkFilter> hidden_pipeline() const;  // the same with their ids and parameters
  std::size_t hidden_element_size() const;           // bytes of one stored value
  std::string hidden_encoding() const;               // its "encoding" attribute ("" when absent)
  // float8 shards: each point's error against bf16 as the writer measured it (attributes of
  // /hidden_scales); empty for other storage types.
  std::vector<Fp8Fidelity> fp8_fidelity() const;
  int64_t num_tokens() const;                 // length of /input_ids
  int64_t num_samples() const;                // length of /sample_index

  std::vector<int64_t> sample_offsets() const;  // [S+1]
  std::vector<int64_t> sample_index() const;    // [S]
  std::vector<int32_t> input_ids() const;       // [T]
  std::vector<uint8_t> loss_mask() const;       // [T]
  // MoE outputs: whether the shard records each token's routing, and rows [t0, t1) of it:
  // [t1 - t0, M, k] global expert ids (meta().routed_layers are the M layers).
  bool has_routing() const;
  std::vector<int16_t> routed_experts(int64_t t0, int64_t t1) const;
  // Rows [t0, t1) of /hidden_states converted to float32: [t1 - t0, P, H]. float8 codes are
  // multiplied by their /hidden_scales (in float32, as docs/FORMAT.md tells h5py users to).
  //
  // A filtered (compressed) dataset is never decoded by HDF5: each stored chunk is read raw and
  // decoded by decode_stored_chunk() into exactly the size the dataset's chunk layout gives, so a
  // chunk that decodes short or long, or declares another size (a decompression bomb), is an error
  // naming the dataset, the chunk and the file, raised before anything of the declared size is
  // allocated. The last chunk decoded of each dataset is kept, so reading consecutive row ranges
  // (samples in order) decodes every chunk once; a chunk that failed fails again without being read.
  // Not thread-safe (one reader per thread).
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
