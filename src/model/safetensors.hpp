// Safetensors checkpoints: one file, or shards listed by model.safetensors.index.json. Opening one
// reads and checks the headers; tensors are then read by name with pread (model/stored_window.hpp),
// optionally as a slice of rows or columns (a tensor-parallel shard), checked (finite) and converted
// to float32 on the way out. Nothing is mapped, so a rank's memory holds its own slices only.
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
  int fd = -1;         // the file, open for pread while the Checkpoint lives
  uint64_t offset = 0;  // of the tensor's first byte in the file
};

class SafetensorsFile;  // one open file and its header

std::string shape_str(const std::vector<int64_t>& shape);  // "[2, 3]"
std::size_t tensor_bytes(const TensorInfo& t);              // shape x dtype size

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

  // The whole tensor as float32, after checking its shape equals `shape`. Every read_* of floats
  // throws naming the tensor, file and index of a non-finite value (ValueRule::Finite).
  std::vector<float> read(const std::string& name, const std::vector<int64_t>& shape) const;
  // The whole tensor's bytes as stored, any dtype, unchecked (token ids of a fixture, say).
  std::vector<std::byte> read_bytes(const std::string& name) const;
  // Rows [row0, row0 + rows) of a 2-D tensor of shape `shape`: [rows, shape[1]] float32.
  std::vector<float> read_rows(const std::string& name, const std::vector<int64_t>& shape,
                               int64_t row0, int64_t rows) const;
  // Columns [col0, col0 + cols) of a 2-D tensor of shape `shape`: [shape[0], cols] float32.
  std::vector<float> read_cols(const std::string& name, const std::vector<int64_t>& shape,
                               int64_t col0, int64_t cols) const;
  // Rows [row0, row0 + rows) x columns [col0, col0 + cols) of a 2-D float tensor: [rows, cols].
  std::vector<float> read_window(const std::string& name, const std::vector<int64_t>& shape, int64_t row0,
                                 int64_t rows, int64_t col0, int64_t cols) const;

  // SHA-256 over every file's name, size and JSON header: identifies the weights without reading them.
  const std::string& fingerprint() const { return fingerprint_; }
  const std::vector<std::string>& files() const { return files_; }

 private:
  void check_shape(const TensorInfo& t, const std::vector<int64_t>& shape) const;  // and a float dtype
  std::vector<std::unique_ptr<SafetensorsFile>> open_;
  std::map<std::string, TensorInfo> tensors_;
  std::vector<std::string> files_;
  std::string fingerprint_;
};

}  // namespace layertap
