// Byte buffers that go round a loop instead of being allocated each time: the states captured
// from one batch go to the writer and come back once written, so their memory is faulted in once
// per run, not once per batch (Kimi-K2.5, 8,192 tokens, 4 points: 470 MB, about 0.15 s of page
// faults and zeroing on one host thread). Thread-safe: the writer gives, the forward takes.
#pragma once
#include <cstddef>
#include <mutex>
#include <vector>

namespace layertap {

class BufferPool {
 public:
  explicit BufferPool(std::size_t max_kept) : max_kept_(max_kept) {}

  // A buffer of exactly `bytes` bytes: a kept one when one is large enough (its contents are
  // whatever they were), else a new zero-filled one; `fresh` says which.
  std::vector<std::byte> take(std::size_t bytes, bool* fresh = nullptr);
  // Keeps `buffer` for a later take: while fewer than max_kept are kept, or in place of a smaller
  // kept one; else frees it.
  void give(std::vector<std::byte>&& buffer);
  void give(std::vector<std::vector<std::byte>>&& buffers);

 private:
  std::mutex mutex_;
  std::vector<std::vector<std::byte>> kept_;
  std::size_t max_kept_;
};

}  // namespace layertap
