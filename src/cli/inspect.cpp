#include "cli/inspect.hpp"

#include <algorithm>
#include <iterator>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "core/text.hpp"
#include "io/output_check.hpp"
#include "io/output_lock.hpp"
#include "io/shard_reader.hpp"

namespace layertap::cli {
namespace {

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

// A value shown for information only: its text (an excerpt of a long one), or "?" when the
// manifest lacks it (io::read_manifest leaves such a value empty, or -1).
std::string shown(const std::string& s) { return s.empty() ? "?" : excerpt(s, 400); }
std::string shown(int64_t v) { return v < 0 ? "?" : std::to_string(v); }
std::string shown(double v) { return v < 0 ? "?" : fixed(v, 1); }

int inspect(const std::filesystem::path& dir, std::ostream& out) {
  if (!std::filesystem::exists(dir / "manifest.json")) {
    out << "ERROR: no readable manifest.json in '" << dir.string()
        << "' (the run did not finish, or this is not a layertap output directory)\n";
    return 1;
  }
  const io::Manifest m = io::read_manifest(dir);  // throws naming a missing or malformed key
  const io::RunSummary& run = m.run;
  Table point_table({1});
  point_table.add({"spec", "id", "meaning"});
  for (const io::ManifestPoint& p : m.points) point_table.add({shown(p.spec), std::to_string(p.id), shown(p.meaning)});

  out << "layertap output  " << dir.string() << "\n";
  out << "format      v" << m.format_version << ", " << (m.complete ? "complete" : "INCOMPLETE") << "\n";
  out << "model       " << m.architecture << ", " << m.num_layers << " layers, hidden " << m.hidden_size << ", vocab "
      << m.vocab_size << "\n";
  out << "            dir " << m.model_dir << "\n";
  out << "            config sha256 " << short_hash(m.config_sha256) << "  weights "
      << short_hash(m.weights_fingerprint) << "\n";
  out << "dataset     " << shown(m.dataset_path) << "  (sha256 " << short_hash(shown(m.dataset_sha256)) << ")\n";
  out << "            " << shown(m.dataset_samples) << " samples, " << shown(m.dataset_tokens) << " tokens\n";
  out << "capture     request '" << m.capture_request << "', convention " << shown(m.capture_convention)
      << ", stored as " << m.storage_dtype << "\n";
  point_table.print(out, "            ");
  out << "run         " << shown(run.command) << "\n";
  out << "            world " << shown(run.world_size) << " (tp " << shown(run.tp) << ", dp " << shown(run.dp)
      << "), " << shown(run.seconds) << " s, " << shown(run.tokens_per_s) << " tokens/s, layertap "
      << shown(run.layertap_version) << ", " << shown(run.created) << "\n";

  std::vector<std::string> errors;
  Table shard_table({1, 2, 3});
  shard_table.add({"file", "samples", "tokens", "size", "hidden_states", "dtype", "sha256"});
  int64_t bytes = 0;
  for (const io::ShardInfo& s : m.shards) {
    bytes += s.bytes;
    const io::ShardFindings f = io::check_shard(dir, s, m, /*checksum=*/false);  // verify checksums
    errors.insert(errors.end(), f.problems.begin(), f.problems.end());
    shard_table.add({s.file, std::to_string(s.samples), std::to_string(s.tokens), human_bytes(s.bytes),
                     f.shape.empty() ? "?" : io::format_shape(f.shape), f.dtype.empty() ? "?" : f.dtype,
                     short_hash(s.sha256)});
  }
  out << "shards      " << m.shards.size() << " files, " << human_bytes(bytes) << "\n";
  shard_table.print(out, "            ");
  out << "totals      " << m.total_samples << " samples, " << m.total_tokens << " tokens, "
      << human_bytes(m.total_bytes);
  if (!m.skipped_samples.empty())
    out << "; " << m.skipped_samples.size() << " sample(s) skipped (--on-nonfinite skip): listed in manifest.json";
  out << "\n";
  for (const std::string& p : io::manifest_count_problems(m)) errors.push_back(p);
  if (!m.complete) errors.push_back("manifest.json: the run is marked incomplete");

  for (const auto& err : errors) out << "ERROR: " << err << "\n";
  if (!errors.empty()) {
    out << "FAILED: " << errors.size() << " problem(s) found\n";
    return 1;
  }
  out << "OK: the manifest and its " << m.shards.size() << " shard(s) agree\n";
  return 0;
}

}  // namespace

int run_inspect(const std::filesystem::path& out_dir, std::ostream& out) {
  try {
    // Shared: a job writing out_dir holds it exclusively (refused, naming the job); none starts meanwhile.
    const std::optional<io::OutputLock> lock = io::OutputLock::shared(out_dir);
    return inspect(out_dir, out);
  } catch (const Error& e) {
    out << "ERROR: " << e.what() << "\n";
  }
  out << "FAILED: the output cannot be checked\n";
  return 1;
}

}  // namespace layertap::cli
