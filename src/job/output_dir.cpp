#include "job/output_dir.hpp"

#include <fcntl.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <regex>

#include "core/digest.hpp"
#include "core/error.hpp"
#include "core/text.hpp"
#include "core/log.hpp"
#include "core/regular_file.hpp"
#include "io/durable_file.hpp"
#include "io/output_check.hpp"
#include "io/output_lock.hpp"
#include "io/progress.hpp"

namespace layertap::job {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

bool is_layertap_file(const fs::path& p) {
  static const std::regex pattern(R"((manifest\.json|run\.json|shard.*\.h5(\.tmp)?|shard.*\.progress\.json)(\.tmp)?)");
  return std::regex_match(p.filename().string(), pattern);
}

// layertap's own bookkeeping, neither an earlier run's output nor a foreign file: the lock file
// (io/output_lock.hpp; never removed, not even by --overwrite: another job may hold it) and the
// write probe below.
bool is_bookkeeping_file(const fs::path& p) {
  const std::string name = p.filename().string();
  return name == io::kLockFileName || name == ".layertap-write-test";
}

// Creates, writes and removes "<dir>/.layertap-write-test". Whatever is at that name (a leftover,
// or a link planted there) is removed first, never followed: the probe is created with O_EXCL and
// O_NOFOLLOW, so a link to a file elsewhere cannot make the probe write through it.
void probe_writable(const fs::path& dir) {
  const fs::path probe = dir / ".layertap-write-test";
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(probe, ec);
  LT_CHECK(!fs::is_directory(st), "'", probe.string(), "' is a directory; remove it (layertap writes a file there)");
  if (fs::exists(st)) fs::remove(probe, ec);  // a link is removed, not its target
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  LT_CHECK(fd >= 0, "output directory '", dir.string(), "' is not writable: cannot create '", probe.string(),
           "': ", std::strerror(errno));
  const bool wrote = ::write(fd, "ok", 2) == 2;
  const int err = errno;
  ::close(fd);
  fs::remove(probe, ec);
  LT_CHECK(wrote, "output directory '", dir.string(), "' is not writable: writing '", probe.string(),
           "' failed: ", std::strerror(err));
}

json read_json(const fs::path& file) {
  const std::string text = read_regular_file(file.string(), "run record");
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    LT_FAIL("'", file.string(), "' is malformed: ", e.what());
  }
}

// Names every key whose value differs between the earlier run and this one.
void check_same_run(const fs::path& dir, const json& before, const json& now) {
  std::string diff;
  for (auto& [key, value] : now.items())
    if (!before.contains(key) || before[key] != value)
      diff += cat("\n  ", key, ": earlier run ", before.contains(key) ? before[key].dump() : "(absent)", ", now ",
                  value.dump());
  LT_CHECK(diff.empty(), "cannot resume the run in '", dir.string(), "': it was made with different settings:", diff,
           "\nresume with the earlier settings, or start over with --overwrite");
}

// The directory itself, or the nearest ancestor that exists.
fs::path nearest_existing(const fs::path& target) {
  std::error_code ec;
  fs::path existing = target;
  while (!fs::exists(fs::symlink_status(existing, ec)) && existing.has_relative_path()) existing = existing.parent_path();
  return existing;
}

}  // namespace

int64_t free_bytes_at(const fs::path& dir) {
  std::error_code ec;
  const fs::path at = nearest_existing(fs::absolute(dir, ec));
  struct statvfs st {};
  LT_CHECK(::statvfs(at.c_str(), &st) == 0, "cannot read the free space at '", at.string(), "': ", std::strerror(errno));
  return int64_t(st.f_bavail) * int64_t(st.f_frsize);
}

int64_t shard_bytes_in(const fs::path& dir) {
  std::error_code ec;
  int64_t bytes = 0;
  if (!fs::is_directory(dir, ec)) return 0;
  for (const auto& entry : fs::directory_iterator(dir, ec))
    if (is_layertap_file(entry.path()) && entry.is_regular_file(ec)) bytes += int64_t(entry.file_size(ec));
  return bytes;
}

int64_t available_bytes(const fs::path& dir, bool reuse) {
  return free_bytes_at(dir) + (reuse ? shard_bytes_in(dir) : 0);
}

int64_t OutputShape::point_bytes_per_token() const {
  return hidden * int64_t(dtype_size(dtype)) + (dtype == DType::F8_E4M3 ? 4 : 0);
}

int64_t projected_output_bytes(const OutputShape& output, int64_t groups, int64_t shard_bytes) {
  const int64_t per_token = output.points * output.point_bytes_per_token();
  const int64_t data = output.tokens * (per_token + 5) + output.samples * 16;
  // Per shard: HDF5 metadata and the written part of its partial token chunks. (The unwritten tail
  // of a shard's last /hidden_states chunk stays a hole in the file: it takes no disk space.)
  constexpr int64_t kPerShard = int64_t(256) << 10;
  const int64_t shards = groups + data / shard_bytes;
  return data + shards * kPerShard;
}

void check_output_path(const fs::path& dir) {
  std::error_code ec;
  const fs::path target = fs::absolute(dir, ec);
  LT_CHECK(!ec, "--out '", dir.string(), "': ", ec.message());
  const fs::path existing = nearest_existing(target);
  const std::string what = existing == target ? cat("--out '", dir.string(), "'")
                                              : cat("--out '", dir.string(), "': its parent '", existing.string(), "'");
  LT_CHECK(fs::is_directory(fs::status(existing, ec)), what, " exists and is not a directory");
  LT_CHECK(::access(existing.c_str(), W_OK | X_OK) == 0, what, " is not writable: ", std::strerror(errno));
}

OutputState prepare_output_dir(const fs::path& dir, const json& identity, bool overwrite, bool resume,
                               bool take_lock) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  LT_CHECK(!ec && fs::is_directory(dir), "cannot create output directory '", dir.string(), "': ", ec.message());
  std::vector<fs::path> earlier, foreign;
  const auto list = [&] {
    earlier.clear();
    foreign.clear();
    for (const auto& entry : fs::directory_iterator(dir))
      if (!is_bookkeeping_file(entry.path()))
        (is_layertap_file(entry.path()) ? earlier : foreign).push_back(entry.path());
    std::sort(foreign.begin(), foreign.end());
  };
  const auto refuse_foreign = [&] {
    // A new run writes into an empty directory: shards among someone's other files are easy to lose
    // or to mistake for theirs. --overwrite writes among them (and leaves them alone).
    LT_CHECK(foreign.empty() || overwrite, "output directory '", dir.string(), "' holds ", foreign.size(),
             " file(s) that are not layertap's ('", foreign.empty() ? std::string() : excerpt(foreign.front().filename().string()),
             "'", foreign.size() > 1 ? ", ..." : "", "); choose an empty or new --out, or pass --overwrite to write "
             "among them (they are kept)");
  };
  list();
  if (take_lock) {
    // Someone's directory is refused before the lock file is created in it: it is left as it was.
    if (!(!earlier.empty() && resume && fs::exists(dir / "run.json"))) refuse_foreign();
    io::OutputLock::exclusive(dir).hold_until_exit();
    list();  // what the directory holds now that no other job can change it
  }
  probe_writable(dir);

  if (!earlier.empty() && resume && fs::exists(dir / "run.json")) {
    check_same_run(dir, read_json(dir / "run.json"), identity);
    if (fs::exists(fs::symlink_status(dir / "manifest.json", ec))) {
      const json manifest = read_json(dir / "manifest.json");
      const auto complete = manifest.is_object() ? manifest.find("complete") : manifest.end();
      if (complete != manifest.end() && complete->is_boolean() && complete->get<bool>()) {
        const std::vector<std::string> problems = complete_run_problems(dir, identity);
        if (problems.empty()) return OutputState::AlreadyComplete;
        for (const std::string& p : problems) log_warn("resume: ", p);
        log_warn("resume: the run in '", dir.string(), "' is marked complete but ", problems.size(),
                 " finding(s) above say otherwise; what does not check out is recomputed");
      }
      fs::remove(dir / "manifest.json");  // it described an earlier state; a new one comes at the end
    }
    return OutputState::Resume;
  }
  refuse_foreign();
  if (!earlier.empty()) {
    LT_CHECK(overwrite || resume, "output directory '", dir.string(), "' already holds a run (",
             earlier.front().filename().string(), ", ...); pass --resume to continue it, --overwrite to replace it, "
             "or choose another --out");
    LT_CHECK(overwrite, "output directory '", dir.string(), "' holds layertap files but no run.json, so it cannot be "
             "resumed; pass --overwrite to replace them");
    // The manifest goes first, so an interrupted clean-up never leaves a complete-looking run.
    fs::remove(dir / "manifest.json");
    for (const fs::path& p : earlier) fs::remove(p);
  }
  io::write_json_atomically(dir / "run.json", identity);
  return OutputState::Fresh;
}

std::vector<std::string> complete_run_problems(const fs::path& dir, const json& identity) {
  std::vector<std::string> problems;
  io::Manifest m;
  try {
    m = io::read_manifest(dir);
  } catch (const Error& e) {
    return {cat("manifest.json cannot be trusted: ", e.what())};
  }
  // The dataset this run indexed (its SHA-256 matched run.json's), not only the manifest's word.
  if (const auto n = identity.find("dataset_samples"); n != identity.end() && n->is_number_integer() &&
                                                       n->get<int64_t>() != m.dataset_samples)
    problems.push_back(cat("manifest.json: names a dataset of ", m.dataset_samples, " samples, but the dataset has ",
                           n->get<int64_t>()));
  std::error_code ec;
  for (const io::ShardInfo& s : m.shards) {
    const fs::file_status st = fs::symlink_status(dir / s.file, ec);
    if (fs::exists(st) && !fs::is_regular_file(st)) {
      problems.push_back(cat(s.file, ": not a regular file (a symlink, a directory or a special file)"));
      continue;
    }
    const io::ShardFindings f = io::check_shard(dir, s, m, /*checksum=*/true);
    problems.insert(problems.end(), f.problems.begin(), f.problems.end());
  }
  // The counts by the rule inspect and verify apply (skipped samples included).
  const std::vector<std::string> counts = io::manifest_count_problems(m);
  problems.insert(problems.end(), counts.begin(), counts.end());
  return problems;
}

std::vector<io::ShardInfo> keep_verified_shards(const fs::path& dir, const std::string& stem,
                                                std::optional<SampleRange> samples) {
  // run.json holds this run's identity (prepare_output_dir checked it against this run's): kept
  // shards must carry the same attributes.
  const json run = read_json(dir / "run.json");
  io::ResumeExpectation want;
  if (samples) {
    want.first_sample = samples->first;
    want.end_sample = samples->end;
  }
  try {
    want.point_ids = run.at("capture_point_ids").get<std::vector<int64_t>>();
    want.storage_dtype = run.at("storage_dtype").get<std::string>();
    want.compression = run.at("compression").get<std::string>();
    want.config_sha256 = run.at("model_config_sha256").get<std::string>();
    want.weights_fingerprint = run.at("model_weights_fingerprint").get<std::string>();
    want.identity = true;
  } catch (const json::exception& e) {
    LT_FAIL("'", (dir / "run.json").string(), "' lacks this run's identity: ", e.what());
  }
  const io::ProgressCheck check = io::check_progress(dir, stem, io::read_progress(dir, stem), want);
  if (check.dropped_at >= 0)
    log_warn("resume: shard '", check.dropped_file, "' (entry ", check.dropped_at, " of ",
             io::progress_path(dir, stem).string(), ") is not kept: ", check.why, "; it and the shards after it are "
             "recomputed");
  const std::vector<io::ShardInfo>& kept = check.kept;
  // "<stem>-<digits>.h5" or ".h5.tmp": the stem compared as text (it may hold regex characters).
  const auto is_mine = [&](const std::string& name) {
    if (name.size() <= stem.size() + 1 || name.compare(0, stem.size(), stem) != 0 || name[stem.size()] != '-')
      return false;
    std::string rest = name.substr(stem.size() + 1);
    for (const std::string ext : {".h5.tmp", ".h5"})
      if (rest.size() > ext.size() && rest.compare(rest.size() - ext.size(), ext.size(), ext) == 0) {
        rest.resize(rest.size() - ext.size());
        return !rest.empty() && std::all_of(rest.begin(), rest.end(), [](char c) { return c >= '0' && c <= '9'; });
      }
    return false;
  };
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    const bool is_kept = std::any_of(kept.begin(), kept.end(), [&](const io::ShardInfo& s) { return s.file == name; });
    if (is_mine(name) && !is_kept) {
      log_info("resume: removing ", entry.path().string());
      fs::remove(entry.path());
    }
  }
  io::write_progress(dir, stem, kept);
  return kept;
}

}  // namespace layertap::job
