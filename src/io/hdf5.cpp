#include "io/hdf5.hpp"

#include <mutex>

#include <algorithm>
#include <ostream>

namespace layertap::io::h5 {
namespace {

// Streams "'<file>:<object path>'" for an HDF5 id; only evaluated when an error is formatted.
struct NameOf {
  hid_t id;
};

std::ostream& operator<<(std::ostream& os, NameOf n) {
  const auto read = [&](auto fn) {
    const ssize_t len = fn(n.id, nullptr, 0);
    if (len <= 0) return std::string();
    std::string s(std::size_t(len) + 1, '\0');
    fn(n.id, s.data(), s.size());
    s.resize(std::size_t(len));
    return s;
  };
  const std::string file = read(H5Fget_name);
  const std::string path = read(H5Iget_name);
  return os << "'" << (file.empty() ? "?" : file) << ":" << (path.empty() ? "/" : path) << "'";
}

herr_t collect_error(unsigned n, const H5E_error2_t* e, void* out) {
  auto& s = *static_cast<std::string*>(out);
  if (n > 0) s += "; ";
  std::string desc = e->desc ? e->desc : "(no description)";
  std::replace(desc.begin(), desc.end(), '\n', ' ');  // HDF5 embeds newlines in some messages
  s += cat(e->func_name ? e->func_name : "?", ": ", desc);
  return 0;
}

Id vlen_string_type() {
  Id t(check(H5Tcopy(H5T_C_S1), "copying the string type"), H5Tclose);
  check(H5Tset_size(t.get(), H5T_VARIABLE), "making a variable-length string type");
  check(H5Tset_cset(t.get(), H5T_CSET_UTF8), "setting a string type to UTF-8");
  return t;
}

Id simple_space(int64_t n) {
  const hsize_t dims[1] = {hsize_t(n)};
  return Id(check(H5Screate_simple(1, dims, nullptr), "creating a dataspace of ", n), H5Sclose);
}

Id scalar_space() {
  return Id(check(H5Screate(H5S_SCALAR), "creating a scalar dataspace"), H5Sclose);
}

void write_attr_raw(hid_t obj, const std::string& name, hid_t type, hid_t space, const void* data) {
  Id attr(check(H5Acreate2(obj, name.c_str(), type, space, H5P_DEFAULT, H5P_DEFAULT),
                "creating attribute '", name, "' on ", NameOf{obj}),
          H5Aclose);
  check(H5Awrite(attr.get(), type, data), "writing attribute '", name, "' on ", NameOf{obj});
}

Id open_attr(hid_t obj, const std::string& name) {
  return Id(check(H5Aopen(obj, name.c_str(), H5P_DEFAULT), "opening attribute '", name, "' of ",
                  NameOf{obj}),
            H5Aclose);
}

// Number of elements of an attribute: 1 for a scalar, n for a 1-D [n] array.
int64_t attr_elements(hid_t attr, hid_t obj, const std::string& name) {
  Id space(check(H5Aget_space(attr), "dataspace of attribute '", name, "' of ", NameOf{obj}),
           H5Sclose);
  const hssize_t n = check(H5Sget_simple_extent_npoints(space.get()), "size of attribute '",
                           name, "' of ", NameOf{obj});
  return int64_t(n);
}

}  // namespace

void quiet_errors() {
  // A file whose close failed (disk full) stays half-open inside HDF5, and the library's own
  // clean-up at process exit then crashes on it. Every file layertap keeps is closed explicitly
  // and an abandoned one is deleted, so that clean-up has nothing to do: skip it.
  static std::once_flag no_atexit;
  std::call_once(no_atexit, [] { H5dont_atexit(); });
  thread_local bool quiet = false;
  if (quiet) return;
  H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  quiet = true;
}

std::string take_error_stack() {
  std::string s;
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, collect_error, &s);
  H5Eclear2(H5E_DEFAULT);
  return s.empty() ? "(no HDF5 error stack)" : s;
}

Id& Id::operator=(Id&& o) noexcept {
  if (this != &o) {
    reset();
    id_ = o.id_;
    closer_ = o.closer_;
    o.id_ = H5I_INVALID_HID;
  }
  return *this;
}

void Id::close(const std::string& what) {
  if (id_ < 0) return;
  const hid_t id = id_;
  id_ = H5I_INVALID_HID;
  check(closer_(id), "closing ", what);
}

void Id::reset() noexcept {
  if (id_ >= 0) {
    closer_(id_);
    H5Eclear2(H5E_DEFAULT);
  }
  id_ = H5I_INVALID_HID;
}

Id create_file(const std::filesystem::path& path) {
  quiet_errors();
  return Id(check(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT),
                  "creating file '", path.string(), "'"),
            H5Fclose);
}

Id open_file_read(const std::filesystem::path& path) {
  quiet_errors();
  return Id(check(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), "opening file '",
                  path.string(), "'"),
            H5Fclose);
}

Id open_dataset(hid_t file, const std::string& name, const std::string& where) {
  return Id(check(H5Dopen2(file, name.c_str(), H5P_DEFAULT), "opening dataset '", name, "' in ",
                  where),
            H5Dclose);
}

Id dataset_space(hid_t dataset, const std::string& what) {
  return Id(check(H5Dget_space(dataset), "dataspace of ", what), H5Sclose);
}

Id dataset_type(hid_t dataset, const std::string& what) {
  return Id(check(H5Dget_type(dataset), "datatype of ", what), H5Tclose);
}

std::vector<int64_t> dataset_dims(hid_t dataset, const std::string& what) {
  Id space = dataset_space(dataset, what);
  const int rank = check(H5Sget_simple_extent_ndims(space.get()), "rank of ", what);
  std::vector<hsize_t> dims(std::size_t(rank), 0);
  check(H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr), "shape of ", what);
  return std::vector<int64_t>(dims.begin(), dims.end());
}

// The order matters: the fields must fit the precision, and the precision the size, at each step.
Id bf16_type() {
  Id t(check(H5Tcopy(H5T_IEEE_F32LE), "copying IEEE_F32LE for bf16"), H5Tclose);
  check(H5Tset_fields(t.get(), 15, 7, 8, 0, 7), "setting bf16 fields");
  check(H5Tset_offset(t.get(), 0), "setting bf16 offset");
  check(H5Tset_precision(t.get(), 16), "setting bf16 precision");
  check(H5Tset_size(t.get(), 2), "setting bf16 size");
  check(H5Tset_ebias(t.get(), 127), "setting bf16 exponent bias");
  return t;
}

bool is_bf16_type(hid_t type) {
  if (H5Tget_class(type) != H5T_FLOAT || H5Tget_size(type) != 2) return false;
  size_t spos = 0, epos = 0, esize = 0, mpos = 0, msize = 0;
  check(H5Tget_fields(type, &spos, &epos, &esize, &mpos, &msize), "reading float fields");
  return spos == 15 && epos == 7 && esize == 8 && mpos == 0 && msize == 7 &&
         H5Tget_ebias(type) == 127 && H5Tget_order(type) == H5T_ORDER_LE;
}

std::string describe_type(hid_t type) {
  const std::size_t bits = 8 * H5Tget_size(type);
  switch (H5Tget_class(type)) {
    case H5T_FLOAT:
      return is_bf16_type(type) ? "bfloat16" : cat("float", bits);
    case H5T_INTEGER:
      return cat(H5Tget_sign(type) == H5T_SGN_NONE ? "uint" : "int", bits);
    case H5T_STRING:
      return "string";
    default:
      return cat("other (", bits, "-bit)");
  }
}

void write_attr(hid_t obj, const std::string& name, int64_t value) {
  write_attr_raw(obj, name, H5T_NATIVE_INT64, scalar_space().get(), &value);
}

void write_attr(hid_t obj, const std::string& name, const std::string& value) {
  const char* p = value.c_str();
  write_attr_raw(obj, name, vlen_string_type().get(), scalar_space().get(), &p);
}

void write_attr(hid_t obj, const std::string& name, const std::vector<int64_t>& values) {
  write_attr_raw(obj, name, H5T_NATIVE_INT64, simple_space(int64_t(values.size())).get(),
                 values.data());
}

void write_attr(hid_t obj, const std::string& name, const std::vector<std::string>& values) {
  std::vector<const char*> ptrs;  // [n] views into `values`
  ptrs.reserve(values.size());
  for (const auto& v : values) ptrs.push_back(v.c_str());
  write_attr_raw(obj, name, vlen_string_type().get(), simple_space(int64_t(values.size())).get(),
                 ptrs.data());
}

void write_attr(hid_t obj, const std::string& name, const std::vector<double>& values) {
  write_attr_raw(obj, name, H5T_NATIVE_DOUBLE, simple_space(int64_t(values.size())).get(), values.data());
}

bool has_attr(hid_t obj, const std::string& name) {
  return check(H5Aexists(obj, name.c_str()), "looking for attribute '", name, "' on ", NameOf{obj}) > 0;
}

std::vector<double> read_attr_doubles(hid_t obj, const std::string& name) {
  Id attr = open_attr(obj, name);
  Id stored(check(H5Aget_type(attr.get()), "type of attribute '", name, "'"), H5Tclose);
  LT_CHECK(H5Tget_class(stored.get()) == H5T_FLOAT || H5Tget_class(stored.get()) == H5T_INTEGER, "attribute '",
           name, "' of ", NameOf{obj}, " is not numeric");
  std::vector<double> v(std::size_t(attr_elements(attr.get(), obj, name)));
  check(H5Aread(attr.get(), H5T_NATIVE_DOUBLE, v.data()), "reading attribute '", name, "' of ", NameOf{obj},
        " as numbers");
  return v;
}

std::vector<std::string> dataset_filters(hid_t dataset, const std::string& what) {
  Id dcpl(check(H5Dget_create_plist(dataset), "creation properties of ", what), H5Pclose);
  const int n = check(H5Pget_nfilters(dcpl.get()), "filters of ", what);
  std::vector<std::string> names;
  for (int i = 0; i < n; ++i) {
    unsigned flags = 0, config = 0;
    std::size_t nelmts = 0;
    const H5Z_filter_t id = check(H5Pget_filter2(dcpl.get(), unsigned(i), &flags, &nelmts, nullptr, 0, nullptr, &config),
                                  "filter ", i, " of ", what);
    switch (id) {
      case H5Z_FILTER_SHUFFLE: names.emplace_back("shuffle"); break;
      case H5Z_FILTER_DEFLATE: names.emplace_back("deflate"); break;
      case 32004: names.emplace_back("lz4"); break;
      case 32015: names.emplace_back("zstd"); break;
      default: names.push_back(cat("filter ", id));
    }
  }
  return names;
}

int64_t read_attr_int(hid_t obj, const std::string& name) {
  Id attr = open_attr(obj, name);
  const int64_t n = attr_elements(attr.get(), obj, name);
  LT_CHECK(n == 1, "attribute '", name, "' of ", NameOf{obj}, " holds ", n,
           " values, expected one integer");
  int64_t v = 0;
  check(H5Aread(attr.get(), H5T_NATIVE_INT64, &v), "reading attribute '", name, "' of ",
        NameOf{obj}, " as an integer");
  return v;
}

std::vector<int64_t> read_attr_ints(hid_t obj, const std::string& name) {
  Id attr = open_attr(obj, name);
  std::vector<int64_t> v(std::size_t(attr_elements(attr.get(), obj, name)));
  check(H5Aread(attr.get(), H5T_NATIVE_INT64, v.data()), "reading attribute '", name, "' of ",
        NameOf{obj}, " as integers");
  return v;
}

std::vector<std::string> read_attr_strings(hid_t obj, const std::string& name) {
  Id attr = open_attr(obj, name);
  Id stored(check(H5Aget_type(attr.get()), "type of attribute '", name, "'"), H5Tclose);
  LT_CHECK(H5Tget_class(stored.get()) == H5T_STRING && H5Tis_variable_str(stored.get()) > 0,
           "attribute '", name, "' of ", NameOf{obj}, " is not a variable-length string");
  Id type = vlen_string_type();
  std::vector<char*> ptrs(std::size_t(attr_elements(attr.get(), obj, name)), nullptr);
  check(H5Aread(attr.get(), type.get(), ptrs.data()), "reading attribute '", name, "' of ",
        NameOf{obj}, " as strings");
  std::vector<std::string> out;
  out.reserve(ptrs.size());
  for (char* p : ptrs) out.emplace_back(p ? p : "");
  Id space(check(H5Aget_space(attr.get()), "dataspace of attribute '", name, "'"), H5Sclose);
  check(H5Dvlen_reclaim(type.get(), space.get(), H5P_DEFAULT, ptrs.data()),
        "freeing attribute '", name, "'");
  return out;
}

std::string read_attr_string(hid_t obj, const std::string& name) {
  auto v = read_attr_strings(obj, name);
  LT_CHECK(v.size() == 1, "attribute '", name, "' of ", NameOf{obj}, " holds ", v.size(),
           " strings, expected one");
  return std::move(v.front());
}

}  // namespace layertap::io::h5
