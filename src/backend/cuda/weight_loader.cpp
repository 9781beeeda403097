#include "backend/cuda/weight_loader.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/dtype.hpp"
#include "core/error.hpp"
#include "core/host_memory.hpp"
#include "core/stop_request.hpp"
#include "model/stored_window.hpp"

namespace layertap::cuda {

namespace {

using Convert = WeightCopy::Convert;

// Rows [row0, row0 + rows) of one copy's window: what one slot holds.
struct Chunk {
  std::size_t copy = 0;
  std::int64_t row0 = 0, rows = 0;
};

std::size_t out_row_bytes(const WeightCopy& c) { return c.src.rows > 0 ? c.dst_bytes / std::size_t(c.src.rows) : 0; }

// Converts `n` values of the window from `in` to `out` (checked before, as stored).
void convert(const WeightCopy& c, const std::byte* in, std::byte* out, std::size_t n) {
  const DType d = c.src.tensor->dtype;
  for (std::size_t i = 0; i < n; ++i) {
    const float v = stored_value(d, in, i);
    if (c.convert == Convert::ToFloat32) {
      std::memcpy(out + 4 * i, &v, 4);
      continue;
    }
    std::uint16_t b = float_to_bf16(v);
    if (c.convert == Convert::RouterLow) b = float_to_bf16(v - bf16_to_float(b));
    std::memcpy(out + 2 * i, &b, 2);
  }
}

}  // namespace

std::byte* HostTarget::allocate_slot(std::size_t bytes) { return new std::byte[bytes]; }
void HostTarget::free_slot(std::byte* slot) { delete[] slot; }
void HostTarget::put(int, int, std::size_t dst, const std::byte* staged, std::size_t bytes) {
  if (image_ != nullptr) std::memcpy(image_ + dst, staged, bytes);
}
void HostTarget::put_rows(int, int, std::size_t dst, std::size_t pitch, const std::byte* staged, std::size_t width,
                          std::size_t rows) {
  if (image_ != nullptr)
    for (std::size_t r = 0; r < rows; ++r) std::memcpy(image_ + dst + r * pitch, staged + r * width, width);
}

LoadStats run_load_plan(const LoadPlan& plan, LoadTarget& target, const LoaderOptions& o) {
  LT_CHECK(o.threads >= 1 && o.slots_per_thread >= 1 && o.slot_bytes > 0, "weight loader: needs at least one thread "
           "and one slot");
  const auto t0 = std::chrono::steady_clock::now();
  // A slot holds at least one row of any window (a row is at most a few hundred KiB in real models).
  std::size_t slot_bytes = o.slot_bytes;
  for (const WeightCopy& c : plan.copies)
    slot_bytes = std::max({slot_bytes, std::size_t(c.src.width), out_row_bytes(c)});
  std::vector<Chunk> chunks;
  for (std::size_t i = 0; i < plan.copies.size(); ++i) {
    const WeightCopy& c = plan.copies[i];
    const std::size_t row = std::max<std::size_t>({1, std::size_t(c.src.width), out_row_bytes(c)});
    const std::int64_t per = std::int64_t(slot_bytes / row);
    for (std::int64_t r = 0; r < c.src.rows; r += per) chunks.push_back({i, r, std::min(per, c.src.rows - r)});
  }
  const std::uint64_t calls0 = window_read_calls();
  std::atomic<std::size_t> next{0}, written{0};
  std::atomic<bool> failed{false};
  std::atomic<std::int64_t> peak{anonymous_resident_bytes()};
  std::exception_ptr error;
  std::mutex error_mutex;
  const auto sample_memory = [&] {
    const std::int64_t now = anonymous_resident_bytes();
    std::int64_t seen = peak.load();
    while (now > seen && !peak.compare_exchange_weak(seen, now)) {
    }
  };

  const auto worker = [&](int t) {
    std::vector<std::byte*> slots;
    try {
      target.begin_thread(t);
      for (int k = 0; k < o.slots_per_thread; ++k) slots.push_back(target.allocate_slot(slot_bytes));
      std::vector<std::byte> raw;  // conversion input, allocated on first use
      int k = 0;
      for (std::size_t n = 0; !failed.load(); ++n) {
        stop_point("loading the weights");
        const std::size_t i = next.fetch_add(1);
        if (i >= chunks.size()) break;
        const Chunk& ch = chunks[i];
        const WeightCopy& c = plan.copies[ch.copy];
        const std::size_t in_bytes = std::size_t(ch.rows * c.src.width), out_bytes = std::size_t(ch.rows) * out_row_bytes(c);
        const std::size_t values = in_bytes / dtype_size(c.src.tensor->dtype);
        target.wait(t, k);
        if (c.transpose) {
          // Stored rows [row0, +rows) of the x @ W window are inputs: bf16 (rows, out) in `raw`, then
          // (out, rows) in the slot, each output row's piece at row0 of its row in the block.
          const std::size_t out = out_row_bytes(c) / 2, in = std::size_t(c.src.rows);
          raw.resize(2 * slot_bytes);
          std::byte* const bf = raw.data() + slot_bytes;
          read_window_rows(c.src, ch.row0, ch.rows, raw.data());
          check_window_values(c.src, ch.row0, raw.data(), values, c.check);
          if (c.convert == Convert::AsStored) std::memcpy(bf, raw.data(), out_bytes);
          else convert(c, raw.data(), bf, values);
          std::byte* const slot = slots[std::size_t(k)];
          for (std::size_t r = 0; r < std::size_t(ch.rows); ++r)
            for (std::size_t col = 0; col < out; ++col)
              std::memcpy(slot + (col * std::size_t(ch.rows) + r) * 2, bf + (r * out + col) * 2, 2);
          target.put_rows(t, k, c.dst + std::size_t(ch.row0) * 2, in * 2, slot, std::size_t(ch.rows) * 2, out);
          written += out_bytes;
          k = (k + 1) % o.slots_per_thread;
          continue;
        }
        if (c.convert == Convert::AsStored) {
          read_window_rows(c.src, ch.row0, ch.rows, slots[std::size_t(k)]);
          check_window_values(c.src, ch.row0, slots[std::size_t(k)], values, c.check);
        } else {
          raw.resize(slot_bytes);
          read_window_rows(c.src, ch.row0, ch.rows, raw.data());
          check_window_values(c.src, ch.row0, raw.data(), values, c.check);
          convert(c, raw.data(), slots[std::size_t(k)], values);
        }
        target.put(t, k, c.dst + std::size_t(ch.row0) * out_row_bytes(c), slots[std::size_t(k)], out_bytes);
        written += out_bytes;
        if (n % 16 == 0) sample_memory();
        k = (k + 1) % o.slots_per_thread;
      }
      for (int s = 0; s < o.slots_per_thread; ++s) target.wait(t, s);
    } catch (...) {
      failed = true;
      const std::lock_guard<std::mutex> lock(error_mutex);
      if (!error) error = std::current_exception();
      // A copy may still read a slot: wait for it before the slot is freed (errors ignored now).
      for (int s = 0; s < int(slots.size()); ++s) try {
          target.wait(t, s);
        } catch (...) {
        }
    }
    sample_memory();
    for (std::byte* s : slots) target.free_slot(s);
  };
  // jthread: a thread that fails to start throws here, and the ones already started are joined
  // as the vector unwinds (a joinable std::thread would terminate the process).
  std::vector<std::jthread> threads;
  for (int t = 1; t < o.threads; ++t) threads.emplace_back(worker, t);
  worker(0);
  for (std::jthread& th : threads) th.join();
  if (error) std::rethrow_exception(error);
  LoadStats stats;
  stats.bytes_read = plan.read_bytes;
  stats.bytes_written = written.load();
  stats.copies = plan.copies.size();
  stats.read_calls = window_read_calls() - calls0;  // this process's: the ranks of a node load at once
  stats.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  stats.peak_anonymous_bytes = peak.load();
  return stats;
}

}  // namespace layertap::cuda
