// Test helper: safetensors files as a map of raw tensors, read from a fixture and written back
// (possibly damaged: tensors dropped, reshaped, retyped or overwritten), so loader tests need no
// Python. Header-only; not a test file itself.
#pragma once
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "model/safetensors.hpp"

namespace layertap::test_io {

namespace fs = std::filesystem;

struct RawTensor {
  std::string dtype;  // safetensors spelling: "F32", "BF16", "F8_E4M3", "I32", "I64", "U8", ...
  std::vector<int64_t> shape;
  std::string bytes;
};
using RawTensors = std::map<std::string, RawTensor>;

template <typename T>
RawTensor raw(const std::string& dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  RawTensor t{dtype, std::move(shape), std::string(values.size() * sizeof(T), '\0')};
  if (!values.empty()) std::memcpy(t.bytes.data(), values.data(), t.bytes.size());
  return t;
}

inline RawTensors read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path.string());
  uint64_t n = 0;
  in.read(reinterpret_cast<char*>(&n), 8);
  std::string header(n, '\0');
  in.read(header.data(), std::streamsize(n));
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const nlohmann::json h = nlohmann::json::parse(header);
  RawTensors out;
  for (const auto& [name, v] : h.items()) {
    if (name == "__metadata__") continue;
    const auto begin = v["data_offsets"][0].get<std::size_t>(), end = v["data_offsets"][1].get<std::size_t>();
    out[name] = RawTensor{v["dtype"].get<std::string>(), v["shape"].get<std::vector<int64_t>>(),
                          data.substr(begin, end - begin)};
  }
  return out;
}

// Every tensor of a model directory (all shards merged).
inline RawTensors read_dir(const fs::path& dir) {
  RawTensors all;
  for (const std::string& file : checkpoint_files(dir.string())) all.merge(read_file(file));
  return all;
}

inline void write_file(const fs::path& path, const RawTensors& tensors) {
  nlohmann::json h = nlohmann::json::object();
  std::size_t offset = 0;
  for (const auto& [name, t] : tensors) {
    h[name] = {{"dtype", t.dtype}, {"shape", t.shape}, {"data_offsets", {offset, offset + t.bytes.size()}}};
    offset += t.bytes.size();
  }
  h["__metadata__"] = {{"format", "pt"}};
  const std::string header = h.dump();
  const uint64_t n = header.size();
  fs::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(header.data(), std::streamsize(n));
  for (const auto& [name, t] : tensors) out.write(t.bytes.data(), std::streamsize(t.bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path.string());
}

// Makes a tensor unreadable as a weight while keeping the file valid: its bytes become a U8 vector.
inline void make_opaque(RawTensor& t) {
  t.dtype = "U8";
  t.shape = {int64_t(t.bytes.size())};
}

}  // namespace layertap::test_io
