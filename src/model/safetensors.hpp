// Memory-mapped safetensors checkpoints: one file, or shards listed by model.safetensors.index.json.
// Tensors are read by name, optionally as a slice of rows or columns (a tensor-parallel shard), and
// converted to float32 on the way out; nothing else of the file is touched, so a rank pages in only
// its own slice.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/dtype.hpp"

namespace layertap {

struct TensorInfo {
  std::string name;
  std::string file;  // path of the safetensors file that holds it
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // inside the file's mapping
  uint64_t offset = 0;              // of data's first byte in the file (for pread)
};

class SafetensorsFile;  // one mapped file

std::string shape_str(const std::vector<int64_t>& shape);  // "[2, 3]"

// The safetensors files of a model directory: the files named by model.safetensors.index.json
// when present, else model.safetensors. Throws naming what is missing.
std::vector<std::string> checkpoint_files(const std::string& model_dir);

class Checkpoint {
 public:
  explicit Checkpoint(std::vector<std::string> files);
  ~Checkpoint();
  Checkpoint(const Checkpoint&) = delete;
  Checkpoint& operator=(const Checkpoint&) = delete;

  bool has(const std::string& name) const;
  const TensorInfo& info(const std::string& name) const;  // throws naming the tensor if missing

  // The whole tensor as float32, after checking its shape equals `shape`.
  std::vector<float> read(const std::string& name, const std::vector<int64_t>& shape) const;
  // Rows [row0, row0 + rows) of a 2-D tensor of shape `shape`: [rows, shape[1]] float32.
  std::vector<float> read_rows(const std::string& name, const std::vector<int64_t>& shape,
                               int64_t row0, int64_t rows) const;
  // Columns [col0, col0 + cols) of a 2-D tensor of shape `shape`: [shape[0], cols] float32.
  std::vector<float> read_cols(const std::string& name, const std::vector<int64_t>& shape,
                               int64_t col0, int64_t cols) const;
  // Rows [row0, row0 + rows) x columns [col0, col0 + cols) of a 2-D float tensor: [rows, cols].
  std::vector<float> read_window(const std::string& name, const std::vector<int64_t>& shape, int64_t row0,
                                 int64_t rows, int64_t col0, int64_t cols) const;

  // Drops the mapped pages of a tensor that has been converted: a rank's resident memory then
  // holds its own slices, not the file (the pages come back from the file if read again).
  void release(const TensorInfo& t) const;

  // SHA-256 over every file's name, size and JSON header: identifies the weights without reading them.
  const std::string& fingerprint() const { return fingerprint_; }
  const std::vector<std::string>& files() const { return files_; }

 private:
  void check_shape(const TensorInfo& t, const std::vector<int64_t>& shape) const;  // and a float dtype
  std::vector<std::unique_ptr<SafetensorsFile>> mapped_;
  std::map<std::string, TensorInfo> tensors_;
  std::vector<std::string> files_;
  std::string fingerprint_;
};

}  // namespace layertap
