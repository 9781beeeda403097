#include "io/progress.hpp"

#include "core/digest.hpp"
#include "core/error.hpp"
#include "core/regular_file.hpp"
#include "core/text.hpp"
#include "io/durable_file.hpp"
#include "io/shard_reader.hpp"
#include "model/json_fields.hpp"

namespace layertap::io {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int64_t kMax = int64_t(1) << 62;  // counts, sizes and sample indices

}  // namespace

fs::path progress_path(const fs::path& dir, const std::string& stem) {
  return dir / (stem + ".progress.json");
}

std::string shard_file_name(const std::string& stem, std::size_t index) {
  return cat(stem, "-", zero_pad(int64_t(index), 5), ".h5");
}

json to_json(const ShardInfo& s) {
  return {{"file", s.file},          {"samples", s.samples},         {"tokens", s.tokens},
          {"first_sample", s.first_sample}, {"last_sample", s.last_sample}, {"bytes", s.bytes},
          {"sha256", s.sha256}};
}

ShardInfo shard_info_from_json(const json& j, const std::string& where) {
  LT_CHECK(j.is_object(), where, " is not a JSON object");
  const JsonFields f(j, where);
  ShardInfo s;
  s.file = f.string("file");
  s.samples = f.integer("samples", 0, kMax);
  s.tokens = f.integer("tokens", 0, kMax);
  s.first_sample = f.integer("first_sample", -1, kMax);
  s.last_sample = f.integer("last_sample", -1, kMax);
  s.bytes = f.integer("bytes", 0, kMax);
  s.sha256 = f.string("sha256");
  return s;
}

void write_progress(const fs::path& dir, const std::string& stem, const std::vector<ShardInfo>& shards) {
  json list = json::array();
  for (const ShardInfo& s : shards) list.push_back(to_json(s));
  write_json_atomically(progress_path(dir, stem), {{"closed_shards", list}});
}

std::vector<ShardInfo> read_progress(const fs::path& dir, const std::string& stem) {
  const fs::path path = progress_path(dir, stem);
  std::error_code ec;
  if (!fs::exists(fs::symlink_status(path, ec))) return {};
  const json record = parse_json(read_regular_file(path.string(), "progress record"), path.string(), 8);
  LT_CHECK(record.is_object(), "progress record '", path.string(), "' is not a JSON object");
  const json& list = JsonFields(record, path.string()).array("closed_shards");
  std::vector<ShardInfo> shards;
  for (std::size_t i = 0; i < list.size(); ++i)
    shards.push_back(shard_info_from_json(list[i], cat(path.string(), " closed_shards[", i, "]")));
  return shards;
}

namespace {

// Why record `k` does not check out ("" when it does); `previous` is the record before it.
std::string record_problem(const fs::path& dir, const std::string& stem, std::size_t k, const ShardInfo& s,
                           const ShardInfo* previous, const ResumeExpectation& want) {
  const std::string name = shard_file_name(stem, k);
  if (s.file != name)
    return cat("the record names '", excerpt(s.file), "' where this writer's shard ", k, " is '", name, "'");
  const fs::path path = dir / s.file;
  std::error_code ec;
  const fs::file_status st = fs::symlink_status(path, ec);
  if (!fs::exists(st)) return "the file is missing";
  if (!fs::is_regular_file(st)) return "it is not a regular file (a symlink, a directory or a special file)";
  if (s.samples < 1 || s.first_sample < 0 || s.last_sample < s.first_sample)
    return cat("the record's sample range ", s.first_sample, "..", s.last_sample, " (", s.samples,
               " samples) is not a range");
  if (s.last_sample - s.first_sample + 1 < s.samples)
    return cat("the record's sample range ", s.first_sample, "..", s.last_sample, " cannot hold its ", s.samples,
               " samples");
  if (previous == nullptr && want.first_sample >= 0 && s.first_sample != want.first_sample)
    return cat("it starts at sample ", s.first_sample, ", the writer's samples start at ", want.first_sample);
  if (previous != nullptr && s.first_sample != previous->last_sample + 1)
    return cat("it starts at sample ", s.first_sample, ", the shard before it ends at ", previous->last_sample);
  if (want.end_sample >= 0 && s.last_sample >= want.end_sample)
    return cat("it ends at sample ", s.last_sample, ", past the writer's last sample ", want.end_sample - 1);
  if (const auto size = int64_t(fs::file_size(path, ec)); ec || size != s.bytes)
    return cat("the file is ", ec ? -1 : size, " bytes, the record says ", s.bytes);
  if (sha256_file(path.string()) != s.sha256) return "its SHA-256 differs from the record's";
  try {
    const ShardReader r(path);
    if (const auto problems = r.structure_problems(); !problems.empty()) return problems.front();
    if (r.num_samples() != s.samples) return cat("it holds ", r.num_samples(), " samples, the record says ", s.samples);
    if (r.num_tokens() != s.tokens) return cat("it holds ", r.num_tokens(), " tokens, the record says ", s.tokens);
    // In order inside the range, from its first sample to its last; a gap is a sample that
    // --on-nonfinite skip left out (the resumed run lists it as skipped again).
    const std::vector<int64_t> index = r.sample_index();
    for (std::size_t i = 0; i < index.size(); ++i) {
      const int64_t lo = i == 0 ? s.first_sample : index[i - 1] + 1;
      const bool ends = i + 1 < index.size() || index[i] == s.last_sample;
      if (index[i] < lo || index[i] > s.last_sample || (i == 0 && index[i] != s.first_sample) || !ends)
        return cat("its /sample_index holds sample ", index[i], " at position ", i, ", outside the record's range ",
                   s.first_sample, "..", s.last_sample, " in order from its first sample to its last");
    }
    if (want.identity) {
      const OutputMeta& a = r.meta();
      if (a.point_ids != want.point_ids)
        return cat("its capture point ids ", format_shape(a.point_ids), " are not this run's ",
                   format_shape(want.point_ids));
      if (dtype_name(a.dtype) != want.storage_dtype)
        return cat("it is stored as ", dtype_name(a.dtype), ", this run as ", want.storage_dtype);
      if (compression_name(a.compression) != want.compression)
        return cat("it is compressed as ", compression_name(a.compression), ", this run as ", want.compression);
      if (a.config_sha256 != want.config_sha256 || a.weights_fingerprint != want.weights_fingerprint)
        return "it was written from another model";
    }
  } catch (const Error& e) {
    return cat("it cannot be read: ", e.what());
  }
  return "";
}

}  // namespace

ProgressCheck check_progress(const fs::path& dir, const std::string& stem, const std::vector<ShardInfo>& records,
                             const ResumeExpectation& want) {
  ProgressCheck out;
  for (std::size_t k = 0; k < records.size(); ++k) {
    const std::string why = record_problem(dir, stem, k, records[k], k ? &records[k - 1] : nullptr, want);
    if (!why.empty()) {
      out.dropped_at = int64_t(k);
      out.dropped_file = excerpt(records[k].file);
      out.why = why;
      break;
    }
    out.kept.push_back(records[k]);
  }
  return out;
}

}  // namespace layertap::io
