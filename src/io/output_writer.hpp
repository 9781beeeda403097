// The writer thread: receives captured batches from the forward pass through a bounded queue,
// appends them to the current shard and rotates shards, so compute and I/O overlap. A second
// thread closes full shards (fsync, SHA-256 of the whole file, rename) while the writer thread
// fills the next one: checksumming a multi-GiB shard takes about as long as writing it. With
// float8 storage or compression each shard also has worker threads (meta.compression.threads)
// that quantize and compress its chunks (io/shard_writer.hpp).
#pragma once
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <filesystem>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/buffer_pool.hpp"
#include "core/captured_batch.hpp"
#include "io/durable_file.hpp"  // write_json_atomically, for the manifest
#include "io/shard_writer.hpp"

namespace layertap::io {

class OutputWriter {
 public:
  // Shard files are <dir>/<stem>-NNNNN.h5, NNNNN counting from 00000. A shard is closed once it
  // holds >= shard_bytes of hidden states; a batch is never split across shards. `kept` are the
  // shards a resumed run keeps: numbering continues after them. After each close the writer's
  // progress record (io/progress.hpp) is rewritten with every closed shard.
  OutputWriter(std::filesystem::path dir, std::string stem, OutputMeta meta, int64_t shard_bytes,
               std::vector<ShardInfo> kept = {}, std::size_t queue_depth = 2);
  // If finish() was not called: stops the threads, drops queued batches and removes the .tmp file
  // of every shard not yet closed. Shards already closed stay (each is complete in itself; without
  // a manifest the run is incomplete).
  ~OutputWriter();
  OutputWriter(const OutputWriter&) = delete;
  OutputWriter& operator=(const OutputWriter&) = delete;

  // Validates `batch` against the meta (its states in meta.batch_dtype()) and hands it to the
  // writer thread. Blocks while
  // queue_depth batches wait. Throws the writer's error (as layertap::Error) once it has one.
  void submit(CapturedBatch batch);

  // Drains the queue, closes the last shard, joins the threads; returns every shard in order.
  // Throws the writer's error, if any.
  std::vector<ShardInfo> finish();

  // Once a batch is written its states' buffers go back to `pool` (core/buffer_pool.hpp), for the
  // forward to fill again; set before the first submit.
  void recycle_into(BufferPool* pool) { recycle_ = pool; }

  int64_t bytes_written() const { return bytes_written_.load(); }  // hidden-state payload bytes
  int64_t shards_closed() const { return shards_closed_.load(); }

 private:
  void write_loop();  // writer thread: batches -> current shard
  void close_loop();  // closer thread: full shards -> closed, fsynced, checksummed, renamed
  void write(const CapturedBatch& batch, std::unique_ptr<ShardWriter>& shard);
  void hand_off(std::unique_ptr<ShardWriter>& shard);  // to the closer; waits while one is pending
  void fail(const std::exception& e);
  void throw_if_failed() const;  // call with mutex_ held
  BufferPool* recycle_ = nullptr;

  const std::filesystem::path dir_;
  const std::string stem_;
  const OutputMeta meta_;
  const int64_t shard_bytes_;
  const std::size_t queue_depth_;
  std::size_t shards_opened_ = 0;  // numbers the next shard; writer thread only

  // All guarded by mutex_; every change is announced on changed_.
  std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<CapturedBatch> queue_;
  std::unique_ptr<ShardWriter> to_close_;  // a full shard waiting for the closer
  bool draining_ = false;     // finish() called: write what is queued, close, stop
  bool stopping_ = false;     // destructor: drop what is queued and what is not closed, stop
  bool writer_done_ = false;  // the writer thread has handed off its last shard
  std::string error_;         // the first error of either thread; non-empty once failed
  std::vector<ShardInfo> shards_;  // closed shards, in order

  std::atomic<int64_t> bytes_written_{0};
  std::atomic<int64_t> shards_closed_{0};
  std::thread writer_, closer_;
};

// float8 storage: each capture point's error against bf16 over `shards` (ShardInfo::fp8 where the
// writer filled it, else read from the shard in `dir`, e.g. shards kept by a resume); [P].
std::vector<Fp8Fidelity> fp8_fidelity_of(const std::filesystem::path& dir, const std::vector<ShardInfo>& shards);

}  // namespace layertap::io
