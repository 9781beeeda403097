// The output directory's life cycle: a fresh run, --overwrite, and --resume of an interrupted run.
//   run.json                    written first (rank 0): what identifies the run for a resume
//   <stem>.progress.json        per writer: the shards it has closed (io/progress.hpp)
//   shard-*.h5                  complete shards; *.h5.tmp are unfinished and never trusted
//   manifest.json               written last; "complete": false after a graceful stop
//   .layertap.lock              the lock that keeps a second job out (io/output_lock.hpp)
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/dtype.hpp"
#include "io/shard_writer.hpp"

namespace layertap::job {

enum class OutputState { Fresh, Resume, AlreadyComplete };

// Every rank, before any input is read: `dir` is an existing writable directory, or can be created
// (its nearest existing ancestor is a writable directory). A file, a special file or an unwritable
// place is refused naming the path, so a long dataset read never ends in an unwritable output.
void check_output_path(const std::filesystem::path& dir);

// Bytes free for an unprivileged writer on the file system that holds `dir` (or, before it
// exists, its nearest existing ancestor).
int64_t free_bytes_at(const std::filesystem::path& dir);

// Bytes of layertap shards already in `dir` (kept by --resume, replaced by --overwrite).
int64_t shard_bytes_in(const std::filesystem::path& dir);

// Free space at `dir`, counting the shards already there as available when `reuse` (--resume
// keeps them, --overwrite replaces them).
int64_t available_bytes(const std::filesystem::path& dir, bool reuse);

// What an output holds: hidden states [T, P, H] of `dtype` for `samples` samples of T tokens.
struct OutputShape {
  int64_t tokens = 0, samples = 0, points = 0, hidden = 0;
  DType dtype = DType::BF16;
  // Bytes of one point of one token's state (float8 storage adds a float32 scale per token and point).
  int64_t point_bytes_per_token() const;
};

// Bytes of an output: its hidden states, input ids (int32) and loss masks (uint8) per token,
// offsets and sample indices (int64) per sample, and per shard its HDF5 metadata; `groups` writers
// close a shard every `shard_bytes` of hidden states. Lossless compression is not counted (the
// projection is an upper bound for it).
int64_t projected_output_bytes(const OutputShape& output, int64_t groups, int64_t shard_bytes);

// World rank 0 only, before any shard is written. Creates the directory and proves it writable.
// An earlier run in it is refused unless `overwrite` (its files are removed) or `resume`: then its
// run.json must equal `identity` (the error names each key that differs) and an incomplete
// manifest is removed. A manifest that says the run is complete is re-checked first (every shard
// it lists a regular file of its size and SHA-256, well-formed and agreeing with it, the totals
// adding up): AlreadyComplete only when all of it checks out; otherwise each finding is logged as
// a warning naming the shard, the manifest is removed and the answer is Resume, so the writers
// recompute what does not check out (keep_verified_shards). Writes run.json for a fresh run.
// `take_lock`: takes the --out lock (io::OutputLock::exclusive, held until the process ends) once
// the directory exists, after refusing a new run among foreign files (so such a directory is left
// as it was) and before anything else is read or written; false when the caller holds it already
// (or --no-lock). The lock file is layertap's own: neither an earlier run's file nor a foreign one,
// and never removed.
OutputState prepare_output_dir(const std::filesystem::path& dir, const nlohmann::json& identity, bool overwrite,
                               bool resume, bool take_lock);

// Why a manifest that says "complete" does not describe the files in `dir` or the dataset of this
// run's `identity` (run_identity: its "dataset_samples"); one line per finding, each naming the
// shard or key; empty when it does. Reads every shard in full (SHA-256).
std::vector<std::string> complete_run_problems(const std::filesystem::path& dir, const nlohmann::json& identity);

// A writer's samples: dataset indices [first, end) (its data-parallel group's contiguous run).
struct SampleRange {
  int64_t first = 0, end = 0;
};

// Writer only, on resume: the shards listed in the writer's progress record that check out against
// their files (io::check_progress: "<stem>-NNNNN.h5" names in order, regular files of the recorded
// size and SHA-256, /sample_index equal to the recorded range, ranges contiguous from the first of
// `samples` when given, attributes matching run.json), in order, up to the first that does not,
// which is logged as a warning naming it and why. This writer's other shard and temporary files are
// removed, so what follows is rewritten, and the record is rewritten to the kept shards. A record
// that is not valid JSON of the right shape is refused naming the file.
std::vector<io::ShardInfo> keep_verified_shards(const std::filesystem::path& dir, const std::string& stem,
                                                std::optional<SampleRange> samples = std::nullopt);

}  // namespace layertap::job
