#include "io/output_writer.hpp"

#include "core/error.hpp"
#include "core/text.hpp"
#include "io/hdf5.hpp"
#include "io/progress.hpp"
#include "io/shard_reader.hpp"

namespace layertap::io {

OutputWriter::OutputWriter(std::filesystem::path dir, std::string stem, OutputMeta meta,
                           int64_t shard_bytes, std::vector<ShardInfo> kept, std::size_t queue_depth)
    : dir_(std::move(dir)),
      stem_(std::move(stem)),
      meta_(std::move(meta)),
      shard_bytes_(shard_bytes),
      queue_depth_(queue_depth),
      shards_(std::move(kept)) {
  shards_opened_ = shards_.size();
  meta_.validate();
  LT_CHECK(shard_bytes_ > 0, "shard size must be positive, got ", shard_bytes_, " bytes");
  LT_CHECK(queue_depth_ > 0, "writer queue depth must be at least 1");
  std::error_code ec;
  LT_CHECK(std::filesystem::is_directory(dir_, ec), "output directory '", dir_.string(),
           "' does not exist");
  writer_ = std::thread([this] { write_loop(); });
  closer_ = std::thread([this] { close_loop(); });
}

OutputWriter::~OutputWriter() {
  if (!writer_.joinable()) return;  // finish() has joined both threads
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
    queue_.clear();
  }
  changed_.notify_all();
  writer_.join();
  closer_.join();
}

void OutputWriter::throw_if_failed() const {
  if (!error_.empty()) throw Error(error_);
}

void OutputWriter::fail(const std::exception& e) {
  {
    std::lock_guard lock(mutex_);
    if (error_.empty()) {
      const std::string what = e.what();
      const bool disk_full = what.find("No space left on device") != std::string::npos;
      error_ = cat("output writer (", dir_.string(), "): ",
                   disk_full ? "the disk is full; complete shards are kept: free space and rerun with --resume. " : "",
                   what);
    }
    queue_.clear();
  }
  changed_.notify_all();
}

void OutputWriter::submit(CapturedBatch batch) {
  batch.validate(meta_.num_points(), meta_.hidden, meta_.batch_dtype(), meta_.routed_width());
  {
    std::unique_lock lock(mutex_);
    LT_CHECK(!draining_ && !stopping_, "output writer: submit() after finish()");
    changed_.wait(lock, [&] { return queue_.size() < queue_depth_ || !error_.empty(); });
    throw_if_failed();
    queue_.push_back(std::move(batch));
  }
  changed_.notify_all();
}

std::vector<ShardInfo> OutputWriter::finish() {
  {
    std::lock_guard lock(mutex_);
    LT_CHECK(!draining_, "output writer: finish() called twice");
    draining_ = true;
  }
  changed_.notify_all();
  writer_.join();
  closer_.join();
  std::lock_guard lock(mutex_);
  throw_if_failed();
  return std::move(shards_);
}

void OutputWriter::write_loop() {
  h5::quiet_errors();
  std::unique_ptr<ShardWriter> shard;  // in progress; destroying it removes its .tmp
  try {
    for (;;) {
      CapturedBatch batch;
      {
        std::unique_lock lock(mutex_);
        changed_.wait(lock, [&] {
          return stopping_ || draining_ || !queue_.empty() || !error_.empty();
        });
        if (stopping_ || !error_.empty()) break;
        if (queue_.empty()) {  // draining, and every batch is written
          lock.unlock();
          if (shard) hand_off(shard);
          break;
        }
        batch = std::move(queue_.front());
        queue_.pop_front();
      }
      changed_.notify_all();  // a slot is free for submit()
      write(batch, shard);
      if (recycle_ != nullptr) recycle_->give(std::move(batch.states));
    }
  } catch (const std::exception& e) {
    shard.reset();
    fail(e);
  }
  shard.reset();
  {
    std::lock_guard lock(mutex_);
    writer_done_ = true;
  }
  changed_.notify_all();
}

void OutputWriter::write(const CapturedBatch& batch, std::unique_ptr<ShardWriter>& shard) {
  if (!shard)
    shard = std::make_unique<ShardWriter>(dir_, shard_file_name(stem_, shards_opened_++), meta_);
  const int64_t before = shard->bytes_written();
  shard->append(batch);
  bytes_written_ += shard->bytes_written() - before;
  if (shard->bytes_written() >= shard_bytes_) hand_off(shard);
}

void OutputWriter::hand_off(std::unique_ptr<ShardWriter>& shard) {
  {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [&] { return !to_close_ || stopping_ || !error_.empty(); });
    if (stopping_ || !error_.empty()) return;  // the caller drops the shard
    to_close_ = std::move(shard);
  }
  changed_.notify_all();
}

void OutputWriter::close_loop() {
  h5::quiet_errors();
  for (;;) {
    std::unique_ptr<ShardWriter> shard;
    {
      std::unique_lock lock(mutex_);
      changed_.wait(lock, [&] { return to_close_ || writer_done_ || stopping_ || !error_.empty(); });
      if (stopping_ || !error_.empty() || !to_close_) {
        to_close_.reset();  // a failed or abandoned run: remove the pending .tmp
        return;
      }
      shard = std::move(to_close_);
    }
    changed_.notify_all();  // the writer may hand off the next shard
    try {
      ShardInfo info = shard->close();
      shard.reset();
      std::vector<ShardInfo> closed;
      {
        std::lock_guard lock(mutex_);
        shards_.push_back(std::move(info));
        closed = shards_;
      }
      write_progress(dir_, stem_, closed);
      ++shards_closed_;
    } catch (const std::exception& e) {
      shard.reset();
      fail(e);
      return;
    }
  }
}

std::vector<Fp8Fidelity> fp8_fidelity_of(const std::filesystem::path& dir, const std::vector<ShardInfo>& shards) {
  std::vector<Fp8Fidelity> total;
  for (const ShardInfo& s : shards) {
    const std::vector<Fp8Fidelity> shard = s.fp8.empty() ? ShardReader(dir / s.file).fp8_fidelity() : s.fp8;
    if (total.empty()) total.resize(shard.size());
    LT_CHECK(shard.size() == total.size(), "shard '", s.file, "' has float8 error records for ", shard.size(),
             " points, earlier shards for ", total.size());
    for (std::size_t p = 0; p < shard.size(); ++p) total[p].merge(shard[p]);
  }
  return total;
}

}  // namespace layertap::io
