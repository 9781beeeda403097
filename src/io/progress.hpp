// The progress record of one writer: "<dir>/<stem>.progress.json" lists, in order, every shard the
// writer has closed (file, samples, sample range, bytes, SHA-256). Rewritten atomically after each
// shard closes, it is what a resume starts from, and trusts only as far as check_progress() finds
// it true of the shards it names: those are kept, everything after them is recomputed.
#pragma once
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/shard_writer.hpp"

namespace layertap::io {

std::filesystem::path progress_path(const std::filesystem::path& dir, const std::string& stem);
void write_progress(const std::filesystem::path& dir, const std::string& stem, const std::vector<ShardInfo>& shards);
// Empty when the record does not exist; throws naming the file (and the entry and key) when it is
// not a regular file, not JSON, or an entry lacks a key or has one of the wrong type or range.
std::vector<ShardInfo> read_progress(const std::filesystem::path& dir, const std::string& stem);

nlohmann::json to_json(const ShardInfo& s);
// Throws naming `where` and the key that is missing, of the wrong type or out of range.
ShardInfo shard_info_from_json(const nlohmann::json& j, const std::string& where = "progress record entry");

// "<stem>-NNNNN.h5": the name the writer gives its shard number `index` (five digits, wider past 99999).
std::string shard_file_name(const std::string& stem, std::size_t index);

// What the shards a resumed writer keeps must agree with, besides their own records.
struct ResumeExpectation {
  // The writer's samples, dataset indices [first_sample, end_sample); -1 where unknown.
  int64_t first_sample = -1, end_sample = -1;
  // This run's shard attributes (run.json); checked when `identity` is set.
  bool identity = false;
  std::vector<int64_t> point_ids;
  std::string storage_dtype, compression, config_sha256, weights_fingerprint;
};

struct ProgressCheck {
  std::vector<ShardInfo> kept;  // the leading records that check out, in order
  // When a record does not check out: its position, its file name (an excerpt) and why; that
  // record and every later one are not kept.
  int64_t dropped_at = -1;
  std::string dropped_file, why;
};

// Checks `records` (writer `stem`'s progress record) in order against the files they name in `dir`,
// up to the first that does not check out. Record k must name "<stem>-<k>.h5" (a plain file name:
// nothing outside `dir`, nothing another writer owns), a regular file (not a symlink) of the
// recorded size and SHA-256, readable and well-formed, whose /sample_index is exactly the recorded
// range first_sample..last_sample (samples and tokens as recorded), starting at `want.first_sample`
// for record 0 and right after the previous record's last sample otherwise, ending before
// `want.end_sample`, and whose attributes match `want`'s identity. Inside the range, /sample_index
// runs in increasing order from first_sample to last_sample; the samples it lacks (gaps) are those
// --on-nonfinite skip left out, and such a shard is kept like any other (the resumed run lists
// its gaps as skipped: job::skipped_before_resume).
ProgressCheck check_progress(const std::filesystem::path& dir, const std::string& stem,
                             const std::vector<ShardInfo>& records, const ResumeExpectation& want);

}  // namespace layertap::io
