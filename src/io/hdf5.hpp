// Thin RAII layer over the HDF5 C API. Every C call is checked once, where it is made; a failure
// becomes a layertap::Error naming the object and carrying HDF5's own error stack. HDF5's
// automatic printing of that stack to stderr is turned off (per thread: the library is built
// thread-safe, and each thread has its own error stack).
#pragma once
#include <hdf5.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace layertap::io::h5 {

// Turns off HDF5's automatic error printing for the calling thread. Cheap; call before using HDF5
// on a thread (the File constructors do).
void quiet_errors();

// The calling thread's HDF5 error stack as one line ("H5Dwrite: can't write data; ..."), cleared.
std::string take_error_stack();

// Returns `ret` when the call succeeded (HDF5 reports failure as a negative value); otherwise
// throws "HDF5 error: <what...>: <HDF5's error stack>". `what` is only formatted on failure.
template <typename T, typename... What>
T check(T ret, What&&... what) {
  if (ret < 0)
    throw Error(cat("HDF5 error: ", std::forward<What>(what)..., ": ", take_error_stack()));
  return ret;
}

// Owns one HDF5 identifier (file, dataset, dataspace, datatype, attribute or property list) and
// releases it with the matching H5*close.
class Id {
 public:
  using Closer = herr_t (*)(hid_t);
  Id() = default;
  Id(hid_t id, Closer closer) : id_(id), closer_(closer) {}
  ~Id() { reset(); }
  Id(Id&& o) noexcept : id_(o.id_), closer_(o.closer_) { o.id_ = H5I_INVALID_HID; }
  Id& operator=(Id&& o) noexcept;
  Id(const Id&) = delete;
  Id& operator=(const Id&) = delete;

  hid_t get() const { return id_; }
  explicit operator bool() const { return id_ >= 0; }
  // Closes now and throws if HDF5 reports an error (for a file this is where its metadata is
  // flushed, so a failure here must not pass silently). `what` names the object.
  void close(const std::string& what);
  void reset() noexcept;  // closes, ignoring errors (destructors, error paths)

 private:
  hid_t id_ = H5I_INVALID_HID;
  Closer closer_ = nullptr;
};

Id create_file(const std::filesystem::path& path);     // truncates an existing file
Id open_file_read(const std::filesystem::path& path);  // read-only

Id open_dataset(hid_t file, const std::string& name, const std::string& where);
Id dataset_space(hid_t dataset, const std::string& what);
Id dataset_type(hid_t dataset, const std::string& what);
std::vector<int64_t> dataset_dims(hid_t dataset, const std::string& what);

// The bf16 storage type: a 2-byte little-endian IEEE-like float with sign bit 15, 8 exponent bits
// at bit 7 (bias 127) and 7 mantissa bits at bit 0, i.e. the top half of a float32. HDF5 converts
// it to float32 on read; reading it with this same type returns the raw bits.
Id bf16_type();
// True when `type` is a float type with exactly bf16's layout (as written by bf16_type()).
bool is_bf16_type(hid_t type);
// A short name for a dataset's stored type: "bfloat16", "float32", "int32", "uint8", "int64", ...
std::string describe_type(hid_t type);

// Root/object attributes. Strings are variable-length UTF-8 (h5py reads them as str).
void write_attr(hid_t obj, const std::string& name, int64_t value);
void write_attr(hid_t obj, const std::string& name, const std::string& value);
void write_attr(hid_t obj, const std::string& name, const std::vector<int64_t>& values);
void write_attr(hid_t obj, const std::string& name, const std::vector<std::string>& values);
void write_attr(hid_t obj, const std::string& name, const std::vector<double>& values);

bool has_attr(hid_t obj, const std::string& name);

int64_t read_attr_int(hid_t obj, const std::string& name);
std::string read_attr_string(hid_t obj, const std::string& name);
std::vector<int64_t> read_attr_ints(hid_t obj, const std::string& name);
std::vector<std::string> read_attr_strings(hid_t obj, const std::string& name);
std::vector<double> read_attr_doubles(hid_t obj, const std::string& name);

// The filter pipeline of a dataset, in write order: "shuffle", "deflate", "lz4", "zstd", or
// "filter <id>" for others; empty when the dataset is not filtered.
std::vector<std::string> dataset_filters(hid_t dataset, const std::string& what);

}  // namespace layertap::io::h5
