// Carving one allocation into aligned tensors. A layout function written once runs twice: over a
// counting arena (no memory) to size the block, then over the block itself to place the tensors.
#pragma once
#include <cstddef>
#include <cstdint>
#include <initializer_list>

#include "core/checked.hpp"
#include "core/error.hpp"

namespace layertap::cuda {

class Arena {
 public:
  static constexpr std::size_t kAlign = 256;  // cudaMalloc's alignment; what cuBLASLt asks of operands
  // `bytes` rounded up to kAlign: where the next take after them starts.
  static constexpr std::size_t aligned(std::size_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

  Arena() = default;                                              // counts only; pointers are null
  Arena(std::byte* base, std::size_t capacity) : base_(base), capacity_(capacity) {}

  // The next `count` elements of T, kAlign-aligned; null when counting or when count == 0. Sizes
  // come from configs: the byte count and the running total are checked, never wrapped.
  template <typename T>
  T* take(std::int64_t count) {
    LT_CHECK(count >= 0, "arena: negative element count ", count);
    if (count == 0) return nullptr;
    const std::size_t offset = aligned(used_);
    const std::int64_t bytes = checked_mul(count, std::int64_t(sizeof(T)), "arena: a buffer's bytes");
    used_ = std::size_t(checked_add(std::int64_t(offset), bytes, "arena: the block's bytes"));
    last_offset_ = offset;
    LT_CHECK(base_ == nullptr || used_ <= capacity_, "arena: layout needs ", used_, " bytes, block holds ", capacity_);
    return base_ == nullptr ? nullptr : reinterpret_cast<T*>(base_ + offset);
  }
  // The next `a x b x ...` elements of T: the product checked (model sizes multiply fast).
  template <typename T>
  T* take(std::initializer_list<std::int64_t> factors) {
    return take<T>(checked_product(factors, "arena: a buffer's element count"));
  }
  std::size_t used() const { return used_; }
  // Offset of the last non-empty take from the start of the block (counting arenas too).
  std::size_t last_offset() const { return last_offset_; }

 private:
  std::byte* base_ = nullptr;
  std::size_t capacity_ = 0;
  std::size_t used_ = 0;
  std::size_t last_offset_ = 0;
};

}  // namespace layertap::cuda
