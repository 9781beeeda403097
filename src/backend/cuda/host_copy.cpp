#include "backend/cuda/host_copy.hpp"

#include <algorithm>
#include <cstring>
#include <thread>
#include <vector>

#include "core/dtype.hpp"

namespace layertap::cuda {

namespace {
// Runs fn(begin, end) over [0, n) in up to `threads` pieces of at least `min_piece` elements.
template <typename Fn>
void split(std::size_t n, std::size_t min_piece, int threads, Fn&& fn) {
  const std::size_t pieces = std::clamp<std::size_t>(n / std::max<std::size_t>(min_piece, 1), 1,
                                                     std::size_t(std::max(threads, 1)));
  if (pieces == 1) {
    fn(std::size_t(0), n);
    return;
  }
  std::vector<std::jthread> workers;  // joined on every exit path
  const std::size_t step = (n + pieces - 1) / pieces;
  for (std::size_t b = step; b < n; b += step)
    workers.emplace_back([&fn, b, step, n] { fn(b, std::min(n, b + step)); });
  fn(std::size_t(0), std::min(n, step));
}
constexpr std::size_t kMinPieceBytes = std::size_t(8) << 20;
}  // namespace

void parallel_copy(void* dst, const void* src, std::size_t bytes, int threads) {
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  split(bytes, kMinPieceBytes, threads, [&](std::size_t b, std::size_t e) { std::memcpy(d + b, s + b, e - b); });
}

void parallel_bf16_to_f32(float* dst, const std::uint16_t* src, std::size_t n, int threads) {
  split(n, kMinPieceBytes / sizeof(float), threads, [&](std::size_t b, std::size_t e) {
    for (std::size_t i = b; i < e; ++i) dst[i] = bf16_to_float(src[i]);
  });
}

}  // namespace layertap::cuda
