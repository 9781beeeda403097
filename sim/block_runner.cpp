// Kernel execution on the simulated GPU: the launch checks, then each block of the grid (in a
// random order) with every CUDA thread as a fiber (Boost.Context's fcontext switches, annotated
// for AddressSanitizer). A fiber runs until it reaches a barrier or a warp collective, or ends.
// Between two barriers the block's scheduler runs one warp at a time, in a random warp order, to
// its next __syncthreads: its lanes in a fresh random order, its collectives computed for all its
// lanes at once when they have all arrived. So a missing barrier lets one warp overwrite shared
// memory that another has not read yet, and results change. Misuse (a collective whose lanes
// disagree or have exited, a barrier only some threads reach) is a device fault naming the kernel.
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <boost/context/detail/fcontext.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "sim/device_code.hpp"
#include "sim/kernel_launch.hpp"
#include "sim/simulator.hpp"

// LAYERTAP_SIM_ASAN (sanitizer builds, sim/CMakeLists.txt): this file itself is compiled without
// AddressSanitizer's instrumentation (the scheduler is most of the simulator's time), but the
// process runs under it, so fiber switches and reused stacks are announced to it.
#if defined(LAYERTAP_SIM_ASAN)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define LT_SIM_ASAN 1
#else
#define LT_SIM_ASAN 0
#endif

namespace bc = boost::context::detail;

namespace layertap::sim {

thread_local const ThreadContext* current_thread = nullptr;

namespace {

// ASan's instrumented frames are several times larger.
constexpr std::size_t kStackBytes = LT_SIM_ASAN ? (std::size_t(1) << 20) : (std::size_t(256) << 10);

struct Stack {
  std::byte* base = nullptr;  // a guard page, then kStackBytes
  std::byte* deepest_live = nullptr;  // ASan: the lowest frame still live when its fiber ended
  std::byte* bottom() const { return base + getpagesize(); }
  std::byte* top() const { return bottom() + kStackBytes; }
};

// Stacks are reused across blocks on the same OS thread (a stream worker).
struct StackPool {
  std::vector<Stack> free;
  ~StackPool() {
    for (Stack& s : free) {
#if LT_SIM_ASAN
      // The shadow outlives the mapping: clear it, or a later mapping at this address (a
      // checkpoint's pages) would inherit the redzones.
      __asan_unpoison_memory_region(s.bottom(), kStackBytes);
#endif
      munmap(s.base, kStackBytes + std::size_t(getpagesize()));
    }
  }
  Stack take() {
    if (!free.empty()) {
      Stack s = free.back();
      free.pop_back();
#if LT_SIM_ASAN
      // A finished fiber's last frames (lane_main's, switch_to_scheduler's) never returned: clear
      // their redzones before reuse. Deeper frames returned and cleared their own.
      if (s.deepest_live != nullptr) {
        std::byte* from = std::max(s.bottom(), s.deepest_live - 4096);
        __asan_unpoison_memory_region(from, std::size_t(s.top() - from));
      }
#endif
      return s;
    }
    const std::size_t page = std::size_t(getpagesize());
    void* p = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                   -1, 0);
    if (p == MAP_FAILED) {
      report("cannot map a fiber stack");
      std::abort();
    }
    mprotect(p, page, PROT_NONE);  // overflow faults instead of corrupting the next stack
    return Stack{static_cast<std::byte*>(p)};
  }
};
thread_local StackPool stack_pool;

enum class State { runnable, at_barrier, at_warp, done };
enum class WarpOp { sync, shfl_xor, ballot, mma, ldmatrix };

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::sync: return "__syncwarp";
    case WarpOp::shfl_xor: return "__shfl_xor_sync";
    case WarpOp::ballot: return "__ballot_sync";
    case WarpOp::mma: return "mma.sync.m16n8k16";
    case WarpOp::ldmatrix: return "ldmatrix";
  }
  return "?";
}

// A cp.async the thread issued and has not waited for yet.
struct AsyncCopy {
  std::byte* dst = nullptr;
  const std::byte* src = nullptr;
  int cp_size = 0, src_size = 0;
  std::int64_t group = -1;  // -1 until cp.async.commit_group
};

struct Lane {
  ThreadContext ctx{};
  State state = State::runnable;
  bc::fcontext_t fiber = nullptr;
  Stack stack;
  void* fake_stack = nullptr;  // ASan's fake stack of this fiber while it is switched out
  // The collective it waits at, its inputs and its result.
  WarpOp op = WarpOp::sync;
  unsigned mask = 0;
  int lane_mask = 0, width = 32;
  bool predicate = false;
  std::uint32_t in[10] = {};
  const void* address = nullptr;
  int ld_count = 4;      // ldmatrix: matrices (1, 2, 4)
  bool ld_trans = true;  // ldmatrix: .trans
  std::uint32_t out[4] = {};
  // cp.async: pending copies in issue order, and the groups committed so far.
  std::vector<AsyncCopy> copies;
  std::int64_t groups_committed = 0;
};

struct Block {
  const KernelLaunch* launch = nullptr;
  std::vector<Lane> lanes;
  bc::fcontext_t scheduler = nullptr;
  Lane* running = nullptr;
  std::vector<std::byte> dynamic_shared;
  std::string error;
  const void* scheduler_stack = nullptr;  // ASan: the stack a fiber switches back to
  std::size_t scheduler_stack_bytes = 0;
};
thread_local Block* current_block = nullptr;

// Fiber side: back to the block's scheduler; returns when resumed (never when `final`).
void switch_to_scheduler(Lane& lane, bool final) {
  Block* b = current_block;
  if (final) lane.stack.deepest_live = static_cast<std::byte*>(__builtin_frame_address(0));
#if LT_SIM_ASAN
  __sanitizer_start_switch_fiber(final ? nullptr : &lane.fake_stack, b->scheduler_stack, b->scheduler_stack_bytes);
#else
  (void)lane;
  (void)final;
#endif
  const bc::transfer_t t = bc::jump_fcontext(b->scheduler, nullptr);
  b = current_block;
  b->scheduler = t.fctx;
#if LT_SIM_ASAN
  __sanitizer_finish_switch_fiber(lane.fake_stack, &b->scheduler_stack, &b->scheduler_stack_bytes);
#endif
}

void lane_main(bc::transfer_t t) {
  Block* b = current_block;
  b->scheduler = t.fctx;
  Lane& lane = *static_cast<Lane*>(t.data);
#if LT_SIM_ASAN
  __sanitizer_finish_switch_fiber(nullptr, &b->scheduler_stack, &b->scheduler_stack_bytes);
#endif
  try {
    b->launch->run_thread();
  } catch (const std::exception& e) {
    current_block->error = std::string("exception in device code: ") + e.what();
  } catch (...) {
    current_block->error = "exception in device code";
  }
  lane.state = State::done;
  switch_to_scheduler(lane, true);
  std::abort();  // a finished fiber is never resumed
}

// Scheduler side: runs `lane` until it blocks or ends.
void resume(Block& b, Lane& lane) {
  current_thread = &lane.ctx;
  b.running = &lane;
#if LT_SIM_ASAN
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(&fake, lane.stack.bottom(), kStackBytes);
#endif
  const bc::transfer_t t = bc::jump_fcontext(lane.fiber, &lane);
#if LT_SIM_ASAN
  __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
  lane.fiber = t.fctx;
  b.running = nullptr;
}

Lane& calling_lane(const char* call) {
  if (current_block == nullptr || current_block->running == nullptr) {
    report(std::string(call) + " called outside a kernel");
    std::abort();
  }
  return *current_block->running;
}

// Device code reporting misuse: the block stops with the error (the calling thread ends).
[[noreturn]] void kill_block(Lane& lane, const std::string& error) {
  if (current_block->error.empty()) current_block->error = error;
  lane.state = State::done;
  switch_to_scheduler(lane, true);
  std::abort();
}

void wait_at_warp(Lane& lane, WarpOp op, unsigned mask) {
  lane.op = op;
  lane.mask = mask;
  lane.state = State::at_warp;
  switch_to_scheduler(lane, false);
}

std::uint32_t lo16(std::uint32_t v) { return v & 0xffffu; }
std::uint32_t hi16(std::uint32_t v) { return v >> 16; }
float bf16_bits_to_float(std::uint32_t bits) { return std::bit_cast<float>(bits << 16); }

// mma.m16n8k16 fragments (PTX ISA, "Matrix Fragments for mma.m16n8k16" with .bf16 inputs and
// .f32 accumulators), g = lane / 4, c = lane % 4, the lower index in a register's low half:
//   A 16x16: a0 (g, 2c..2c+1)  a1 (g+8, 2c..2c+1)  a2 (g, 2c+8..2c+9)  a3 (g+8, 2c+8..2c+9)
//   B 16x8:  b0 (k 2c..2c+1, n g)   b1 (k 2c+8..2c+9, n g)
//   C/D 16x8 f32: c0 c1 (g, 2c..2c+1)   c2 c3 (g+8, 2c..2c+1)
void compute_mma(Lane* lanes) {
  float A[16][16], B[16][8], C[16][8];
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, c = l % 4;
    const std::uint32_t* in = lanes[l].in;  // a0..a3, b0, b1, d0..d3 (float bits)
    const int rows[4] = {g, g + 8, g, g + 8}, cols[4] = {2 * c, 2 * c, 2 * c + 8, 2 * c + 8};
    for (int r = 0; r < 4; ++r) {
      A[rows[r]][cols[r]] = bf16_bits_to_float(lo16(in[r]));
      A[rows[r]][cols[r] + 1] = bf16_bits_to_float(hi16(in[r]));
    }
    B[2 * c][g] = bf16_bits_to_float(lo16(in[4]));
    B[2 * c + 1][g] = bf16_bits_to_float(hi16(in[4]));
    B[2 * c + 8][g] = bf16_bits_to_float(lo16(in[5]));
    B[2 * c + 9][g] = bf16_bits_to_float(hi16(in[5]));
    C[g][2 * c] = std::bit_cast<float>(in[6]);
    C[g][2 * c + 1] = std::bit_cast<float>(in[7]);
    C[g + 8][2 * c] = std::bit_cast<float>(in[8]);
    C[g + 8][2 * c + 1] = std::bit_cast<float>(in[9]);
  }
  float D[16][8];
  for (int m = 0; m < 16; ++m) {
    for (int n = 0; n < 8; ++n) {
      float acc = C[m][n];
      for (int k = 0; k < 16; ++k) acc += A[m][k] * B[k][n];  // products of bf16 are exact in f32
      D[m][n] = acc;
    }
  }
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, c = l % 4;
    lanes[l].out[0] = std::bit_cast<std::uint32_t>(D[g][2 * c]);
    lanes[l].out[1] = std::bit_cast<std::uint32_t>(D[g][2 * c + 1]);
    lanes[l].out[2] = std::bit_cast<std::uint32_t>(D[g + 8][2 * c]);
    lanes[l].out[3] = std::bit_cast<std::uint32_t>(D[g + 8][2 * c + 1]);
  }
}

// ldmatrix .x1/.x2/.x4 (PTX ISA, "Warp-level matrix load instruction: ldmatrix"): lane 8i+j gives
// the address of row j of matrix i (8 contiguous b16; lanes from 8 * count on give none). Lane l
// receives in register i the elements (row g, column 2c) and (row g, column 2c+1) of matrix i,
// g = l / 4, c = l % 4; with .trans (row 2c, column g) and (row 2c+1, column g). The lower index
// in the register's low half.
std::string compute_ldmatrix(Lane* lanes) {
  const int count = lanes[0].ld_count;
  const bool trans = lanes[0].ld_trans;
  for (int l = 0; l < 32; ++l) {
    if (lanes[l].ld_count != count || lanes[l].ld_trans != trans) {
      return "ldmatrix: lane " + std::to_string(l) + " asks for .x" + std::to_string(lanes[l].ld_count) +
             (lanes[l].ld_trans ? ".trans" : "") + ", lane 0 for .x" + std::to_string(count) + (trans ? ".trans" : "");
    }
  }
  for (int l = 0; l < 8 * count; ++l) {
    if (reinterpret_cast<std::uintptr_t>(lanes[l].address) % 16 != 0) {
      return "ldmatrix: lane " + std::to_string(l) + "'s row address is not 16-byte aligned";
    }
  }
  const auto element = [&](int matrix, int row, int col) -> std::uint32_t {
    std::uint16_t v;
    std::memcpy(&v, static_cast<const std::byte*>(lanes[matrix * 8 + row].address) + 2 * col, 2);
    return v;
  };
  for (int l = 0; l < 32; ++l) {
    const int g = l / 4, c = l % 4;
    for (int i = 0; i < count; ++i) {
      lanes[l].out[i] = trans ? element(i, 2 * c, g) | (element(i, 2 * c + 1, g) << 16)
                              : element(i, g, 2 * c) | (element(i, g, 2 * c + 1) << 16);
    }
  }
  return {};
}

// Completes warp `w0 / 32`'s collective when all the lanes of its mask have arrived at it; false
// when it cannot complete yet (or is misused: b.error says how).
bool resolve_warp(Block& b, int w0) {
  const int n = int(b.lanes.size());
  {
    Lane* warp = &b.lanes[std::size_t(w0)];
    const int size = std::min(32, n - w0);
    int first = -1;
    for (int l = 0; l < size; ++l) {
      if (warp[l].state == State::at_warp) {
        first = l;
        break;
      }
    }
    if (first < 0) return false;
    const WarpOp op = warp[first].op;
    const unsigned mask = warp[first].mask;
    const std::string where = std::string(op_name(op)) + " in warp " + std::to_string(w0 / 32);
    bool ready = true;
    for (int l = 0; l < 32 && ready; ++l) {
      if ((mask >> l & 1u) == 0) continue;
      if (l >= size) {
        b.error = where + ": the mask names lane " + std::to_string(l) + ", which the block does not have";
        return false;
      }
      if (warp[l].state == State::done) {
        b.error = where + ": the mask names lane " + std::to_string(l) + ", which has exited";
        return false;
      }
      if (warp[l].state != State::at_warp) {
        ready = false;
      } else if (warp[l].op != op || warp[l].mask != mask) {
        b.error = where + ": lane " + std::to_string(l) + " waits at " + op_name(warp[l].op) + " with mask " +
                  std::to_string(warp[l].mask) + " (lane " + std::to_string(first) + ": mask " +
                  std::to_string(mask) + ")";
        return false;
      }
    }
    if (!ready) return false;
    if ((op == WarpOp::mma || op == WarpOp::ldmatrix) && (mask != 0xffffffffu || size != 32)) {
      b.error = where + ": needs all 32 lanes";
      return false;
    }
    switch (op) {
      case WarpOp::sync: break;
      case WarpOp::shfl_xor:
        for (int l = 0; l < size; ++l) {
          if ((mask >> l & 1u) == 0) continue;
          const int width = warp[l].width;
          int src = l ^ warp[l].lane_mask;
          if (src / width != l / width || src >= 32) src = l;  // outside its segment: its own value
          if ((mask >> src & 1u) == 0) {
            b.error = where + ": lane " + std::to_string(l) + " reads lane " + std::to_string(src) +
                      ", which is not in the mask";
            return false;
          }
          warp[l].out[0] = warp[src].in[0];
        }
        break;
      case WarpOp::ballot: {
        std::uint32_t bits = 0;
        for (int l = 0; l < size; ++l)
          if ((mask >> l & 1u) != 0 && warp[l].predicate) bits |= 1u << l;
        for (int l = 0; l < size; ++l) warp[l].out[0] = bits;
        break;
      }
      case WarpOp::mma: compute_mma(warp); break;
      case WarpOp::ldmatrix:
        if (std::string e = compute_ldmatrix(warp); !e.empty()) {
          b.error = e;
          return false;
        }
        break;
    }
    for (int l = 0; l < size; ++l)
      if ((mask >> l & 1u) != 0) warp[l].state = State::runnable;
  }
  return true;
}

std::string dims(dim3 d) { return "(" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + ")"; }

// Runs one block to completion; returns an error, or "" on success.
std::string run_block(const KernelLaunch& l, uint3 block_idx, std::uint64_t& rng) {
  Block b;
  b.launch = &l;
  const std::size_t n = std::size_t(l.block.x) * l.block.y * l.block.z;
  b.lanes.resize(n);
  b.dynamic_shared.assign(l.shared_bytes, std::byte{0xff});
  for (std::size_t i = 0; i < n; ++i) {
    Lane& lane = b.lanes[i];
    lane.ctx.thread_idx = uint3{unsigned(i % l.block.x), unsigned(i / l.block.x % l.block.y),
                                unsigned(i / (std::size_t(l.block.x) * l.block.y))};
    lane.ctx.block_idx = block_idx;
    lane.ctx.block_dim = l.block;
    lane.ctx.grid_dim = l.grid;
    lane.stack = stack_pool.take();
    lane.fiber = bc::make_fcontext(lane.stack.top(), kStackBytes, lane_main);
  }
  current_block = &b;
  // Between two barriers, one warp at a time, chosen at random, runs until all its live lanes
  // wait at __syncthreads (its lanes in a fresh random order after each of its collectives). Warps
  // drift as far apart as CUDA allows, so shared memory that a barrier should have protected is
  // overwritten before another warp reads it.
  const std::size_t warps = (n + 31) / 32;
  std::vector<std::size_t> order, pending;
  order.reserve(32);
  for (;;) {
    pending.clear();
    for (std::size_t w = 0; w < warps; ++w) pending.push_back(w);
    for (std::size_t i = pending.size(); i > 1; --i) std::swap(pending[i - 1], pending[next_random(rng) % i]);
    for (const std::size_t w : pending) {
      const std::size_t lo = w * 32, hi = std::min(n, lo + 32);
      for (;;) {
        order.clear();
        for (std::size_t i = lo; i < hi; ++i)
          if (b.lanes[i].state == State::runnable) order.push_back(i);
        for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[next_random(rng) % i]);
        for (std::size_t i : order) {
          resume(b, b.lanes[i]);
          if (!b.error.empty()) break;
        }
        if (!b.error.empty() || !resolve_warp(b, int(lo))) break;
      }
      if (!b.error.empty()) break;
    }
    if (!b.error.empty()) break;
    std::size_t live = 0, waiting = 0;
    for (const Lane& lane : b.lanes) {
      if (lane.state != State::done) ++live;
      if (lane.state == State::at_barrier) ++waiting;
    }
    if (live == 0) break;
    if (waiting == live) {
      for (Lane& lane : b.lanes)
        if (lane.state == State::at_barrier) lane.state = State::runnable;
      continue;
    }
    // Some threads wait at __syncthreads, others at a warp collective that can never complete.
    b.error = "deadlock: " + std::to_string(waiting) + " thread(s) wait at __syncthreads and " +
              std::to_string(live - waiting) + " at a warp collective whose other lanes never arrive";
    break;
  }
  current_block = nullptr;
  current_thread = nullptr;
  if (b.error.empty()) {
    for (Lane& lane : b.lanes) stack_pool.free.push_back(lane.stack);
    return {};
  }
  // Abandoned fibers keep their stacks (never resumed; the device is now faulted).
  for (Lane& lane : b.lanes)
    if (lane.state == State::done) stack_pool.free.push_back(lane.stack);
  return "block " + dims(dim3(block_idx.x, block_idx.y, block_idx.z)) + ": " + b.error;
}

}  // namespace

// ---- device-code entry points (sim/device_code.hpp) -----------------------------------------

void* dynamic_shared_memory() {
  Lane& lane = calling_lane("dynamic shared memory");
  (void)lane;
  return current_block->dynamic_shared.empty() ? nullptr : current_block->dynamic_shared.data();
}

void sync_threads(const char* call) {
  Lane& lane = calling_lane(call);
  lane.state = State::at_barrier;
  switch_to_scheduler(lane, false);
}

void sync_warp(unsigned mask) { wait_at_warp(calling_lane("__syncwarp"), WarpOp::sync, mask); }

std::uint32_t shfl_xor_u32(unsigned mask, std::uint32_t value, int lane_mask, int width) {
  Lane& lane = calling_lane("__shfl_xor_sync");
  if (width <= 0 || width > 32 || (width & (width - 1)) != 0) {
    kill_block(lane, "__shfl_xor_sync: width " + std::to_string(width) + " is not a power of two up to 32");
  }
  lane.in[0] = value;
  lane.lane_mask = lane_mask;
  lane.width = width;
  wait_at_warp(lane, WarpOp::shfl_xor, mask);
  return lane.out[0];
}

unsigned ballot(unsigned mask, bool predicate) {
  Lane& lane = calling_lane("__ballot_sync");
  lane.predicate = predicate;
  wait_at_warp(lane, WarpOp::ballot, mask);
  return lane.out[0];
}

void mma_m16n8k16_bf16_f32(float (&d)[4], const std::uint32_t (&a)[4], std::uint32_t b0, std::uint32_t b1) {
  Lane& lane = calling_lane("mma.sync");
  for (int i = 0; i < 4; ++i) lane.in[i] = a[i];
  lane.in[4] = b0;
  lane.in[5] = b1;
  for (int i = 0; i < 4; ++i) lane.in[6 + i] = std::bit_cast<std::uint32_t>(d[i]);
  wait_at_warp(lane, WarpOp::mma, 0xffffffffu);
  for (int i = 0; i < 4; ++i) d[i] = std::bit_cast<float>(lane.out[i]);
}

void ldmatrix(std::uint32_t* r, int count, bool trans, const void* row_address) {
  Lane& lane = calling_lane("ldmatrix");
  if (count != 1 && count != 2 && count != 4) kill_block(lane, "ldmatrix: .x" + std::to_string(count) + " does not exist");
  lane.address = row_address;
  lane.ld_count = count;
  lane.ld_trans = trans;
  wait_at_warp(lane, WarpOp::ldmatrix, 0xffffffffu);
  for (int i = 0; i < count; ++i) r[i] = lane.out[i];
}

void cp_async(void* dst, const void* src, int cp_size, int src_size) {
  Lane& lane = calling_lane("cp.async");
  const std::string call = "cp.async of " + std::to_string(cp_size) + " bytes (src-size " + std::to_string(src_size) + ")";
  if (cp_size != 4 && cp_size != 8 && cp_size != 16) kill_block(lane, call + ": cp-size must be 4, 8 or 16");
  if (src_size < 0 || src_size > cp_size) kill_block(lane, call + ": src-size must be 0.." + std::to_string(cp_size));
  if (reinterpret_cast<std::uintptr_t>(dst) % unsigned(cp_size) != 0 ||
      (src_size > 0 && reinterpret_cast<std::uintptr_t>(src) % unsigned(cp_size) != 0)) {
    kill_block(lane, call + ": the shared and global addresses must be aligned to cp-size");
  }
  // Until a wait covers it, the destination holds no data yet: 0xff bytes, NaN to a reader.
  std::memset(dst, 0xff, std::size_t(cp_size));
  lane.copies.push_back(AsyncCopy{static_cast<std::byte*>(dst), static_cast<const std::byte*>(src), cp_size, src_size, -1});
}

void cp_async_commit_group() {
  Lane& lane = calling_lane("cp.async.commit_group");
  for (AsyncCopy& c : lane.copies)
    if (c.group < 0) c.group = lane.groups_committed;
  ++lane.groups_committed;
}

void cp_async_wait_group(int n) {
  Lane& lane = calling_lane("cp.async.wait_group");
  if (n < 0) kill_block(lane, "cp.async.wait_group " + std::to_string(n) + ": the count must be at least 0");
  // Groups below `done` complete now, in issue order; uncommitted copies stay pending.
  const std::int64_t done = lane.groups_committed - n;
  std::size_t kept = 0;
  for (std::size_t i = 0; i < lane.copies.size(); ++i) {
    const AsyncCopy& c = lane.copies[i];
    if (c.group >= 0 && c.group < done) {
      if (c.src_size > 0) std::memcpy(c.dst, c.src, std::size_t(c.src_size));
      std::memset(c.dst + c.src_size, 0, std::size_t(c.cp_size - c.src_size));
    } else {
      lane.copies[kept++] = c;
    }
  }
  lane.copies.resize(kept);
}

void trap(const char* where) {
  Lane& lane = calling_lane("__trap");
  kill_block(lane, std::string("__trap() in ") + where);
}

// ---- launches -------------------------------------------------------------------------------

void run_grid(const KernelLaunch& l, std::uint64_t seed, int device) {
  const std::size_t blocks = std::size_t(l.grid.x) * l.grid.y * l.grid.z;
  std::vector<std::size_t> order(blocks);
  for (std::size_t i = 0; i < blocks; ++i) order[i] = i;
  std::uint64_t rng = seed;
  for (std::size_t i = blocks; i > 1; --i) std::swap(order[i - 1], order[next_random(rng) % i]);
  for (std::size_t i : order) {
    const uint3 idx{unsigned(i % l.grid.x), unsigned(i / l.grid.x % l.grid.y),
                    unsigned(i / (std::size_t(l.grid.x) * l.grid.y))};
    if (std::string e = run_block(l, idx, rng); !e.empty()) {
      device_fault(device, "kernel " + std::string(l.name), e);
      return;
    }
  }
}

cudaError_t launch_kernel(KernelLaunch&& l) {
  const std::string call = "kernel " + std::string(l.name) + "<<<" + dims(l.grid) + ", " + dims(l.block) + ", " +
                           std::to_string(l.shared_bytes) + ">>>";
  if (device_count() == 0) return misuse(cudaErrorNoDevice, call, "no device is visible");
  Device& dev = current();
  if (const int e = dev.sticky.load(); e != cudaSuccess) return static_cast<cudaError_t>(e);
  const std::uint64_t threads = std::uint64_t(l.block.x) * l.block.y * l.block.z;
  std::string bad;
  if (threads == 0 || threads > 1024 || l.block.x > 1024 || l.block.y > 1024 || l.block.z > 64) {
    bad = "block " + dims(l.block) + ": at most 1024 threads, (1024, 1024, 64) per dimension";
  } else if (l.grid.x == 0 || l.grid.y == 0 || l.grid.z == 0 || l.grid.x > 2147483647u || l.grid.y > 65535 ||
             l.grid.z > 65535) {
    bad = "grid " + dims(l.grid) + ": each dimension at least 1, at most (2^31-1, 65535, 65535)";
  } else if (l.shared_bytes > 48 * 1024) {
    // Above 48 KiB a kernel must opt in (cudaFuncSetAttribute), which the project does not.
    bad = std::to_string(l.shared_bytes) + " bytes of dynamic shared memory: more than the 48 KiB a kernel may use "
          "without opting in";
  }
  if (!bad.empty()) return misuse(cudaErrorInvalidConfiguration, call, bad);
  std::vector<AllocationRef> uses;
  for (std::size_t i = 0; i < l.pointers.size(); ++i) {
    const void* p = l.pointers[i];
    if (p == nullptr) continue;
    AllocationRef a = find_allocation(p, 0);
    const std::string arg = "pointer argument " + std::to_string(i + 1) + " (" + std::to_string(reinterpret_cast<std::uintptr_t>(p)) + ")";
    if (!a) return misuse(cudaErrorInvalidValue, call, arg + " is not device memory");
    if (a->device == kPinnedHost) return misuse(cudaErrorInvalidValue, call, arg + " is pinned host memory");
    if (a->device != dev.index) {
      return misuse(cudaErrorInvalidValue, call,
                    arg + " belongs to device " + std::to_string(a->device) + ", the launch is on device " +
                        std::to_string(dev.index) + " (cudaSetDevice?)");
    }
    if (std::find(uses.begin(), uses.end(), a) == uses.end()) uses.push_back(a);
  }
  cudaStream_t s = resolve_stream(l.stream, dev, call.c_str());
  if (s == nullptr) return cudaErrorInvalidResourceHandle;
  const std::uint64_t n = ++dev.count.kernel_launches;
  {
    Call c;
    c.kind = CallKind::Kernel;
    c.name = std::string(l.name);
    c.work = l.work;
    c.blocks = std::int64_t(l.grid.x) * l.grid.y * l.grid.z;
    c.block_threads = std::int64_t(threads);
    c.stream = s->id;
    record(dev, std::move(c));
  }
  if (dev.cost_only) return cudaSuccess;
  std::uint64_t seed = settings().seed * 0x100000001b3ull + n * 0x9e3779b97f4a7c15ull + std::uint64_t(dev.index);
  auto launch = std::make_shared<KernelLaunch>(std::move(l));
  const int d = dev.index;
  s->enqueue(Op{call, [launch, seed, d] { run_grid(*launch, seed, d); }, std::move(uses)});
  return cudaSuccess;
}

}  // namespace layertap::sim
