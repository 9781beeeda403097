#include "io/output_check.hpp"

#include <algorithm>

#include "core/digest.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "io/compression.hpp"
#include "io/shard_reader.hpp"

namespace layertap::io {

namespace fs = std::filesystem;

namespace {

// The same filters, codec levels included (flags and the shuffle's element size aside).
bool same_pipeline(const std::vector<ChunkFilter>& a, const std::vector<ChunkFilter>& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    if (a[i].id != b[i].id) return false;
    const bool leveled = a[i].id == kZstdFilter || a[i].id == kDeflateFilter;
    if (leveled && (a[i].cd_values.empty() ? 0u : a[i].cd_values[0]) != (b[i].cd_values.empty() ? 0u : b[i].cd_values[0]))
      return false;
  }
  return true;
}

// How /hidden_states is stored (its dtype and compression attributes, its actual filter pipeline,
// float8's encoding attribute) against the manifest: one finding per disagreement.
template <typename Fail>
void storage_problems(const ShardReader& r, const Manifest& m, Fail&& fail) {
  const OutputMeta& a = r.meta();
  if (dtype_name(a.dtype) != m.storage_dtype)
    fail("dtype attribute '", dtype_name(a.dtype), "', manifest says ", m.storage_dtype);
  if (const std::string c = compression_name(a.compression); c != m.compression)
    fail("compression attribute '", c, "', manifest says ", m.compression);
  const std::vector<ChunkFilter> actual = r.hidden_pipeline();
  const std::vector<ChunkFilter> want = expected_pipeline(parse_compression(m.compression), r.hidden_element_size());
  if (!same_pipeline(actual, want))
    fail("/hidden_states is filtered by ", describe_pipeline(actual), ", manifest says compression ", m.compression,
         " (", describe_pipeline(want), ")");
  if (m.storage_dtype == "float8_e4m3fn" && r.hidden_encoding() != "float8_e4m3fn")
    fail("/hidden_states encoding attribute '", excerpt(r.hidden_encoding()), "', manifest says float8_e4m3fn");
}

// The values the tools index with: /sample_index non-negative, increasing, inside the dataset and
// none of the skipped samples; /input_ids inside the vocabulary. Both are 1-D and small beside
// /hidden_states ([T] against [T, P, H]), so every check reads them whole.
template <typename Fail>
void index_problems(const ShardReader& r, const Manifest& m, Fail& fail) {
  std::vector<int64_t> skipped;
  for (const SkippedSample& k : m.skipped_samples) skipped.push_back(k.index);
  std::sort(skipped.begin(), skipped.end());
  const std::vector<int64_t> index = r.sample_index();
  for (std::size_t i = 0; i < index.size(); ++i) {
    if (index[i] < 0) {
      fail("/sample_index holds ", index[i], ", a negative sample index");
      break;
    }
    if (i > 0 && index[i] <= index[i - 1]) {
      fail("/sample_index is not increasing at entry ", i, " (", index[i - 1], " -> ", index[i], ")");
      break;
    }
    if (m.dataset_samples >= 0 && index[i] >= m.dataset_samples) {
      fail("/sample_index holds ", index[i], ", outside the dataset's ", m.dataset_samples, " samples");
      break;
    }
    if (std::binary_search(skipped.begin(), skipped.end(), index[i])) {
      fail("/sample_index holds ", index[i], ", which manifest.json lists in skipped_samples");
      break;
    }
  }
  const std::vector<int32_t> ids = r.input_ids();
  const auto bad = std::find_if(ids.begin(), ids.end(), [&](int32_t v) { return v < 0 || v >= m.vocab_size; });
  if (bad != ids.end())
    fail("/input_ids holds token id ", *bad, " at row ", bad - ids.begin(), ", outside the vocabulary [0, ",
         m.vocab_size, ")");
}

}  // namespace

std::vector<std::string> manifest_count_problems(const Manifest& m) {
  std::vector<std::string> problems;
  int64_t samples = 0, tokens = 0, bytes = 0;
  for (const ShardInfo& s : m.shards) {  // each below 2^62: no overflow in int64
    samples += s.samples;
    tokens += s.tokens;
    bytes += s.bytes;
  }
  if (samples != m.total_samples || tokens != m.total_tokens || bytes != m.total_bytes)
    problems.push_back(cat("manifest.json: totals (", m.total_samples, " samples, ", m.total_tokens, " tokens, ",
                           m.total_bytes, " bytes) differ from the sum over its shards (", samples, ", ", tokens,
                           ", ", bytes, ")"));
  if (!m.complete) return problems;  // an incomplete run holds what it lists; resume completes it
  if (m.dataset_samples < 0) {
    problems.push_back("manifest.json: the run is marked complete but names no dataset.samples, so whether its "
                       "shards hold every sample cannot be checked");
    return problems;
  }
  if (m.dataset_samples == 0) {  // extract refuses a dataset without samples
    problems.push_back("manifest.json: the run is marked complete over a dataset of 0 samples, which no run "
                       "produces");
    return problems;
  }
  const auto skipped = int64_t(m.skipped_samples.size());
  if (m.total_samples + skipped != m.dataset_samples)
    problems.push_back(cat("manifest.json: its shards hold ", m.total_samples, " samples and it lists ", skipped,
                           " skipped, not the dataset's ", m.dataset_samples));
  std::vector<int64_t> sorted;
  for (const SkippedSample& s : m.skipped_samples) sorted.push_back(s.index);
  std::sort(sorted.begin(), sorted.end());
  for (std::size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] >= m.dataset_samples) {
      problems.push_back(cat("manifest.json: skipped_samples lists index ", sorted[i], ", outside the dataset's ",
                             m.dataset_samples, " samples"));
      break;
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      problems.push_back(cat("manifest.json: skipped_samples lists index ", sorted[i], " twice"));
      break;
    }
  }
  return problems;
}

ShardFindings check_shard(const fs::path& dir, const ShardInfo& s, const Manifest& m, bool checksum) {
  ShardFindings f;
  const auto fail = [&](auto&&... why) { f.problems.push_back(cat(s.file, ": ", why...)); };
  const fs::path path = dir / s.file;
  std::error_code ec;
  if (fs::is_symlink(fs::symlink_status(path, ec))) {  // a link may point only inside the directory
    const fs::path real = fs::weakly_canonical(path, ec);
    const fs::path inside = real.lexically_relative(fs::weakly_canonical(dir, ec));
    if (inside.empty() || inside == "." || *inside.begin() == "..") {
      fail("is a symbolic link to ", real.string(), ", outside the output directory (listed in manifest.json)");
      return f;
    }
  }
  const fs::file_status st = fs::status(path, ec);
  if (!fs::exists(st)) {
    fail("missing (listed in manifest.json)");
    return f;
  }
  if (!fs::is_regular_file(st)) {
    fail("is not a regular file");
    return f;
  }
  if (const auto size = int64_t(fs::file_size(path, ec)); size != s.bytes)
    fail("file is ", size, " bytes, manifest says ", s.bytes);
  if (checksum && sha256_file(path.string()) != s.sha256)
    fail("SHA-256 differs from the manifest (the file changed after it was written)");
  try {
    const ShardReader r(path);
    f.shape = r.hidden_shape();
    f.dtype = r.hidden_dtype();
    const std::vector<std::string> structure = r.structure_problems();
    for (const std::string& p : structure) fail(p);
    if (structure.empty()) {
      index_problems(r, m, fail);
      const std::vector<int64_t> index = r.sample_index();
      if (!index.empty() && (index.front() != s.first_sample || index.back() != s.last_sample))
        fail("/sample_index runs from ", index.front(), " to ", index.back(), ", manifest says first_sample ",
             s.first_sample, ", last_sample ", s.last_sample);
    }
    const std::vector<int64_t> point_ids = m.point_ids();
    const auto P = int64_t(point_ids.size());
    const std::vector<int64_t> want{s.tokens, P, m.hidden_size};
    if (f.shape != want)
      fail("/hidden_states is ", format_shape(f.shape), ", manifest implies [tokens, points, hidden] = ",
           format_shape(want));
    if (r.num_samples() != s.samples) fail("holds ", r.num_samples(), " samples, manifest says ", s.samples);
    if (r.num_tokens() != s.tokens) fail("holds ", r.num_tokens(), " tokens, manifest says ", s.tokens);
    if (f.dtype != m.storage_dtype) fail("/hidden_states is stored as ", f.dtype, ", manifest says ", m.storage_dtype);
    storage_problems(r, m, fail);
    const OutputMeta& a = r.meta();
    if (r.format_version() != m.format_version)
      fail("format version ", r.format_version(), ", manifest says ", m.format_version);
    if (a.point_ids != point_ids)
      fail("capture point ids ", format_shape(a.point_ids), ", manifest says ", format_shape(point_ids));
    if (a.hidden != m.hidden_size) fail("hidden_size attribute ", a.hidden, ", manifest says ", m.hidden_size);
    if (a.num_layers != m.num_layers) fail("num_layers attribute ", a.num_layers, ", manifest says ", m.num_layers);
    if (a.architecture != m.architecture)
      fail("architecture '", a.architecture, "', manifest says '", m.architecture, "'");
    if (a.config_sha256 != m.config_sha256) fail("config_sha256 differs from the manifest's (another model's output)");
    if (a.weights_fingerprint != m.weights_fingerprint)
      fail("weights_fingerprint differs from the manifest's (another model's output)");
    f.sound = f.problems.empty();
  } catch (const Error& e) {
    fail("cannot be read: ", e.what());
  }
  return f;
}

}  // namespace layertap::io
