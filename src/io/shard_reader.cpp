#include "io/shard_reader.hpp"

#include <algorithm>
#include <cstring>
#include <map>

#include "core/dtype.hpp"
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

namespace {

constexpr const char* kIndexDatasets[] = {"input_ids", "loss_mask", "sample_index", "sample_offsets"};

// Every dataset's data lies in the shard itself: an external link, external storage or a virtual
// dataset would make a reader (and the shard's checksum) vouch for the bytes of another file.
// The index datasets are integers (a float /input_ids would be converted silently). A missing or
// non-dataset name is left to the later checks, which name it.
void check_self_contained(hid_t file, const std::string& path) {
  const auto check_one = [&](const char* name, bool integer) {
    if (H5Lexists(file, name, H5P_DEFAULT) <= 0) return;
    H5L_info_t link;
    h5::check(H5Lget_info(file, name, &link, H5P_DEFAULT), "link /", name, " of '", path, "'");
    LT_CHECK(link.type != H5L_TYPE_EXTERNAL, "'", path, "': /", name,
             " is an external link to another file, expected a dataset stored in the shard");
    if (const hid_t object = H5Oopen(file, name, H5P_DEFAULT); object >= 0) {
      const bool dataset = H5Iget_type(object) == H5I_DATASET;
      H5Oclose(object);
      if (!dataset) return;
    } else {
      return;
    }
    const std::string what = cat("'", path, "':/", name);
    h5::Id ds = h5::open_dataset(file, name, cat("'", path, "'"));
    h5::Id dcpl(h5::check(H5Dget_create_plist(ds.get()), "creation properties of ", what), H5Pclose);
    LT_CHECK(H5Pget_external_count(dcpl.get()) == 0 && H5Pget_layout(dcpl.get()) != H5D_VIRTUAL, what,
             " keeps its data outside the shard (external storage or a virtual dataset), expected it stored in the "
             "file");
    if (!integer) return;
    h5::Id type = h5::dataset_type(ds.get(), what);
    LT_CHECK(H5Tget_class(type.get()) == H5T_INTEGER, what, " is stored as ", h5::describe_type(type.get()),
             ", expected integers");
  };
  check_one("hidden_states", false);
  if (H5Lexists(file, "hidden_scales", H5P_DEFAULT) > 0) check_one("hidden_scales", false);
  for (const char* name : kIndexDatasets) check_one(name, true);
  if (H5Lexists(file, "routed_experts", H5P_DEFAULT) > 0) check_one("routed_experts", true);
}

// The filters of a dataset's creation property list, in write order.
std::vector<ChunkFilter> dataset_pipeline(hid_t dataset, const std::string& what) {
  h5::Id dcpl(h5::check(H5Dget_create_plist(dataset), "creation properties of ", what), H5Pclose);
  const int n = h5::check(H5Pget_nfilters(dcpl.get()), "filters of ", what);
  std::vector<ChunkFilter> pipeline;
  for (int i = 0; i < n; ++i) {
    ChunkFilter f;
    unsigned values[8] = {};
    std::size_t count = 8;
    unsigned config = 0;
    f.id = int(h5::check(H5Pget_filter2(dcpl.get(), unsigned(i), &f.flags, &count, values, 0, nullptr, &config),
                         "filter ", i, " of ", what));
    f.cd_values.assign(values, values + std::min<std::size_t>(count, 8));
    pipeline.push_back(std::move(f));
  }
  return pipeline;
}

}  // namespace

struct ShardReader::Impl {
  std::string path;
  int64_t file_bytes = 0;
  h5::Id file;
  int64_t format_version = 0;
  OutputMeta meta;

  // One dataset as it is read: its layout and, when filtered, the last chunk decoded.
  struct Column {
    std::string name, what;
    h5::Id ds, type;
    std::vector<int64_t> dims;
    std::size_t element = 0;            // bytes of one stored value
    std::vector<ChunkFilter> pipeline;  // empty: unfiltered, HDF5 reads it (no decoder runs)
    int64_t chunk_rows = 0;             // filtered: rows per chunk
    std::size_t row_elements = 0;       // values per row (the product of the trailing dims)
    std::size_t chunk_bytes = 0;        // filtered: decoded bytes of every chunk
    int64_t cached = -1;                // the chunk `data` holds
    std::vector<std::byte> data, stored, scratch;
    std::map<int64_t, std::string> failed;  // chunk -> why it cannot be decoded
  };
  mutable std::map<std::string, std::unique_ptr<Column>> columns;

  std::string where(const std::string& dataset) const {
    return cat("/", dataset, " of '", path, "'");
  }

  std::vector<int64_t> dims(const std::string& name) const {
    h5::Id ds = h5::open_dataset(file.get(), name, cat("'", path, "'"));
    return h5::dataset_dims(ds.get(), where(name));
  }

  Column& column(const std::string& name) const {
    if (auto it = columns.find(name); it != columns.end()) return *it->second;
    auto c = std::make_unique<Column>();
    c->name = name;
    c->what = where(name);
    c->ds = h5::open_dataset(file.get(), name, cat("'", path, "'"));
    c->dims = h5::dataset_dims(c->ds.get(), c->what);
    c->type = h5::dataset_type(c->ds.get(), c->what);
    const H5T_class_t cls = H5Tget_class(c->type.get());
    LT_CHECK(cls == H5T_INTEGER || cls == H5T_FLOAT, c->what, " is stored as ", h5::describe_type(c->type.get()),
             ", not as numbers");
    c->element = H5Tget_size(c->type.get());
    LT_CHECK(c->element >= 1 && c->element <= 16, c->what, " has elements of ", c->element, " bytes");
    LT_CHECK(!c->dims.empty(), c->what, " is a scalar");
    c->row_elements = 1;
    for (std::size_t k = 1; k < c->dims.size(); ++k) {
      LT_CHECK(c->dims[k] >= 0 && c->dims[k] <= kMaxDim, c->what, " has dims ", format_shape(c->dims), " beyond ",
               kMaxDim);
      c->row_elements *= std::size_t(c->dims[k]);
      LT_CHECK(c->row_elements <= kMaxChunkBytes, c->what, " has rows of ", c->row_elements, " values");
    }
    c->pipeline = dataset_pipeline(c->ds.get(), c->what);
    if (!c->pipeline.empty()) {
      h5::Id dcpl(h5::check(H5Dget_create_plist(c->ds.get()), "creation properties of ", c->what), H5Pclose);
      LT_CHECK(H5Pget_layout(dcpl.get()) == H5D_CHUNKED, c->what, " is filtered but not chunked");
      const int rank = int(c->dims.size());
      std::vector<hsize_t> chunk(std::size_t(rank), 0);
      LT_CHECK(h5::check(H5Pget_chunk(dcpl.get(), rank, chunk.data()), "chunk layout of ", c->what) == rank,
               c->what, ": its chunks have another rank than the dataset");
      for (int k = 1; k < rank; ++k)
        LT_CHECK(int64_t(chunk[std::size_t(k)]) == c->dims[std::size_t(k)], c->what, " has chunks of ",
                 format_shape(std::vector<int64_t>(chunk.begin(), chunk.end())),
                 " that do not hold whole rows of ", format_shape(c->dims), " (layertap chunks along the first axis)");
      c->chunk_rows = int64_t(chunk[0]);
      const std::size_t row_bytes = c->row_elements * c->element;
      LT_CHECK(c->chunk_rows >= 1 && (row_bytes == 0 || std::size_t(c->chunk_rows) <= kMaxChunkBytes / row_bytes),
               c->what, " declares chunks of ", format_shape(std::vector<int64_t>(chunk.begin(), chunk.end())), " x ",
               c->element, " bytes, more than the ", kMaxChunkBytes, " bytes layertap reads in one chunk");
      c->chunk_bytes = std::size_t(c->chunk_rows) * row_bytes;
    }
    Column& ref = *c;
    columns.emplace(name, std::move(c));
    return ref;
  }

  // Chunk `k` of a filtered column, decoded into its full size (cached: the last one decoded).
  const std::vector<std::byte>& decoded(Column& c, int64_t k) const {
    if (c.cached == k) return c.data;
    if (const auto it = c.failed.find(k); it != c.failed.end()) throw Error(it->second);
    try {
      std::vector<hsize_t> offset(c.dims.size(), 0);
      offset[0] = hsize_t(k * c.chunk_rows);
      hsize_t stored = 0;
      h5::check(H5Dget_chunk_storage_size(c.ds.get(), offset.data(), &stored), "looking up the chunk");
      LT_CHECK(stored > 0, "the chunk is not stored in the file");
      const std::size_t most = std::min(max_stored_chunk_bytes(c.chunk_bytes), std::size_t(file_bytes));
      LT_CHECK(stored <= most, "the chunk index says the chunk takes ", stored, " bytes, more than a chunk of ",
               c.chunk_bytes, " bytes can take in a file of ", file_bytes);
      c.cached = -1;
      c.stored.resize(std::size_t(stored));
      uint32_t skipped = 0;
      h5::check(H5Dread_chunk(c.ds.get(), H5P_DEFAULT, offset.data(), &skipped, c.stored.data()), "reading the chunk");
      decode_stored_chunk(c.pipeline, skipped, c.element, c.stored.data(), c.stored.size(), c.chunk_bytes, c.data,
                          c.scratch);
      c.cached = k;
      return c.data;
    } catch (const Error& e) {
      const int64_t first = k * c.chunk_rows;
      std::string why = cat("/", c.name, " chunk ", k, " (rows ", first, "..", first + c.chunk_rows - 1, ") of '", path,
                            "' cannot be decoded: ", e.what());
      c.failed.emplace(k, why);
      throw Error(why);
    }
  }

  // `n` stored values at `src` (the column's file type) as `mem_type` at `dst`.
  static void convert(const Column& c, hid_t mem_type, const std::byte* src, std::size_t n, void* dst) {
    if (n == 0) return;
    if (h5::check(H5Tequal(c.type.get(), mem_type), "comparing types of ", c.what) > 0) {
      std::memcpy(dst, src, n * c.element);
      return;
    }
    if (h5::is_bf16_type(c.type.get()) && H5Tequal(mem_type, H5T_NATIVE_FLOAT) > 0) {
      auto* out = static_cast<float*>(dst);
      for (std::size_t i = 0; i < n; ++i) {
        uint16_t b;
        std::memcpy(&b, src + 2 * i, 2);
        out[i] = bf16_to_float(b);
      }
      return;
    }
    const std::size_t msize = H5Tget_size(mem_type);
    std::vector<std::byte> buf(n * std::max(msize, c.element));
    std::memcpy(buf.data(), src, n * c.element);
    h5::check(H5Tconvert(c.type.get(), mem_type, n, buf.data(), nullptr, H5P_DEFAULT), "converting ", c.what);
    std::memcpy(dst, buf.data(), n * msize);
  }

  // Rows [t0, t1) of dataset `name` ([N, tail...]) as `mem_type` into `dst` ([t1 - t0, tail...]).
  void read_rows(const std::string& name, int64_t t0, int64_t t1, hid_t mem_type, void* dst) const {
    Column& c = column(name);
    LT_CHECK(0 <= t0 && t0 <= t1 && t1 <= c.dims[0], "rows [", t0, ", ", t1, ") are outside ", c.what, " with ",
             c.dims[0], " rows");
    if (t0 == t1) return;
    if (c.pipeline.empty()) {  // no filter: HDF5 reads it, and decodes nothing
      std::vector<hsize_t> start(c.dims.size(), 0), count(c.dims.begin(), c.dims.end());
      start[0] = hsize_t(t0);
      count[0] = hsize_t(t1 - t0);
      h5::Id file_space = h5::dataset_space(c.ds.get(), c.what);
      h5::check(H5Sselect_hyperslab(file_space.get(), H5S_SELECT_SET, start.data(), nullptr, count.data(), nullptr),
                "selecting rows ", t0, "..", t1, " of ", c.what);
      h5::Id mem_space(h5::check(H5Screate_simple(int(count.size()), count.data(), nullptr), "memory space for ",
                                 c.what),
                       H5Sclose);
      h5::check(H5Dread(c.ds.get(), mem_type, mem_space.get(), file_space.get(), H5P_DEFAULT, dst), "reading rows ",
                t0, "..", t1, " of ", c.what);
      return;
    }
    const std::size_t msize = H5Tget_size(mem_type);
    auto* out = static_cast<std::byte*>(dst);
    for (int64_t k = t0 / c.chunk_rows; k <= (t1 - 1) / c.chunk_rows; ++k) {
      const std::vector<std::byte>& chunk = decoded(c, k);
      const int64_t first = k * c.chunk_rows;
      const int64_t a = std::max(t0, first), b = std::min(t1, first + c.chunk_rows);
      convert(c, mem_type, chunk.data() + std::size_t(a - first) * c.row_elements * c.element,
              std::size_t(b - a) * c.row_elements, out + std::size_t(a - t0) * c.row_elements * msize);
    }
  }

  // Reads a whole 1-D dataset as `mem_type` (converted from the stored integer type).
  template <typename T>
  std::vector<T> read_1d(const std::string& name, hid_t mem_type) const {
    const Column& c = column(name);
    LT_CHECK(c.dims.size() == 1, c.what, " has rank ", c.dims.size(), ", expected 1");
    check_plausible(c.dims[0], c.what);
    std::vector<T> out(static_cast<std::size_t>(c.dims[0]));
    read_rows(name, 0, c.dims[0], mem_type, out.data());
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
  check_self_contained(f, m.path);
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
  if (h5::has_attr(f, "routed_layers")) {  // MoE outputs: /routed_experts (structure_problems checks it)
    meta.routed_layers = h5::read_attr_ints(f, "routed_layers");
    meta.routed_top_k = h5::has_attr(f, "routed_top_k") ? h5::read_attr_int(f, "routed_top_k") : 0;
  }
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

std::vector<ChunkFilter> ShardReader::hidden_pipeline() const {
  h5::Id ds = h5::open_dataset(impl_->file.get(), "hidden_states", cat("'", impl_->path, "'"));
  return dataset_pipeline(ds.get(), impl_->where("hidden_states"));
}

std::size_t ShardReader::hidden_element_size() const {
  h5::Id ds = h5::open_dataset(impl_->file.get(), "hidden_states", cat("'", impl_->path, "'"));
  h5::Id type = h5::dataset_type(ds.get(), impl_->where("hidden_states"));
  return H5Tget_size(type.get());
}

std::string ShardReader::hidden_encoding() const {
  h5::Id ds = h5::open_dataset(impl_->file.get(), "hidden_states", cat("'", impl_->path, "'"));
  return h5::has_attr(ds.get(), "encoding") ? h5::read_attr_string(ds.get(), "encoding") : "";
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

bool ShardReader::has_routing() const { return !impl_->meta.routed_layers.empty(); }

std::vector<int16_t> ShardReader::routed_experts(int64_t t0, int64_t t1) const {
  const OutputMeta& meta = impl_->meta;
  LT_CHECK(has_routing(), "'", impl_->path, "' records no routing");
  LT_CHECK(0 <= t0 && t0 <= t1 && t1 <= num_tokens(), "rows ", t0, "..", t1, " of /routed_experts are outside [0, ",
           num_tokens(), "]");
  std::vector<int16_t> out(std::size_t((t1 - t0) * meta.routed_width()));
  if (t1 > t0) impl_->read_rows("routed_experts", t0, t1, H5T_NATIVE_INT16, out.data());
  return out;
}

std::vector<float> ShardReader::hidden_states(int64_t t0, int64_t t1) const {
  const Impl& m = *impl_;
  const Impl::Column& hs = m.column("hidden_states");
  const std::string& what = hs.what;
  const auto& d = hs.dims;
  LT_CHECK(d.size() == 3, what, " has rank ", d.size(), ", expected 3 [T, P, H]");
  LT_CHECK(0 <= t0 && t0 <= t1 && t1 <= d[0], "rows [", t0, ", ", t1, ") are outside ", what,
           " with ", d[0], " rows");
  m.check_plausible((t1 - t0) * d[1] * d[2], what);
  std::vector<float> out(std::size_t((t1 - t0) * d[1] * d[2]));  // [t1-t0, P, H]
  if (out.empty()) return out;
  if (m.meta.dtype != DType::F8_E4M3) {
    m.read_rows("hidden_states", t0, t1, H5T_NATIVE_FLOAT, out.data());  // bf16 converted to float32
    return out;
  }
  // float8: uint8 codes [n, P, H] and float32 scales [n, P].
  const Impl::Column& scales = m.column("hidden_scales");
  const auto& sd = scales.dims;
  LT_CHECK(sd.size() == 2 && sd[0] == d[0] && sd[1] == d[1], scales.what, " has shape ", format_shape(sd),
           ", expected [T, P] = ", format_shape({d[0], d[1]}));
  LT_CHECK(H5Tget_class(hs.type.get()) == H5T_INTEGER && hs.element == 1, what, " of a float8 shard is stored as ",
           h5::describe_type(hs.type.get()), ", expected uint8 codes");
  std::vector<uint8_t> codes(out.size());
  std::vector<float> row_scales(std::size_t((t1 - t0) * d[1]));
  m.read_rows("hidden_states", t0, t1, H5T_NATIVE_UINT8, codes.data());
  m.read_rows("hidden_scales", t0, t1, H5T_NATIVE_FLOAT, row_scales.data());
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
  // MoE outputs: the routing record, [T, M, k] integers, with the attributes naming M and k.
  const bool routing_data = H5Lexists(impl_->file.get(), "routed_experts", H5P_DEFAULT) > 0;
  if (routing_data != !meta.routed_layers.empty()) {
    problems.push_back(routing_data ? "/routed_experts without the attribute routed_layers"
                                    : "attribute routed_layers without /routed_experts");
  } else if (routing_data) {
    const std::vector<int64_t> want{T, int64_t(meta.routed_layers.size()), meta.routed_top_k};
    if (const auto rd = impl_->dims("routed_experts"); rd != want)
      problems.push_back(cat("/routed_experts has shape ", format_shape(rd), ", expected [T, layers, top-k] = ",
                             format_shape(want), " from /input_ids and the attributes routed_layers, routed_top_k"));
    if (meta.routed_top_k < 1)
      problems.push_back(cat("attribute routed_top_k is ", meta.routed_top_k, ", expected at least 1"));
    for (std::size_t i = 0; i < meta.routed_layers.size(); ++i)
      if (meta.routed_layers[i] < 0 || meta.routed_layers[i] >= meta.num_layers ||
          (i > 0 && meta.routed_layers[i] <= meta.routed_layers[i - 1])) {
        problems.push_back(cat("attribute routed_layers ", format_shape(meta.routed_layers),
                               " is not increasing layer ids below ", meta.num_layers));
        break;
      }
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
