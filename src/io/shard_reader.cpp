#include "io/shard_reader.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "io/compression.hpp"
#include "io/hdf5.hpp"

namespace layertap::io {

std::string format_shape(const std::vector<int64_t>& dims) {
  std::string s = "[";
  for (std::size_t i = 0; i < dims.size(); ++i) s += cat(i ? ", " : "", dims[i]);
  return s + "]";
}

// Declared sizes a shard of N bytes can plausibly hold: no lossless filter compresses activations
// 1024x, so a /hidden_states claiming more than N * 1024 bytes (or 1-D datasets longer than that
// many tokens) is damaged or hostile, and is refused before anything is allocated for it.
constexpr int64_t kMaxExpansion = 1024;
constexpr int64_t kMaxDim = int64_t(1) << 24;  // capture points and hidden size (keeps products in int64)

struct ShardReader::Impl {
  std::string path;
  int64_t file_bytes = 0;
  h5::Id file;
  int64_t format_version = 0;
  OutputMeta meta;

  std::string where(const std::string& dataset) const {
    return cat("/", dataset, " of '", path, "'");
  }

  std::vector<int64_t> dims(const std::string& name) const {
    h5::Id ds = h5::open_dataset(file.get(), name, cat("'", path, "'"));
    return h5::dataset_dims(ds.get(), where(name));
  }

  // Reads a whole 1-D dataset as `mem_type` (HDF5 converts from the stored integer type).
  template <typename T>
  std::vector<T> read_1d(const std::string& name, hid_t mem_type) const {
    h5::Id ds = h5::open_dataset(file.get(), name, cat("'", path, "'"));
    const auto d = h5::dataset_dims(ds.get(), where(name));
    LT_CHECK(d.size() == 1, where(name), " has rank ", d.size(), ", expected 1");
    check_plausible(d[0], where(name));
    std::vector<T> out(static_cast<std::size_t>(d[0]));
    if (!out.empty())
      h5::check(H5Dread(ds.get(), mem_type, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()),
                "reading ", where(name));
    return out;
  }

  void check_plausible(int64_t elements, const std::string& what) const {
    LT_CHECK(elements <= file_bytes * kMaxExpansion, what, " declares ", elements, " elements, more than a file of ",
             file_bytes, " bytes can hold: the shard is damaged");
  }
};

ShardReader::ShardReader(const std::filesystem::path& file) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  register_filters();  // compressed shards decode without plugins
  m.path = file.string();
  m.file = h5::open_file_read(file);
  m.file_bytes = int64_t(std::filesystem::file_size(file));
  const hid_t f = m.file.get();
  m.format_version = h5::read_attr_int(f, "format_version");
  OutputMeta& meta = m.meta;
  meta.point_specs = h5::read_attr_strings(f, "capture_points");
  meta.point_ids = h5::read_attr_ints(f, "capture_point_ids");
  meta.capture_request = h5::read_attr_string(f, "capture_request");
  meta.convention = h5::read_attr_string(f, "capture_convention");
  meta.num_layers = h5::read_attr_int(f, "num_layers");
  meta.hidden = h5::read_attr_int(f, "hidden_size");
  meta.dtype = parse_storage_dtype(h5::read_attr_string(f, "dtype"));
  // Shards written before compression existed have no attribute: they are not compressed.
  if (h5::has_attr(f, "compression")) meta.compression = parse_compression(h5::read_attr_string(f, "compression"));
  meta.architecture = h5::read_attr_string(f, "architecture");
  meta.config_sha256 = h5::read_attr_string(f, "config_sha256");
  meta.weights_fingerprint = h5::read_attr_string(f, "weights_fingerprint");
}

ShardReader::~ShardReader() = default;

int64_t ShardReader::format_version() const { return impl_->format_version; }
const OutputMeta& ShardReader::meta() const { return impl_->meta; }
std::vector<int64_t> ShardReader::hidden_shape() const { return impl_->dims("hidden_states"); }

std::string ShardReader::hidden_dtype() const {
  h5::Id ds = h5::open_dataset(impl_->file.get(), "hidden_states", cat("'", impl_->path, "'"));
  h5::Id type = h5::dataset_type(ds.get(), impl_->where("hidden_states"));
  const std::string stored = h5::describe_type(type.get());
  return stored == "uint8" && impl_->meta.dtype == DType::F8_E4M3 ? std::string(dtype_name(DType::F8_E4M3)) : stored;
}

std::vector<std::string> ShardReader::hidden_filters() const {
  h5::Id ds = h5::open_dataset(impl_->file.get(), "hidden_states", cat("'", impl_->path, "'"));
  return h5::dataset_filters(ds.get(), impl_->where("hidden_states"));
}

std::vector<Fp8Fidelity> ShardReader::fp8_fidelity() const {
  const Impl& m = *impl_;
  if (m.meta.dtype != DType::F8_E4M3) return {};
  h5::Id ds = h5::open_dataset(m.file.get(), "hidden_scales", cat("'", m.path, "'"));
  const std::size_t P = std::size_t(m.meta.num_points());
  std::vector<Fp8Fidelity> out(P);
  const auto ints = [&](const char* name, int64_t Fp8Fidelity::*field) {
    const auto v = h5::read_attr_ints(ds.get(), cat("error_", name));
    LT_CHECK(v.size() == P, m.where("hidden_scales"), " attribute error_", name, " has ", v.size(), " values for ", P,
             " points");
    for (std::size_t p = 0; p < P; ++p) out[p].*field = v[p];
  };
  const auto doubles = [&](const char* name, double Fp8Fidelity::*field) {
    const auto v = h5::read_attr_doubles(ds.get(), cat("error_", name));
    LT_CHECK(v.size() == P, m.where("hidden_scales"), " attribute error_", name, " has ", v.size(), " values for ", P,
             " points");
    for (std::size_t p = 0; p < P; ++p) out[p].*field = v[p];
  };
  for (const auto& [name, field] : kFp8Counts) ints(name, field);
  for (const auto& [name, field] : kFp8Sums) doubles(name, field);
  return out;
}

int64_t ShardReader::num_tokens() const { return impl_->dims("input_ids").at(0); }
int64_t ShardReader::num_samples() const { return impl_->dims("sample_index").at(0); }

std::vector<int64_t> ShardReader::sample_offsets() const {
  return impl_->read_1d<int64_t>("sample_offsets", H5T_NATIVE_INT64);
}
std::vector<int64_t> ShardReader::sample_index() const {
  return impl_->read_1d<int64_t>("sample_index", H5T_NATIVE_INT64);
}
std::vector<int32_t> ShardReader::input_ids() const {
  return impl_->read_1d<int32_t>("input_ids", H5T_NATIVE_INT32);
}
std::vector<uint8_t> ShardReader::loss_mask() const {
  return impl_->read_1d<uint8_t>("loss_mask", H5T_NATIVE_UINT8);
}

std::vector<float> ShardReader::hidden_states(int64_t t0, int64_t t1) const {
  const Impl& m = *impl_;
  const std::string what = m.where("hidden_states");
  h5::Id ds = h5::open_dataset(m.file.get(), "hidden_states", cat("'", m.path, "'"));
  const auto d = h5::dataset_dims(ds.get(), what);
  LT_CHECK(d.size() == 3, what, " has rank ", d.size(), ", expected 3 [T, P, H]");
  LT_CHECK(0 <= t0 && t0 <= t1 && t1 <= d[0], "rows [", t0, ", ", t1, ") are outside ", what,
           " with ", d[0], " rows");
  LT_CHECK(d[1] <= kMaxDim && d[2] <= kMaxDim, what, " has dims ", format_shape(d), " beyond ", kMaxDim);
  m.check_plausible((t1 - t0) * d[1] * d[2], what);
  std::vector<float> out(std::size_t((t1 - t0) * d[1] * d[2]));  // [t1-t0, P, H]
  if (out.empty()) return out;
  // Rows [t0, t1) of a dataset [T, tail...] into `dst` as `mem_type`.
  const auto read_rows = [&](hid_t dataset, const std::string& name, hid_t mem_type, std::vector<hsize_t> count,
                             void* dst) {
    std::vector<hsize_t> start(count.size(), 0);
    start[0] = hsize_t(t0);
    h5::Id file_space = h5::dataset_space(dataset, name);
    h5::check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
              "selecting rows ", t0, "..", t1, " of ", name);
    h5::Id mem_space(h5::check(H5Screate_simple(int(count.size()), count.data(), nullptr), "memory space for ", name),
                     H5Sclose);
    h5::check(H5Dread(dataset, mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, dst), "reading rows ", t0,
              "..", t1, " of ", name);
  };
  const std::vector<hsize_t> count{hsize_t(t1 - t0), hsize_t(d[1]), hsize_t(d[2])};
  if (m.meta.dtype != DType::F8_E4M3) {
    read_rows(ds.get(), what, H5T_NATIVE_FLOAT, count, out.data());  // HDF5 converts bf16 to float32
    return out;
  }
  // float8: uint8 codes [n, P, H] and float32 scales [n, P].
  const std::string scales_what = m.where("hidden_scales");
  h5::Id scales = h5::open_dataset(m.file.get(), "hidden_scales", cat("'", m.path, "'"));
  const auto sd = h5::dataset_dims(scales.get(), scales_what);
  LT_CHECK(sd.size() == 2 && sd[0] == d[0] && sd[1] == d[1], scales_what, " has shape ", format_shape(sd),
           ", expected [T, P] = ", format_shape({d[0], d[1]}));
  h5::Id type = h5::dataset_type(ds.get(), what);
  LT_CHECK(H5Tget_class(type.get()) == H5T_INTEGER && H5Tget_size(type.get()) == 1, what,
           " of a float8 shard is stored as ", h5::describe_type(type.get()), ", expected uint8 codes");
  std::vector<uint8_t> codes(out.size());
  std::vector<float> row_scales(std::size_t((t1 - t0) * d[1]));
  read_rows(ds.get(), what, H5T_NATIVE_UINT8, count, codes.data());
  read_rows(scales.get(), scales_what, H5T_NATIVE_FLOAT, {count[0], count[1]}, row_scales.data());
  dequantize_fp8_rows(codes.data(), row_scales.data(), t1 - t0, d[1], d[2], out.data());
  return out;
}

std::vector<std::string> ShardReader::structure_problems() const {
  const OutputMeta& meta = impl_->meta;
  std::vector<std::string> problems;
  // Dimensions first, which allocate nothing: ranks, and sizes this file can hold.
  const auto shape = hidden_shape();
  const auto ids = impl_->dims("input_ids"), mask = impl_->dims("loss_mask");
  const auto index = impl_->dims("sample_index"), offs = impl_->dims("sample_offsets");
  for (const auto& [name, d] : {std::pair{"input_ids", ids}, {"loss_mask", mask}, {"sample_index", index},
                                {"sample_offsets", offs}})
    if (d.size() != 1) problems.push_back(cat("/", name, " has rank ", d.size(), ", expected 1"));
  if (shape.size() != 3) problems.push_back(cat("/hidden_states has rank ", shape.size(), ", expected 3 [T, P, H]"));
  if (!problems.empty()) return problems;
  const int64_t T = ids[0], S = index[0];
  const int64_t most = impl_->file_bytes * kMaxExpansion;
  const auto fits = [&](int64_t n) { return n >= 0 && n <= most; };
  const bool plausible = fits(T) && fits(mask[0]) && fits(S) && fits(offs[0]) && fits(shape[0]) &&
                         shape[1] >= 0 && shape[1] <= kMaxDim && shape[2] >= 0 && shape[2] <= kMaxDim &&
                         shape[0] <= most / std::max<int64_t>(1, shape[1] * shape[2]);
  if (!plausible) {
    problems.push_back(cat("declared sizes (/hidden_states ", format_shape(shape), ", ", T, " tokens, ", offs[0],
                           " sample offsets) are more than a file of ", impl_->file_bytes, " bytes can hold"));
    return problems;
  }
  const std::vector<int64_t> expected{T, meta.num_points(), meta.hidden};
  if (shape != expected)
    problems.push_back(cat("/hidden_states has shape ", format_shape(shape),
                           ", expected [T, P, H] = ", format_shape(expected),
                           " from /input_ids and the attributes"));
  if (mask[0] != T) problems.push_back(cat("/loss_mask has ", mask[0], " entries for ", T, " tokens"));
  if (meta.dtype == DType::F8_E4M3) {
    const std::vector<int64_t> want_scales{T, meta.num_points()};
    if (H5Lexists(impl_->file.get(), "hidden_scales", H5P_DEFAULT) <= 0)
      problems.emplace_back("float8 shard without /hidden_scales");
    else if (const auto sd = impl_->dims("hidden_scales"); sd != want_scales)
      problems.push_back(cat("/hidden_scales has shape ", format_shape(sd), ", expected [T, P] = ",
                             format_shape(want_scales)));
    if (const std::string stored = hidden_dtype(); stored != dtype_name(DType::F8_E4M3))
      problems.push_back(cat("/hidden_states of a float8 shard is stored as ", stored, ", expected uint8 codes"));
  }
  if (int64_t(meta.point_specs.size()) != meta.num_points())
    problems.push_back(cat("attribute capture_points has ", meta.point_specs.size(),
                           " names for ", meta.num_points(), " capture_point_ids"));
  for (int64_t id : meta.point_ids)
    if (id < 0 || id > meta.num_layers + 1)
      problems.push_back(cat("capture point id ", id, " is outside [0, ", meta.num_layers + 1, "]"));
  const auto offsets = sample_offsets();
  if (int64_t(offsets.size()) != S + 1) {  // also: more /sample_index entries than offsets
    problems.push_back(cat("/sample_offsets has ", offsets.size(), " entries for ", S,
                           " samples (expected ", S + 1, ")"));
    return problems;
  }
  if (offsets.front() != 0 || offsets.back() != T)
    problems.push_back(cat("/sample_offsets spans [", offsets.front(), ", ", offsets.back(),
                           "], tokens are [0, ", T, "]"));
  for (int64_t s = 0; s < S; ++s)
    if (offsets[s + 1] <= offsets[s]) {
      problems.push_back(cat("/sample_offsets is not increasing at sample ", s, " (", offsets[s],
                             " -> ", offsets[s + 1], ")"));
      break;
    }
  return problems;
}

}  // namespace layertap::io
