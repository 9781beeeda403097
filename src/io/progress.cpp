#include "io/progress.hpp"

#include <fstream>

#include "core/error.hpp"
#include "io/durable_file.hpp"

namespace layertap::io {

using nlohmann::json;

std::filesystem::path progress_path(const std::filesystem::path& dir, const std::string& stem) {
  return dir / (stem + ".progress.json");
}

json to_json(const ShardInfo& s) {
  return {{"file", s.file},          {"samples", s.samples},         {"tokens", s.tokens},
          {"first_sample", s.first_sample}, {"last_sample", s.last_sample}, {"bytes", s.bytes},
          {"sha256", s.sha256}};
}

ShardInfo shard_info_from_json(const json& j) {
  ShardInfo s;
  s.file = j.at("file").get<std::string>();
  s.samples = j.at("samples").get<int64_t>();
  s.tokens = j.at("tokens").get<int64_t>();
  s.first_sample = j.at("first_sample").get<int64_t>();
  s.last_sample = j.at("last_sample").get<int64_t>();
  s.bytes = j.at("bytes").get<int64_t>();
  s.sha256 = j.at("sha256").get<std::string>();
  return s;
}

void write_progress(const std::filesystem::path& dir, const std::string& stem, const std::vector<ShardInfo>& shards) {
  json list = json::array();
  for (const ShardInfo& s : shards) list.push_back(to_json(s));
  write_json_atomically(progress_path(dir, stem), {{"closed_shards", list}});
}

std::vector<ShardInfo> read_progress(const std::filesystem::path& dir, const std::string& stem) {
  const auto path = progress_path(dir, stem);
  std::ifstream in(path);
  if (!in) return {};
  std::vector<ShardInfo> shards;
  try {
    const json record = json::parse(in);  // named: a temporary would die before the loop body runs
    for (const json& s : record.at("closed_shards")) shards.push_back(shard_info_from_json(s));
  } catch (const json::exception& e) {
    LT_FAIL("progress record '", path.string(), "' is malformed: ", e.what());
  }
  return shards;
}

}  // namespace layertap::io
