// Durable file replacement: write under a temporary name, fsync, rename into place, fsync the
// directory. A reader never sees a half-written file under its final name, even after a crash.
#pragma once
#include <filesystem>

#include <nlohmann/json.hpp>

namespace layertap::io {

// fsync a file or a directory; throws naming it.
void fsync_path(const std::filesystem::path& path);

// rename(from, to), then fsync the directory of `to` so the new name itself is durable.
void rename_durably(const std::filesystem::path& from, const std::filesystem::path& to);

// Writes `j` (indented, newline-terminated) to `file` via "<file>.tmp" + fsync + rename_durably.
// Used for manifest.json.
void write_json_atomically(const std::filesystem::path& file, const nlohmann::json& j);

}  // namespace layertap::io
