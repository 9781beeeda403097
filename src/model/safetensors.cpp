#include "model/safetensors.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/checked.hpp"
#include "core/digest.hpp"
#include "core/error.hpp"
#include "core/regular_file.hpp"
#include "core/failpoint.hpp"
#include "core/stop_request.hpp"
#include "core/text.hpp"
#include "model/json_fields.hpp"
#include "model/stored_window.hpp"

namespace layertap {

namespace fs = std::filesystem;
using nlohmann::json;

// One .safetensors file, open for pread: 8-byte little-endian header length, JSON header, then the
// data block that the header's data_offsets index into.
class SafetensorsFile {
 public:
  static constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the format's limit

  explicit SafetensorsFile(const std::string& path) : path_(path), file_(path, "weights file") {
    size_ = file_.size();
    LT_CHECK(size_ >= 8, "weights file '", path, "' is too small to be safetensors (", size_, " bytes)");
    uint64_t header_len = 0;
    LT_CHECK(::pread(file_.fd(), &header_len, 8, 0) == 8, "cannot read weights file '", path, "': ",
             std::strerror(errno));  // little-endian on every platform we build for
    LT_CHECK(header_len <= size_ - 8, "weights file '", path, "' has a header length ", header_len,
             " beyond its size ", size_);
    LT_CHECK(header_len <= kMaxHeaderBytes, "weights file '", path, "' has a header of ", header_len,
             " bytes; the safetensors format allows at most ", kMaxHeaderBytes);
    header_.resize(std::size_t(header_len));
    for (std::size_t done = 0; done < header_.size();) {
      const ssize_t n = ::pread(file_.fd(), header_.data() + done, header_.size() - done, off_t(8 + done));
      if (n < 0 && errno == EINTR) continue;
      LT_CHECK(n > 0, "cannot read the header of weights file '", path, "': ",
               n < 0 ? std::strerror(errno) : "the file ends inside it");
      done += std::size_t(n);
    }
    data_offset_ = 8 + header_len;
    data_size_ = size_ - 8 - std::size_t(header_len);
  }
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  // Adds every tensor of this file to `out`, enforcing the format's rules: unique names, known
  // dtypes, byte size = shape x dtype size (no overflow), and data_offsets that are sorted,
  // contiguous, non-overlapping and cover the data block exactly.
  void list(std::map<std::string, TensorInfo>& out) const {
    json h;
    std::set<std::string> names;
    std::string duplicate;
    try {
      // nlohmann keeps the last of two equal keys silently; the callback sees each top-level key.
      // A header nests 3 levels; deeper input is refused before recursive code could walk it.
      h = json::parse(header_, [&](int depth, json::parse_event_t event, json& parsed) {
        if (depth == 1 && event == json::parse_event_t::key && !names.insert(parsed.get<std::string>()).second)
          duplicate = parsed.get<std::string>();
        if ((event == json::parse_event_t::object_start || event == json::parse_event_t::array_start) && depth >= 8)
          LT_FAIL("weights file '", path_, "': the header nests JSON deeper than 8 levels");
        return true;
      });
    } catch (const json::exception& e) {
      LT_FAIL("weights file '", path_, "' has a malformed header: ", e.what());
    }
    LT_CHECK(duplicate.empty(), "weights file '", path_, "': tensor '", excerpt(duplicate),
             "' appears twice in the header");
    LT_CHECK(h.is_object(), "weights file '", path_, "': the header is not a JSON object");
    std::vector<std::pair<uint64_t, uint64_t>> spans;  // [begin, end) per tensor, for the layout check
    std::map<std::string, TensorInfo> mine;
    for (auto& [name, v] : h.items()) {
      if (name == "__metadata__") continue;
      try {
        TensorInfo t;
        t.name = name;
        t.file = path_;
        t.dtype = dtype_from_safetensors(v.at("dtype").get<std::string>());
        // Integers only: nlohmann converts a float such as 1e30 to an integer type with undefined
        // behaviour, so each element's type is checked before it is read.
        const json& entry = v;  // a lambda may not capture a structured binding (clang 14)
        const auto integers = [&entry](const char* key) -> const json& {
          const json& a = entry.at(key);
          LT_CHECK(a.is_array(), "'", key, "' is not an array");
          for (const json& e : a) LT_CHECK(e.is_number_integer(), "'", key, "' holds ", excerpt(e.dump()), ", not an integer");
          return a;
        };
        t.shape = integers("shape").get<std::vector<int64_t>>();
        const json& offsets = integers("data_offsets");
        for (const json& e : offsets) LT_CHECK(e.is_number_unsigned(), "'data_offsets' holds a negative offset");
        const auto off = offsets.get<std::vector<uint64_t>>();
        LT_CHECK(off.size() == 2 && off[0] <= off[1] && off[1] <= data_size_, "data_offsets out of the file");
        int64_t n = int64_t(dtype_size(t.dtype));
        for (int64_t d : t.shape) {
          LT_CHECK(d >= 0, "negative dimension");
          n = checked_mul(n, d, "the bytes its shape and dtype need");
        }
        LT_CHECK(uint64_t(n) == off[1] - off[0], "holds ", off[1] - off[0], " bytes, its shape and dtype need ", n);
        t.fd = file_.fd();
        t.offset = data_offset_ + off[0];
        spans.emplace_back(off[0], off[1]);
        mine.emplace(name, t);
      } catch (const Error& e) {
        LT_FAIL("weights file '", path_, "': tensor '", excerpt(name), "': ", e.what());
      } catch (const json::exception& e) {
        LT_FAIL("weights file '", path_, "': tensor '", excerpt(name), "': malformed entry: ", e.what());
      }
    }
    std::sort(spans.begin(), spans.end());
    uint64_t end = 0;
    for (const auto& [b, e] : spans) {
      LT_CHECK(b == end, "weights file '", path_, "': tensor data ", b < end ? "overlaps" : "leaves a gap", " at byte ",
               std::min(b, end), " of the data block (the format requires contiguous, non-overlapping tensors)");
      end = e;
    }
    LT_CHECK(end == data_size_, "weights file '", path_, "': the tensors cover ", end, " of the ", data_size_,
             " bytes after the header");
    for (auto& [name, t] : mine)
      LT_CHECK(out.emplace(name, t).second, "tensor '", name, "' appears in two files ('", out.at(name).file,
               "' and '", path_, "')");
  }

  const std::string& header() const { return header_; }
  std::size_t size() const { return size_; }

 private:
  std::string path_;
  RegularFile file_;
  std::size_t size_ = 0;
  uint64_t data_offset_ = 0;
  std::size_t data_size_ = 0;
  std::string header_;
};

std::vector<std::string> checkpoint_files(const std::string& model_dir) {
  const fs::path dir(model_dir);
  LT_CHECK(fs::is_directory(dir), "model directory '", model_dir, "' does not exist");
  const fs::path index = dir / "model.safetensors.index.json";
  const fs::path single = dir / "model.safetensors";
  if (!fs::exists(index)) {
    LT_CHECK(fs::exists(single), "model directory '", model_dir,
             "' has neither model.safetensors nor model.safetensors.index.json");
    return {single.string()};
  }
  const std::string text = read_regular_file(index.string(), "checkpoint index");
  json j = parse_json(text, index.string(), 8);
  LT_CHECK(j.is_object() && j.contains("weight_map") && j["weight_map"].is_object(), "'", index.string(), "' has no weight_map");
  std::set<std::string> names;
  for (auto& [tensor, file] : j["weight_map"].items()) {
    // Plain file names only: an entry must not lead out of the model directory.
    LT_CHECK(file.is_string() && !file.get<std::string>().empty(), "'", index.string(), "': tensor '", excerpt(tensor),
             "' maps to ", excerpt(file.dump()), ", not a file name");
    const std::string name = file.get<std::string>();
    LT_CHECK(name.find('/') == std::string::npos && name != "." && name != "..", "'", index.string(), "': tensor '",
             excerpt(tensor), "' maps to '", excerpt(name), "', which is not a plain file name inside the model directory");
    names.insert(name);
  }
  LT_CHECK(!names.empty(), "'", index.string(), "' has an empty weight_map: it names no tensor, so no safetensors file");
  std::vector<std::string> files;
  for (const std::string& f : names) files.push_back((dir / f).string());
  return files;
}

Checkpoint::Checkpoint(std::vector<std::string> files) : files_(std::move(files)) {
  LT_CHECK(!files_.empty(), "a checkpoint needs at least one safetensors file");
  Sha256 fp;
  for (const std::string& f : files_) {
    failpoint("checkpoint-open");
    stop_point("opening the checkpoint");
    open_.push_back(std::make_unique<SafetensorsFile>(f));
    open_.back()->list(tensors_);
    fp.update(fs::path(f).filename().string());
    fp.update(std::to_string(open_.back()->size()));
    fp.update(open_.back()->header());
  }
  fingerprint_ = fp.hex();
}

Checkpoint::~Checkpoint() = default;

bool Checkpoint::has(const std::string& name) const { return tensors_.count(name) != 0; }

const TensorInfo& Checkpoint::info(const std::string& name) const {
  auto it = tensors_.find(name);
  LT_CHECK(it != tensors_.end(), "tensor '", name, "' is missing from the checkpoint (",
           files_.size() == 1 ? files_[0] : cat(files_.size(), " safetensors files"), ")");
  return it->second;
}

std::size_t tensor_bytes(const TensorInfo& t) {
  std::size_t n = dtype_size(t.dtype);
  for (int64_t d : t.shape) n *= std::size_t(d);
  return n;
}

std::string shape_str(const std::vector<int64_t>& s) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) out += cat(i ? ", " : "", s[i]);
  return out + "]";
}

void Checkpoint::check_shape(const TensorInfo& t, const std::vector<int64_t>& shape) const {
  LT_CHECK(t.shape == shape, "tensor '", t.name, "' in '", t.file, "' has shape ", shape_str(t.shape),
           ", the config implies ", shape_str(shape));
  LT_CHECK(t.dtype == DType::F32 || t.dtype == DType::F16 || t.dtype == DType::BF16, "tensor '",
           t.name, "' in '", t.file, "' has dtype ", dtype_name(t.dtype),
           ", expected a floating-point type (float32, float16, bfloat16)");
}

std::vector<float> Checkpoint::read(const std::string& name, const std::vector<int64_t>& shape) const {
  if (shape.size() == 2) return read_window(name, shape, 0, shape[0], 0, shape[1]);
  const TensorInfo& t = info(name);
  check_shape(t, shape);
  const int64_t bytes = int64_t(tensor_bytes(t));
  return read_floats({&t, bytes, 0, 1, 0, bytes});  // one run of bytes
}

std::vector<std::byte> Checkpoint::read_bytes(const std::string& name) const {
  const TensorInfo& t = info(name);
  const int64_t bytes = int64_t(tensor_bytes(t));
  std::vector<std::byte> out(static_cast<std::size_t>(bytes));
  read_window_rows({&t, bytes, 0, 1, 0, bytes}, 0, 1, out.data());
  return out;
}

std::vector<float> Checkpoint::read_rows(const std::string& name, const std::vector<int64_t>& shape,
                                         int64_t row0, int64_t rows) const {
  LT_CHECK(shape.size() == 2, "tensor '", name, "': a row slice needs a 2-D shape, not ", shape_str(shape));
  return read_window(name, shape, row0, rows, 0, shape[1]);
}

std::vector<float> Checkpoint::read_cols(const std::string& name, const std::vector<int64_t>& shape,
                                         int64_t col0, int64_t cols) const {
  LT_CHECK(shape.size() == 2, "tensor '", name, "': a column slice needs a 2-D shape, not ", shape_str(shape));
  return read_window(name, shape, 0, shape[0], col0, cols);
}

std::vector<float> Checkpoint::read_window(const std::string& name, const std::vector<int64_t>& shape, int64_t row0,
                                           int64_t rows, int64_t col0, int64_t cols) const {
  const TensorInfo& t = info(name);
  check_shape(t, shape);
  LT_CHECK(shape.size() == 2 && row0 >= 0 && rows >= 0 && row0 + rows <= shape[0], "tensor '", name,
           "': row slice [", row0, ", ", row0 + rows, ") is outside ", shape_str(shape));
  LT_CHECK(col0 >= 0 && cols >= 0 && col0 + cols <= shape[1], "tensor '", name, "': column slice [", col0, ", ",
           col0 + cols, ") is outside ", shape_str(shape));
  return read_floats(float_window(t, row0, rows, col0, cols));
}

}  // namespace layertap
