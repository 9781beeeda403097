#include "core/buffer_pool.hpp"

#include <algorithm>
#include <utility>

namespace layertap {

std::vector<std::byte> BufferPool::take(std::size_t bytes, bool* fresh) {
  {
    std::lock_guard lock(mutex_);
    // The smallest kept buffer that holds `bytes` without growing.
    auto best = kept_.end();
    for (auto it = kept_.begin(); it != kept_.end(); ++it)
      if (it->capacity() >= bytes && (best == kept_.end() || it->capacity() < best->capacity())) best = it;
    if (best != kept_.end()) {
      std::vector<std::byte> b = std::move(*best);
      kept_.erase(best);
      b.resize(bytes);  // within its capacity: no reallocation; a grown tail is zeroed
      if (fresh != nullptr) *fresh = false;
      return b;
    }
  }
  if (fresh != nullptr) *fresh = true;
  return std::vector<std::byte>(bytes);
}

void BufferPool::give(std::vector<std::byte>&& buffer) {
  if (buffer.capacity() == 0) return;
  std::lock_guard lock(mutex_);
  if (kept_.size() < max_kept_) {
    kept_.push_back(std::move(buffer));
    return;
  }
  // Full: keep the larger buffers (batches vary in size; a small one serves fewer of them).
  const auto smallest = std::min_element(kept_.begin(), kept_.end(),
                                         [](const auto& a, const auto& b) { return a.capacity() < b.capacity(); });
  if (smallest != kept_.end() && smallest->capacity() < buffer.capacity()) *smallest = std::move(buffer);
}

void BufferPool::give(std::vector<std::vector<std::byte>>&& buffers) {
  for (auto& b : buffers) give(std::move(b));
  buffers.clear();
}

}  // namespace layertap
