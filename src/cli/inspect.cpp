#include "cli/inspect.hpp"

#include <algorithm>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.hpp"
#include "core/text.hpp"
#include "io/shard_reader.hpp"

namespace layertap::cli {
namespace {

using nlohmann::json;

// Rows of cells printed in aligned columns; columns listed in `right` are right-aligned (numbers).
class Table {
 public:
  explicit Table(std::vector<std::size_t> right) : right_(std::move(right)) {}
  void add(std::vector<std::string> row) { rows_.push_back(std::move(row)); }

  void print(std::ostream& out, const std::string& indent) const {
    std::vector<std::size_t> width;
    for (const auto& row : rows_)
      for (std::size_t c = 0; c < row.size(); ++c) {
        if (width.size() <= c) width.push_back(0);
        width[c] = std::max(width[c], row[c].size());
      }
    for (const auto& row : rows_) {
      std::string line = indent;
      for (std::size_t c = 0; c < row.size(); ++c) {
        const std::string pad(width[c] - row[c].size(), ' ');
        const bool is_right = std::find(right_.begin(), right_.end(), c) != right_.end();
        line += is_right ? pad + row[c] : row[c] + (c + 1 < row.size() ? pad : "");
        if (c + 1 < row.size()) line += "  ";
      }
      out << line << "\n";
    }
  }

 private:
  std::vector<std::size_t> right_;
  std::vector<std::vector<std::string>> rows_;
};

std::string short_hash(const std::string& h) { return h.size() > 16 ? h.substr(0, 16) : h; }

// A required manifest value; throws naming its key path when missing.
const json& at(const json& j, const std::string& key, const std::string& path) {
  LT_CHECK(j.is_object() && j.contains(key), "manifest.json has no \"", path, key, "\"");
  return j.at(key);
}

// A value shown for information only: its text, or "?" when the manifest lacks it.
std::string text(const json& j, const std::string& key) {
  if (!j.is_object() || !j.contains(key)) return "?";
  const json& v = j.at(key);
  if (v.is_string()) return v.get<std::string>();
  if (v.is_number_float()) {
    std::ostringstream os;
    os.setf(std::ios::fixed);
    os.precision(1);
    os << v.get<double>();
    return os.str();
  }
  return v.dump();
}

struct ManifestShard {
  std::string file, sha256;
  int64_t samples = 0, tokens = 0, bytes = 0;
};

// What every shard must agree with.
struct Expected {
  int64_t format_version = 0, hidden = 0;
  std::vector<int64_t> point_ids;
  std::string dtype, architecture, config_sha256, weights_fingerprint;
};

// Opens one shard and compares it with its manifest entry. Appends a table row and any errors.
void check_shard(const std::filesystem::path& dir, const ManifestShard& s, const Expected& e,
                 Table& table, std::vector<std::string>& errors) {
  const auto path = dir / s.file;
  const auto fail = [&](auto&&... why) { errors.push_back(cat(s.file, ": ", why...)); };
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    fail("missing (listed in manifest.json)");
    table.add({s.file, std::to_string(s.samples), std::to_string(s.tokens), human_bytes(s.bytes),
               "MISSING", "", short_hash(s.sha256)});
    return;
  }
  std::vector<int64_t> shape;
  std::string dtype;
  try {
    io::ShardReader r(path);
    shape = r.hidden_shape();
    dtype = r.hidden_dtype();
    for (const auto& p : r.structure_problems()) fail(p);
    const int64_t samples = r.num_samples(), tokens = r.num_tokens();
    if (samples != s.samples)
      fail("manifest says ", s.samples, " samples, the file holds ", samples);
    if (tokens != s.tokens) fail("manifest says ", s.tokens, " tokens, the file holds ", tokens);
    const std::vector<int64_t> want{s.tokens, int64_t(e.point_ids.size()), e.hidden};
    if (shape != want)
      fail("/hidden_states is ", io::format_shape(shape),
           ", manifest implies [tokens, points, hidden] = ", io::format_shape(want));
    if (dtype != e.dtype) fail("/hidden_states is stored as ", dtype, ", manifest says ", e.dtype);
    const io::OutputMeta& m = r.meta();
    if (r.format_version() != e.format_version)
      fail("format version ", r.format_version(), ", manifest says ", e.format_version);
    if (m.point_ids != e.point_ids)
      fail("capture point ids ", io::format_shape(m.point_ids), ", manifest says ",
           io::format_shape(e.point_ids));
    if (m.architecture != e.architecture)
      fail("architecture '", m.architecture, "', manifest says '", e.architecture, "'");
    if (m.config_sha256 != e.config_sha256) fail("config_sha256 differs from the manifest's");
    if (m.weights_fingerprint != e.weights_fingerprint)
      fail("weights_fingerprint differs from the manifest's");
  } catch (const Error& ex) {
    fail("cannot be read: ", ex.what());
  }
  const auto size = int64_t(std::filesystem::file_size(path, ec));
  if (size != s.bytes) fail("file is ", size, " bytes, manifest says ", s.bytes);
  table.add({s.file, std::to_string(s.samples), std::to_string(s.tokens), human_bytes(s.bytes),
             shape.empty() ? "?" : io::format_shape(shape), dtype.empty() ? "?" : dtype,
             short_hash(s.sha256)});
}

int inspect(const std::filesystem::path& dir, std::ostream& out) {
  const auto manifest_path = dir / "manifest.json";
  std::ifstream in(manifest_path);
  if (!in) {
    out << "ERROR: no readable manifest.json in '" << dir.string()
        << "' (the run did not finish, or this is not a layertap output directory)\n";
    return 1;
  }
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& ex) {
    out << "ERROR: " << manifest_path.string() << " is not valid JSON: " << ex.what() << "\n";
    return 1;
  }

  std::vector<std::string> errors;
  const json& model = at(j, "model", "");
  const json& dataset = at(j, "dataset", "");
  const json& capture = at(j, "capture", "");
  const json& points = at(capture, "points", "capture.");
  const json& run = j.contains("run") ? j.at("run") : json::object();
  const bool complete = at(j, "complete", "").get<bool>();

  Expected e;
  e.format_version = at(j, "format_version", "").get<int64_t>();
  e.hidden = at(model, "hidden_size", "model.").get<int64_t>();
  e.dtype = at(j, "storage_dtype", "").get<std::string>();
  e.architecture = at(model, "architecture", "model.").get<std::string>();
  e.config_sha256 = at(model, "config_sha256", "model.").get<std::string>();
  e.weights_fingerprint = at(model, "weights_fingerprint", "model.").get<std::string>();
  Table point_table({1});
  point_table.add({"spec", "id", "meaning"});
  for (const json& p : points) {
    e.point_ids.push_back(at(p, "id", "capture.points[].").get<int64_t>());
    point_table.add({text(p, "spec"), std::to_string(e.point_ids.back()), text(p, "meaning")});
  }

  out << "layertap output  " << dir.string() << "\n";
  out << "format      v" << e.format_version << ", " << (complete ? "complete" : "INCOMPLETE")
      << "\n";
  out << "model       " << e.architecture << ", " << text(model, "num_hidden_layers")
      << " layers, hidden " << e.hidden << ", vocab " << text(model, "vocab_size") << "\n";
  out << "            dir " << text(model, "dir") << "\n";
  out << "            config sha256 " << short_hash(e.config_sha256) << "  weights "
      << short_hash(e.weights_fingerprint) << "\n";
  out << "dataset     " << text(dataset, "path") << "  (sha256 "
      << short_hash(text(dataset, "sha256")) << ")\n";
  out << "            " << text(dataset, "samples") << " samples, " << text(dataset, "tokens")
      << " tokens\n";
  out << "capture     request '" << text(capture, "request") << "', convention "
      << text(capture, "convention") << ", stored as " << e.dtype << "\n";
  point_table.print(out, "            ");
  out << "run         " << text(run, "command") << "\n";
  out << "            world " << text(run, "world_size") << " (tp " << text(run, "tp") << ", dp "
      << text(run, "dp") << "), " << text(run, "seconds") << " s, " << text(run, "tokens_per_s")
      << " tokens/s, layertap " << text(run, "layertap_version") << ", " << text(run, "created")
      << "\n";

  const json& shards = at(j, "shards", "");
  Table shard_table({1, 2, 3});
  shard_table.add({"file", "samples", "tokens", "size", "hidden_states", "dtype", "sha256"});
  int64_t samples = 0, tokens = 0, bytes = 0;
  for (const json& sj : shards) {
    ManifestShard s;
    s.file = at(sj, "file", "shards[].").get<std::string>();
    s.samples = at(sj, "samples", "shards[].").get<int64_t>();
    s.tokens = at(sj, "tokens", "shards[].").get<int64_t>();
    s.bytes = at(sj, "bytes", "shards[].").get<int64_t>();
    s.sha256 = text(sj, "sha256");
    samples += s.samples;
    tokens += s.tokens;
    bytes += s.bytes;
    check_shard(dir, s, e, shard_table, errors);
  }
  out << "shards      " << shards.size() << " files, " << human_bytes(bytes) << "\n";
  shard_table.print(out, "            ");

  const json& totals = at(j, "totals", "");
  const int64_t total_samples = at(totals, "samples", "totals.").get<int64_t>();
  const int64_t total_tokens = at(totals, "tokens", "totals.").get<int64_t>();
  const int64_t total_bytes = at(totals, "bytes", "totals.").get<int64_t>();
  out << "totals      " << total_samples << " samples, " << total_tokens << " tokens, "
      << human_bytes(total_bytes) << "\n";
  if (total_samples != samples || total_tokens != tokens || total_bytes != bytes)
    errors.push_back(cat("manifest.json: totals (", total_samples, " samples, ", total_tokens,
                         " tokens, ", total_bytes, " bytes) differ from the sum over its shards (",
                         samples, ", ", tokens, ", ", bytes, ")"));
  if (!complete) errors.push_back("manifest.json: the run is marked incomplete");
  if (complete && dataset.contains("samples") && dataset.at("samples") != total_samples)
    errors.push_back(cat("manifest.json: the dataset has ", text(dataset, "samples"),
                         " samples, the shards hold ", total_samples));

  for (const auto& err : errors) out << "ERROR: " << err << "\n";
  if (!errors.empty()) {
    out << errors.size() << " problem(s) found\n";
    return 1;
  }
  out << "OK: the manifest and its " << shards.size() << " shard(s) agree\n";
  return 0;
}

}  // namespace

int run_inspect(const std::filesystem::path& out_dir, std::ostream& out) {
  try {
    return inspect(out_dir, out);
  } catch (const Error& e) {
    out << "ERROR: " << e.what() << "\n";
  } catch (const json::exception& e) {
    out << "ERROR: manifest.json: " << e.what() << "\n";
  }
  return 1;
}

}  // namespace layertap::cli
