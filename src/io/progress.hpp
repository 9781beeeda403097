// The progress record of one writer: "<dir>/<stem>.progress.json" lists, in order, every shard the
// writer has closed (file, samples, sample range, bytes, SHA-256). Rewritten atomically after each
// shard closes, it is what a resume trusts: shards it lists and whose checksum still matches are
// kept, everything after them is recomputed.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "io/shard_writer.hpp"

namespace layertap::io {

std::filesystem::path progress_path(const std::filesystem::path& dir, const std::string& stem);
void write_progress(const std::filesystem::path& dir, const std::string& stem, const std::vector<ShardInfo>& shards);
// Empty when the record does not exist; throws naming the file when it is malformed.
std::vector<ShardInfo> read_progress(const std::filesystem::path& dir, const std::string& stem);

nlohmann::json to_json(const ShardInfo& s);
ShardInfo shard_info_from_json(const nlohmann::json& j);

}  // namespace layertap::io
