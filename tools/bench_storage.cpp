// Storage-option benchmark (run by tools/bench_storage.sh; docs/FORMAT.md, "Storage options" and
// "Measured"), in one of two modes:
//  - real states: reads a float32 layertap output, then for each storage option writes the same
//    states through io::OutputWriter (the production writer: interleave, float8 quantization,
//    compression workers, HDF5, fsync, SHA-256, rename) and, alternating with it, a raw sequential
//    write of the same payload bytes (write(2) in 8 MiB blocks + fsync) to the same directory. Per
//    option: bytes per token on disk, writer MB/s and raw MB/s of the payload, the median over
//    repetitions of their ratio (raw time / writer time of the same repetition), and for float8 the
//    error against bf16 that the writer records. Then per codec: compression ratio and
//    encode/decode MB/s per core (thread CPU time, so other load on the machine does not count),
//    including codecs layertap does not write (bitshuffle, via the hdf5plugin filter library, when
//    --plugin-dir names it).
//  - synthetic states (--synthetic-hidden H): the write path alone, no reference output needed.
//    Seeded bf16 (or float32) states of P points x H, roughly normal with realistic outliers (see
//    SyntheticFeed), in batches of exactly --batch-tokens tokens, --tokens in all (rounded up to
//    whole batches), through the same per-option loop against the same raw write. Four batches'
//    states are generated once and go round the writer's buffer pool (recycle_into), so feeding the
//    writer costs the producer no CPU, as a GPU's copy engine hands batches over.
// Either mode takes --rate TOKENS_PER_S (0: as fast as submit() takes them): the producer then
// "computes" each batch for tokens / rate seconds after its previous submit() returned, as
// layertap's forward does (forward, then hand over), and the table adds the producer's time blocked
// in submit(), its achieved tokens/s (= rate when never blocked) and the drain after its last
// submit (queued batches, last shard's fsync + SHA-256).
//
//   bench_storage --ref DIR --scratch DIR [--options bf16:none,bf16:lz4,...] [--repeat K]
//                 [--reps R] [--threads N] [--shard-mib M] [--batch-tokens N] [--rate R]
//                 [--plugin-dir DIR] [--json FILE] [--keep DIR] [--verify 0|1]
//   bench_storage --synthetic-hidden H --scratch DIR [--points P] [--tokens N] [--batch-tokens T]
//                 [--sample-tokens S] [--layers L] [--seed X] [--rate R] [--options ...] [--reps R]
//                 [--threads N] [--shard-mib M] [--json FILE] [--keep DIR] [--verify 0|1]
#include <dlfcn.h>
#include <fcntl.h>
#include <hdf5.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <span>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/buffer_pool.hpp"
#include "core/captured_batch.hpp"
#include "core/dtype.hpp"
#include "core/error.hpp"
#include "io/compression.hpp"
#include "io/fp8_storage.hpp"
#include "io/output_writer.hpp"
#include "io/shard_reader.hpp"

namespace fs = std::filesystem;
using nlohmann::json;
using namespace layertap;
using namespace layertap::io;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double process_cpu_seconds() {  // user + system, every thread of this process
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return double(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + 1e-6 * double(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const std::size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : 0.5 * (v[m - 1] + v[m]);
}

// The real states: samples of one float32 output, [T, P, H] rows plus ids, masks, offsets.
struct Reference {
  OutputMeta meta;
  std::vector<float> states;  // [T, P, H]
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  std::vector<int64_t> offsets{0};  // [S+1]
  int64_t tokens() const { return int64_t(ids.size()); }
  int64_t samples() const { return int64_t(offsets.size()) - 1; }
};

Reference load_reference(const fs::path& dir) {
  std::ifstream in(dir / "manifest.json");
  LT_CHECK(in, "no manifest.json in '", dir.string(), "'");
  const json m = json::parse(in);
  Reference r;
  bool first = true;
  for (const json& s : m.at("shards")) {
    const ShardReader sr(dir / s.at("file").get<std::string>());
    LT_CHECK(sr.meta().dtype == DType::F32, "the reference output must be stored as float32");
    if (first) r.meta = sr.meta();
    first = false;
    const auto hs = sr.hidden_states(0, sr.num_tokens());
    r.states.insert(r.states.end(), hs.begin(), hs.end());
    const auto ids = sr.input_ids();
    const auto mask = sr.loss_mask();
    r.ids.insert(r.ids.end(), ids.begin(), ids.end());
    r.mask.insert(r.mask.end(), mask.begin(), mask.end());
    const auto off = sr.sample_offsets();
    const int64_t base = r.offsets.back();
    for (std::size_t i = 1; i < off.size(); ++i) r.offsets.push_back(base + off[i]);
  }
  return r;
}

// Batches of whole samples up to `batch_tokens`, the reference cycled `repeat` times, states in
// `dtype` (BF16 rounded to nearest even, or F32).
std::vector<CapturedBatch> make_batches(const Reference& ref, DType dtype, int64_t batch_tokens, int repeat) {
  const int64_t P = ref.meta.num_points(), H = ref.meta.hidden, S = ref.samples();
  std::vector<CapturedBatch> out;
  for (int k = 0; k < repeat; ++k) {
    for (int64_t s0 = 0; s0 < S;) {
      int64_t s1 = s0 + 1;
      while (s1 < S && ref.offsets[s1 + 1] - ref.offsets[s0] <= batch_tokens) ++s1;
      CapturedBatch b;
      b.hidden = H;
      b.dtype = dtype;
      const int64_t t0 = ref.offsets[s0], t1 = ref.offsets[s1], T = t1 - t0;
      for (int64_t s = s0; s < s1; ++s) b.sample_index.push_back(int64_t(k) * S + s);
      for (int64_t s = s0; s <= s1; ++s) b.offsets.push_back(ref.offsets[s] - t0);
      b.input_ids.assign(ref.ids.begin() + t0, ref.ids.begin() + t1);
      b.loss_mask.assign(ref.mask.begin() + t0, ref.mask.begin() + t1);
      b.states.resize(std::size_t(P));
      for (int64_t p = 0; p < P; ++p) {
        auto& st = b.states[std::size_t(p)];
        st.resize(std::size_t(T * H) * dtype_size(dtype));
        for (int64_t t = 0; t < T; ++t) {
          const float* src = ref.states.data() + ((t0 + t) * P + p) * H;
          if (dtype == DType::F32) {
            std::memcpy(st.data() + std::size_t(t * H) * 4, src, std::size_t(H) * 4);
          } else {
            for (int64_t h = 0; h < H; ++h) {
              const uint16_t v = float_to_bf16(src[h]);
              std::memcpy(st.data() + std::size_t(t * H + h) * 2, &v, 2);
            }
          }
        }
      }
      out.push_back(std::move(b));
      s0 = s1;
    }
  }
  return out;
}

struct Option {
  std::string name;  // "bf16:lz4"
  DType dtype;
  Compression compression;
};

Option parse_option(const std::string& spec) {
  const std::size_t colon = spec.find(':');
  LT_CHECK(colon != std::string::npos, "option '", spec, "' is not <dtype>:<compression>");
  Option o;
  o.name = spec;
  o.dtype = parse_storage_dtype(spec.substr(0, colon));
  o.compression = parse_compression(spec.substr(colon + 1));
  return o;
}

int64_t dir_bytes(const fs::path& dir) {
  int64_t n = 0;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".h5") n += int64_t(e.file_size());
  return n;
}

// write(2) of `bytes` bytes taken from `source` in order (cycling through it), 8 MiB at a time,
// then fsync.
double raw_write(const fs::path& file, const std::vector<std::span<const std::byte>>& source, int64_t bytes) {
  LT_CHECK(!source.empty() || bytes == 0, "raw write: nothing to write from");
  const auto t0 = Clock::now();
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  LT_CHECK(fd >= 0, "cannot create '", file.string(), "'");
  int64_t left = bytes;
  for (std::size_t i = 0; left > 0; i = (i + 1) % source.size())
    for (std::size_t at = 0; at < source[i].size() && left > 0;) {
      const std::size_t n = std::min({source[i].size() - at, std::size_t(8) << 20, std::size_t(left)});
      const ssize_t w = ::write(fd, source[i].data() + at, n);
      LT_CHECK(w > 0, "raw write failed");
      at += std::size_t(w);
      left -= w;
    }
  LT_CHECK(::fsync(fd) == 0, "fsync failed");
  ::close(fd);
  const double s = seconds_since(t0);
  fs::remove(file);
  return s;
}

std::vector<std::span<const std::byte>> state_spans(const std::vector<CapturedBatch>& batches) {
  std::vector<std::span<const std::byte>> out;
  for (const auto& b : batches)
    for (const auto& st : b.states) out.emplace_back(st);
  return out;
}

// What the writer is fed in one batch dtype, run after run: the real states' batches or synthetic
// ones. Per repetition: raw_write(), then start_run() (untimed) and next(0 .. batches()-1).
class Feed {
 public:
  virtual ~Feed() = default;
  virtual int64_t tokens() const = 0;
  virtual int64_t batches() const = 0;
  // The raw write of `bytes` payload bytes taken from these states.
  virtual double raw_write(const fs::path& file, int64_t bytes) = 0;
  virtual void start_run() {}
  // The i-th batch of the run: inside the timed run, at the producer's cost.
  virtual CapturedBatch next(int64_t i) = 0;
  virtual BufferPool* recycle() { return nullptr; }  // where the writer returns the states' buffers
  // Every batch as submitted, for verify(); null where they are not kept.
  virtual const std::vector<CapturedBatch>* submitted() const { return nullptr; }
};

// The real states: every batch in memory, copied before each run, moved into submit().
class BatchFeed final : public Feed {
 public:
  explicit BatchFeed(std::vector<CapturedBatch> batches) : batches_(std::move(batches)) {
    for (const auto& b : batches_) tokens_ += b.num_tokens();
  }
  int64_t tokens() const override { return tokens_; }
  int64_t batches() const override { return int64_t(batches_.size()); }
  double raw_write(const fs::path& file, int64_t bytes) override {
    return ::raw_write(file, state_spans(batches_), bytes);
  }
  void start_run() override { run_ = batches_; }
  CapturedBatch next(int64_t i) override { return std::move(run_[std::size_t(i)]); }
  const std::vector<CapturedBatch>* submitted() const override { return &batches_; }

 private:
  std::vector<CapturedBatch> batches_, run_;
  int64_t tokens_ = 0;
};

// Synthetic states, seeded: value[t, h] = z * c[h] * r[t], z standard normal (Marsaglia's polar
// method on xoshiro256**), c[h] a per-channel scale, log-normal exp(0.5 N(0,1)), times 20 on 0.1% of
// the channels (outlier features, the same channels in every token and point), r[t] a per-token
// scale, log-normal exp(0.3 N(0,1)); the first token of each sample (--sample-tokens) also carries
// a massive activation, +-2e4 in two fixed channels, where the others peak at a few hundred (as
// real models do: docs/FORMAT.md, "Measured"). kSets batches' states are generated once (one
// stream per buffer) and recycled through the writer's buffer pool: the writer holds at most
// queue depth (2) + 1 batches while the producer fills the next.
class SyntheticFeed final : public Feed {
 public:
  static constexpr int64_t kSets = 4;

  SyntheticFeed(DType dtype, int64_t points, int64_t hidden, int64_t batch_tokens, int64_t batches,
                int64_t sample_tokens, uint64_t seed)
      : dtype_(dtype), P_(points), H_(hidden), T_(batch_tokens), count_(batches), pool_(std::size_t(kSets * points)) {
    const std::size_t bytes = std::size_t(T_ * H_) * dtype_size(dtype_);
    // The batch around the states: samples of sample_tokens (the last one shorter), every token in
    // the loss, ids anywhere in a 163,840-token vocabulary (Kimi-K2.5's).
    for (int64_t t = 0; t < T_; t += sample_tokens) offsets_.push_back(t);
    offsets_.push_back(T_);
    Rng ids(seed ^ 0x1d5);
    for (int64_t t = 0; t < T_; ++t) input_ids_.push_back(int32_t(ids() % 163840));
    // Channel scales: one set for the model.
    Rng ch(seed);
    std::vector<float> c(static_cast<std::size_t>(H_));
    for (auto& v : c) v = std::exp(0.5f * ch.normal());
    for (int64_t k = 0; k < std::max<int64_t>(1, H_ / 1000); ++k) c[std::size_t(ch() % uint64_t(H_))] *= 20.0f;
    const int64_t massive[2] = {int64_t(ch() % uint64_t(H_)), int64_t(ch() % uint64_t(H_))};
    // kSets x P buffers, generated in parallel.
    std::vector<std::vector<std::byte>> bufs(std::size_t(kSets * P_));
    std::vector<std::thread> workers;
    const unsigned nthreads = std::max(1u, std::thread::hardware_concurrency());
    for (unsigned w = 0; w < nthreads; ++w)
      workers.emplace_back([&, w] {
        for (std::size_t i = w; i < bufs.size(); i += nthreads) {
          bufs[i].resize(bytes);
          Rng rng(seed + 0x9e3779b97f4a7c15ULL * (i + 1));
          std::vector<float> row(static_cast<std::size_t>(H_));
          for (int64_t t = 0; t < T_; ++t) {
            const float r = std::exp(0.3f * rng.normal());
            for (int64_t h = 0; h < H_; h += 2) {
              const auto [z0, z1] = rng.normal_pair();
              row[std::size_t(h)] = z0 * c[std::size_t(h)] * r;
              if (h + 1 < H_) row[std::size_t(h + 1)] = z1 * c[std::size_t(h + 1)] * r;
            }
            if (t % sample_tokens == 0)
              for (const int64_t m : massive) row[std::size_t(m)] = (rng() & 1) ? 2e4f : -2e4f;
            std::byte* dst = bufs[i].data() + std::size_t(t * H_) * dtype_size(dtype_);
            if (dtype_ == DType::F32) {
              std::memcpy(dst, row.data(), std::size_t(H_) * 4);
            } else {
              for (int64_t h = 0; h < H_; ++h) {
                const uint16_t v = float_to_bf16(row[std::size_t(h)]);
                std::memcpy(dst + 2 * h, &v, 2);
              }
            }
          }
        }
      });
    for (auto& w : workers) w.join();
    pool_.give(std::move(bufs));
  }

  int64_t tokens() const override { return T_ * count_; }
  int64_t batches() const override { return count_; }
  double raw_write(const fs::path& file, int64_t bytes) override {
    // Between runs every buffer is back in the pool: borrow them all.
    std::vector<std::vector<std::byte>> bufs;
    for (int64_t i = 0; i < kSets * P_; ++i) bufs.push_back(take());
    std::vector<std::span<const std::byte>> spans(bufs.begin(), bufs.end());
    const double s = ::raw_write(file, spans, bytes);
    pool_.give(std::move(bufs));
    return s;
  }
  CapturedBatch next(int64_t i) override {
    CapturedBatch b;
    b.hidden = H_;
    b.dtype = dtype_;
    b.offsets = offsets_;
    const int64_t S = int64_t(offsets_.size()) - 1;
    for (int64_t s = 0; s < S; ++s) b.sample_index.push_back(i * S + s);
    b.input_ids = input_ids_;
    b.loss_mask.assign(std::size_t(T_), uint8_t(1));
    for (int64_t p = 0; p < P_; ++p) b.states.push_back(take());
    return b;
  }
  BufferPool* recycle() override { return &pool_; }

 private:
  // xoshiro256** seeded by splitmix64.
  struct Rng {
    uint64_t s[4];
    explicit Rng(uint64_t seed) {
      for (auto& v : s) {
        uint64_t z = (seed += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        v = z ^ (z >> 31);
      }
    }
    uint64_t operator()() {
      const uint64_t r = std::rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
      s[2] ^= s[0];
      s[3] ^= s[1];
      s[1] ^= s[2];
      s[0] ^= s[3];
      s[2] ^= t;
      s[3] = std::rotl(s[3], 45);
      return r;
    }
    float uniform() { return float((*this)() >> 40) * 0x1p-24f * 2.0f - 1.0f; }  // [-1, 1)
    std::pair<float, float> normal_pair() {  // Marsaglia's polar method
      for (;;) {
        const float u = uniform(), v = uniform(), q = u * u + v * v;
        if (q > 0.0f && q < 1.0f) {
          const float f = std::sqrt(-2.0f * std::log(q) / q);
          return {u * f, v * f};
        }
      }
    }
    float normal() { return normal_pair().first; }
  };

  std::vector<std::byte> take() {
    bool fresh = false;
    auto b = pool_.take(std::size_t(T_ * H_) * dtype_size(dtype_), &fresh);
    LT_CHECK(!fresh, "synthetic states: the buffer pool ran dry (the writer holds more than ", kSets - 1,
             " batches)");
    return b;
  }

  DType dtype_;
  int64_t P_, H_, T_, count_;
  BufferPool pool_;
  std::vector<int64_t> offsets_;
  std::vector<int32_t> input_ids_;
};

struct WriterRun {
  double seconds = 0;      // start to finish(): every shard closed, fsynced, checksummed, renamed
  double blocked_s = 0;    // the producer's time inside submit()
  double submitted_s = 0;  // start to the return of the last submit()
  double cpu_s = 0;        // CPU time of the process (writer, workers, closer, producer) in the run
  int64_t file_bytes = 0;
  std::vector<ShardInfo> shards;
};

// One run of the production writer over `feed`'s batches. rate > 0: before each submit() the
// producer waits until tokens / rate seconds after the previous submit() returned (the start, for
// the first), as a forward pass computing that batch would.
WriterRun writer_write(const fs::path& dir, const OutputMeta& meta, Feed& feed, int64_t shard_bytes, double rate) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  feed.start_run();
  WriterRun run;
  const double cpu0 = process_cpu_seconds();
  const auto t0 = Clock::now();
  {
    OutputWriter w(dir, "shard", meta, shard_bytes);
    if (feed.recycle() != nullptr) w.recycle_into(feed.recycle());
    auto ready = t0;  // when the producer's previous submit() returned
    for (int64_t i = 0; i < feed.batches(); ++i) {
      CapturedBatch b = feed.next(i);
      if (rate > 0)
        std::this_thread::sleep_until(ready + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(double(b.num_tokens()) / rate)));
      const auto ts = Clock::now();
      w.submit(std::move(b));
      ready = Clock::now();
      run.blocked_s += std::chrono::duration<double>(ready - ts).count();
    }
    run.submitted_s = seconds_since(t0);
    run.shards = w.finish();
  }
  run.seconds = seconds_since(t0);
  run.cpu_s = process_cpu_seconds() - cpu0;
  run.file_bytes = dir_bytes(dir);
  return run;
}

// Every row read back through ShardReader equals what was written (lossless options), or the
// dequantized codes (float8, checked against quantize+dequantize of the same rows).
void verify(const fs::path& dir, const std::vector<ShardInfo>& shards, const std::vector<CapturedBatch>& batches,
            const OutputMeta& meta) {
  const int64_t P = meta.num_points(), H = meta.hidden;
  std::size_t b = 0;
  for (const ShardInfo& s : shards) {
    const ShardReader r(dir / s.file);
    LT_CHECK(r.structure_problems().empty(), "shard ", s.file, " has structure problems");
    int64_t row = 0;
    for (int64_t done = 0; done < s.samples; done += batches[b].num_samples(), ++b) {
      const CapturedBatch& batch = batches[b];
      const int64_t T = batch.num_tokens();
      const auto got = r.hidden_states(row, row + T);
      for (int64_t p = 0; p < P; ++p) {
        std::vector<float> want(std::size_t(T * H));
        if (meta.dtype == DType::F8_E4M3) {
          std::vector<uint8_t> codes(want.size());
          std::vector<float> scales(static_cast<std::size_t>(T));
          quantize_fp8_rows(DType::BF16, batch.states[std::size_t(p)].data(), T, 1, H, codes.data(), scales.data(),
                            nullptr);
          dequantize_fp8_rows(codes.data(), scales.data(), T, 1, H, want.data());
        } else {
          to_float(meta.dtype, batch.states[std::size_t(p)].data(), want.data(), want.size());
        }
        for (int64_t t = 0; t < T; ++t)
          LT_CHECK(std::memcmp(&got[std::size_t((t * P + p) * H)], &want[std::size_t(t * H)], std::size_t(H) * 4) == 0,
                   "shard ", s.file, " row ", row + t, " point ", p, " differs from what was written");
      }
      row += T;
    }
  }
}

// Chunks as ShardWriter forms them: rows_per_chunk rows of [P, H] (the last one zero-padded).
std::vector<std::vector<std::byte>> chunks_of(const Reference& ref, DType dtype) {
  const int64_t P = ref.meta.num_points(), H = ref.meta.hidden, T = ref.tokens();
  const int64_t rows = ShardWriter::chunk_rows(P, H, dtype);
  std::vector<std::vector<std::byte>> out;
  for (int64_t t0 = 0; t0 < T; t0 += rows) {
    const int64_t n = std::min(rows, T - t0);
    std::vector<std::byte> c(std::size_t(rows * P * H) * dtype_size(dtype), std::byte(0));
    const float* src = ref.states.data() + t0 * P * H;
    if (dtype == DType::F32) {
      std::memcpy(c.data(), src, std::size_t(n * P * H) * 4);
    } else if (dtype == DType::BF16) {
      for (int64_t i = 0; i < n * P * H; ++i) {
        const uint16_t v = float_to_bf16(src[i]);
        std::memcpy(c.data() + 2 * i, &v, 2);
      }
    } else {  // float8 codes of the bf16 values
      std::vector<uint16_t> bf(std::size_t(n * P * H));
      for (std::size_t i = 0; i < bf.size(); ++i) bf[i] = float_to_bf16(src[i]);
      std::vector<float> scales(std::size_t(n * P));
      quantize_fp8_rows(DType::BF16, reinterpret_cast<const std::byte*>(bf.data()), n, P, H,
                        reinterpret_cast<uint8_t*>(c.data()), scales.data(), nullptr);
    }
    out.push_back(std::move(c));
  }
  return out;
}

struct CodecResult {
  double ratio = 0, encode_mbs = 0, decode_mbs = 0;
};

CodecResult codec_bench(const std::vector<std::vector<std::byte>>& chunks, std::size_t elem, const Compression& c) {
  std::vector<std::vector<std::byte>> enc(chunks.size());
  std::vector<std::byte> scratch, dec;
  double in = 0, stored = 0;
  double t0 = thread_cpu_seconds();
  for (std::size_t i = 0; i < chunks.size(); ++i) {
    encode_chunk(c, elem, chunks[i].data(), chunks[i].size(), enc[i], scratch);
    in += double(chunks[i].size());
    stored += double(enc[i].size());
  }
  const double te = thread_cpu_seconds() - t0;
  t0 = thread_cpu_seconds();
  for (std::size_t i = 0; i < chunks.size(); ++i) decode_chunk(c, elem, enc[i].data(), enc[i].size(), chunks[i].size(), dec);
  const double td = thread_cpu_seconds() - t0;
  return {in / stored, in / te / 1e6, in / td / 1e6};
}

// A filter from an HDF5 plugin library (e.g. hdf5plugin's libh5bshuf.so), called directly.
CodecResult plugin_bench(const std::vector<std::vector<std::byte>>& chunks, const fs::path& library,
                         std::vector<unsigned> cd_values) {
  void* lib = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  LT_CHECK(lib != nullptr, "cannot load '", library.string(), "': ", dlerror());
  using Info = const void* (*)();
  const auto info = reinterpret_cast<Info>(dlsym(lib, "H5PLget_plugin_info"));
  LT_CHECK(info != nullptr, "'", library.string(), "' is not an HDF5 filter plugin");
  const auto* cls = static_cast<const H5Z_class2_t*>(info());
  double in = 0, stored = 0, te = 0, td = 0;
  for (const auto& chunk : chunks) {
    std::size_t size = chunk.size();
    void* buf = H5allocate_memory(size, false);
    std::memcpy(buf, chunk.data(), size);
    double t0 = thread_cpu_seconds();
    const std::size_t n = cls->filter(0, cd_values.size(), cd_values.data(), chunk.size(), &size, &buf);
    te += thread_cpu_seconds() - t0;
    LT_CHECK(n > 0, "plugin filter failed");
    in += double(chunk.size());
    stored += double(n);
    t0 = thread_cpu_seconds();
    const std::size_t back = cls->filter(H5Z_FLAG_REVERSE, cd_values.size(), cd_values.data(), n, &size, &buf);
    td += thread_cpu_seconds() - t0;
    LT_CHECK(back == chunk.size() && std::memcmp(buf, chunk.data(), back) == 0, "plugin filter does not round-trip");
    H5free_memory(buf);
  }
  return {in / stored, in / te / 1e6, in / td / 1e6};
}

std::string num(double v, int digits) {
  std::ostringstream s;
  s.setf(std::ios::fixed);
  s.precision(digits);
  s << v;
  return s.str();
}

std::string sci(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2e", v);
  return buf;
}

// Synthetic mode's capture points: eagle3's (2, L/2, L-3, final) for 4 points, else P ids spread
// from 0 to final.
void synthetic_points(OutputMeta& meta, int64_t P, int64_t L) {
  std::vector<int64_t> ids;
  if (P == 4) {
    ids = {2, L / 2, L - 3, L + 1};
  } else {
    for (int64_t p = 0; p < P; ++p) ids.push_back(P == 1 ? L + 1 : p * (L + 1) / (P - 1));
  }
  meta.num_layers = L;
  meta.point_ids = ids;
  for (const int64_t id : ids) meta.point_specs.push_back(id == L + 1 ? "final" : std::to_string(id));
  meta.capture_request = P == 4 ? "eagle3" : "synthetic";
  meta.convention = "layertap-v1";
  meta.architecture = "synthetic";
  meta.config_sha256 = std::string(64, '0');
  meta.weights_fingerprint = "synthetic";
}

}  // namespace

int main(int argc, char** argv) {
  try {
    std::map<std::string, std::string> a{{"options", "bf16:none,bf16:lz4,bf16:zstd:1,bf16:zstd:3,bf16:zstd:-1,bf16:gzip:1,"
                                                     "fp32:none,fp32:lz4,fp32:zstd:1,fp8:none,fp8:lz4,fp8:zstd:1"},
                                         {"repeat", "3"},
                                         {"reps", "3"},
                                         {"threads", "0"},
                                         {"shard-mib", "1024"},
                                         {"batch-tokens", "8192"},
                                         {"rate", "0"},
                                         {"points", "4"},
                                         {"tokens", "65536"},
                                         {"sample-tokens", "2048"},
                                         {"layers", "61"},
                                         {"seed", "1"},
                                         {"plugin-dir", ""},
                                         {"json", ""},
                                         {"verify", "1"},
                                         {"keep", ""}};
    for (int i = 1; i + 1 < argc; i += 2) {
      std::string k = argv[i];
      LT_CHECK(k.rfind("--", 0) == 0, "expected --key value, got '", k, "'");
      a[k.substr(2)] = argv[i + 1];
    }
    const bool synthetic = a.count("synthetic-hidden") > 0;
    LT_CHECK((synthetic || a.count("ref")) && a.count("scratch"),
             "usage: bench_storage --ref DIR --scratch DIR [options]\n"
             "       bench_storage --synthetic-hidden H --scratch DIR [--points P] [--tokens N] [options]");
    const fs::path scratch = a["scratch"];
    fs::create_directories(scratch);
    const int repeat = std::stoi(a["repeat"]), reps = std::stoi(a["reps"]), threads = std::stoi(a["threads"]);
    const int64_t shard_bytes = std::stoll(a["shard-mib"]) << 20, batch_tokens = std::stoll(a["batch-tokens"]);
    const double rate = std::stod(a["rate"]);
    LT_CHECK(rate >= 0, "--rate must be >= 0 tokens/s (0: as fast as possible)");

    json report;
    Reference ref;  // real-states mode
    OutputMeta base;
    int64_t synthetic_batches = 0, sample_tokens = 0;
    uint64_t seed = 0;
    if (synthetic) {
      base.hidden = std::stoll(a["synthetic-hidden"]);
      const int64_t P = std::stoll(a["points"]), tokens = std::stoll(a["tokens"]);
      sample_tokens = std::stoll(a["sample-tokens"]);
      seed = std::stoull(a["seed"]);
      LT_CHECK(base.hidden > 0 && P > 0 && tokens > 0 && batch_tokens > 0 && sample_tokens > 0,
               "--synthetic-hidden, --points, --tokens, --batch-tokens and --sample-tokens must be positive");
      synthetic_points(base, P, std::stoll(a["layers"]));
      synthetic_batches = (tokens + batch_tokens - 1) / batch_tokens;
      std::cerr << "synthetic: " << synthetic_batches << " batches of " << batch_tokens << " tokens ("
                << synthetic_batches * batch_tokens << " tokens), " << P << " points x " << base.hidden
                << ", samples of " << sample_tokens << " tokens, seed " << seed << ", rate "
                << (rate > 0 ? num(rate, 0) + " tokens/s" : std::string("unpaced")) << "\n";
      report["synthetic"] = {{"hidden", base.hidden}, {"points", base.point_specs}, {"layers", base.num_layers},
                             {"tokens", synthetic_batches * batch_tokens}, {"batch_tokens", batch_tokens},
                             {"sample_tokens", sample_tokens}, {"seed", seed}, {"rate_tokens_s", rate},
                             {"reps", reps}, {"shard_mib", std::stoll(a["shard-mib"])},
                             {"hardware_threads", std::thread::hardware_concurrency()}};
    } else {
      const auto t_load = Clock::now();
      ref = load_reference(a["ref"]);
      base = ref.meta;
      std::cerr << "reference: " << ref.samples() << " samples, " << ref.tokens() << " tokens, "
                << ref.meta.num_points() << " points x " << ref.meta.hidden << " (loaded in "
                << num(seconds_since(t_load), 1) << " s)\n";
      report["reference"] = {{"dir", a["ref"]},       {"samples", ref.samples()}, {"tokens", ref.tokens()},
                             {"points", ref.meta.point_specs}, {"hidden", ref.meta.hidden}, {"repeat", repeat},
                             {"reps", reps},          {"shard_mib", std::stoll(a["shard-mib"])},
                             {"batch_tokens", batch_tokens}, {"hardware_threads", std::thread::hardware_concurrency()}};
      if (rate > 0) report["reference"]["rate_tokens_s"] = rate;

      // bf16 against the float32 values, for scale: what bf16 storage itself loses.
      double e2 = 0, v2 = 0;
      for (float x : ref.states) {
        const double d = double(bf16_to_float(float_to_bf16(x))) - double(x);
        e2 += d * d;
        v2 += double(x) * double(x);
      }
      report["bf16_vs_float32_rel_rms_error"] = std::sqrt(e2 / v2);
    }
    const int64_t P = base.num_points(), H = base.hidden;

    std::vector<Option> options;
    std::stringstream list(a["options"]);
    for (std::string item; std::getline(list, item, ',');) {
      // "bf16:zstd" then ":1" arrive split by ':' only, never by ','.
      options.push_back(parse_option(item));
    }

    // --- the writer, per storage option -----------------------------------------------------------
    // Synthetic or paced runs add the producer's side: its time blocked in submit(), the tokens/s it
    // achieved up to its last submit(), and the drain after it.
    const bool producer_columns = synthetic || rate > 0;
    std::cout << "| option | threads | bytes/token | ratio | writer MB/s | raw MB/s | writer/raw | tokens/s |"
              << (producer_columns ? " blocked in submit s | producer tokens/s | drain s |" : "") << "\n"
              << "|---|---|---|---|---|---|---|---|" << (producer_columns ? "---|---|---|" : "") << "\n";
    std::map<DType, std::unique_ptr<Feed>> feeds;
    for (const Option& o : options) {
      OutputMeta meta = base;
      meta.dtype = o.dtype;
      meta.compression = o.compression;
      meta.compression.threads = threads;
      auto& feed = feeds[meta.batch_dtype()];
      if (!feed) {
        const auto t_gen = Clock::now();
        if (synthetic)
          feed = std::make_unique<SyntheticFeed>(meta.batch_dtype(), P, H, batch_tokens, synthetic_batches,
                                                 sample_tokens, seed);
        else
          feed = std::make_unique<BatchFeed>(make_batches(ref, meta.batch_dtype(), batch_tokens, repeat));
        if (synthetic)
          std::cerr << "synthetic " << dtype_name(meta.batch_dtype()) << " states generated in "
                    << num(seconds_since(t_gen), 1) << " s\n";
      }
      const int64_t tokens = feed->tokens();
      const int64_t payload = tokens * P * H * int64_t(dtype_size(o.dtype));
      std::vector<double> w_s, r_s, blocked_s, submitted_s, drain_s, cpu_s;
      WriterRun last;
      for (int rep = 0; rep < reps; ++rep) {
        r_s.push_back(feed->raw_write(scratch / "raw.bin", payload));
        last = writer_write(scratch / "out", meta, *feed, shard_bytes, rate);
        w_s.push_back(last.seconds);
        blocked_s.push_back(last.blocked_s);
        submitted_s.push_back(last.submitted_s);
        drain_s.push_back(last.seconds - last.submitted_s);
        cpu_s.push_back(last.cpu_s);
        if (rep == 0 && a["verify"] == "1") {
          if (feed->submitted() != nullptr) {
            verify(scratch / "out", last.shards, *feed->submitted(), meta);
          } else {  // synthetic: every token in well-formed shards (the values: real-states mode)
            int64_t n = 0;
            for (const ShardInfo& s : last.shards) {
              const ShardReader r(scratch / "out" / s.file);
              LT_CHECK(r.structure_problems().empty() && r.num_tokens() == s.tokens, "shard ", s.file,
                       " has structure problems");
              n += s.tokens;
            }
            LT_CHECK(n == tokens, "the shards hold ", n, " tokens of ", tokens, " submitted");
          }
        }
      }
      const double w = median(w_s), r = median(r_s);
      std::vector<double> paired;  // raw / writer time of the same repetition: disk speed drifts
      for (std::size_t i = 0; i < w_s.size(); ++i) paired.push_back(r_s[i] / w_s[i]);
      json row = {{"option", o.name},
                  {"dtype", std::string(dtype_name(o.dtype))},
                  {"compression", compression_name(o.compression)},
                  {"threads", o.compression.enabled() || o.dtype == DType::F8_E4M3 ? compression_threads(meta.compression) : 0},
                  {"tokens", tokens},
                  {"payload_bytes", payload},
                  {"file_bytes", last.file_bytes},
                  {"bytes_per_token", double(last.file_bytes) / double(tokens)},
                  {"ratio", double(payload) / double(last.file_bytes)},
                  {"writer_s", w_s},
                  {"raw_s", r_s},
                  {"writer_mb_s", double(payload) / w / 1e6},
                  {"raw_mb_s", double(payload) / r / 1e6},
                  {"writer_over_raw", median(paired)},
                  {"writer_tokens_s", double(tokens) / w}};
      if (producer_columns) {
        row["blocked_in_submit_s"] = blocked_s;
        row["submitted_s"] = submitted_s;
        row["drain_s"] = drain_s;
        row["writer_cpu_s"] = cpu_s;
        row["producer_tokens_s"] = double(tokens) / median(submitted_s);
        if (rate > 0) row["requested_tokens_s"] = rate;
      }
      if (o.dtype == DType::F8_E4M3) {
        const auto f = fp8_fidelity_of(scratch / "out", last.shards);
        json pts = json::array();
        for (std::size_t p = 0; p < f.size(); ++p) {
          json j = to_json(f[p]);
          j["point"] = base.point_specs[p];
          pts.push_back(j);
        }
        row["fp8_error_vs_bf16"] = pts;
      }
      std::cout << "| " << o.name << " | " << row["threads"].get<int>() << " | "
                << num(row["bytes_per_token"].get<double>(), 0) << " | " << num(row["ratio"].get<double>(), 3) << " | "
                << num(row["writer_mb_s"].get<double>(), 0) << " | " << num(row["raw_mb_s"].get<double>(), 0) << " | "
                << num(row["writer_over_raw"].get<double>(), 2) << " | " << num(row["writer_tokens_s"].get<double>(), 0)
                << " |";
      if (producer_columns)
        std::cout << " " << num(median(blocked_s), 2) << " | " << num(row["producer_tokens_s"].get<double>(), 0)
                  << " | " << num(median(drain_s), 2) << " |";
      std::cout << std::endl;
      report["writer"].push_back(row);
      if (!a["keep"].empty()) {  // the last output of each option, for the h5py/h5dump checks
        const fs::path kept = fs::path(a["keep"]) / o.name;
        fs::remove_all(kept);
        fs::create_directories(kept.parent_path());
        fs::rename(scratch / "out", kept);
        json manifest;  // just what bench_storage.py read needs
        for (const ShardInfo& s : last.shards) manifest["shards"].push_back({{"file", s.file}});
        std::ofstream(kept / "manifest.json") << manifest.dump() << "\n";
      }
    }
    fs::remove_all(scratch / "out");
    feeds.clear();

    // --- float8 error per point -------------------------------------------------------------------
    for (const json& row : report["writer"])
      if (row.contains("fp8_error_vs_bf16")) {
        std::cout << "\nfloat8_e4m3fn (" << row["option"].get<std::string>() << ") against the bf16 values";
        if (report.contains("bf16_vs_float32_rel_rms_error"))
          std::cout << " (bf16 itself vs float32: rel RMS " << sci(report["bf16_vs_float32_rel_rms_error"].get<double>())
                    << ")";
        std::cout << "\n| point | rel RMS error | mean row rel error | max row rel error | max abs error | flushed to zero |\n"
                     "|---|---|---|---|---|---|\n";
        for (const json& p : row["fp8_error_vs_bf16"])
          std::cout << "| " << p["point"].get<std::string>() << " | " << sci(p["rel_rms_error"].get<double>()) << " | "
                    << sci(p["mean_row_rel_error"].get<double>()) << " | " << sci(p["max_row_rel_error"].get<double>())
                    << " | " << sci(p["max_abs_error"].get<double>()) << " | "
                    << num(100 * p["flushed_to_zero_fraction"].get<double>(), 2) << "% |\n";
        break;
      }

    if (synthetic) {  // the codecs' figures are for real states
      if (!a["json"].empty()) std::ofstream(a["json"]) << report.dump(1) << "\n";
      return 0;
    }

    // --- codecs, one core ---------------------------------------------------------------------------
    std::cout << "\n| data | codec | ratio | encode MB/s per core | decode MB/s per core |\n|---|---|---|---|---|\n";
    const std::vector<std::pair<DType, const char*>> data{{DType::BF16, "bf16"}, {DType::F32, "f32"}, {DType::F8_E4M3, "fp8 codes"}};
    for (const auto& [dtype, label] : data) {
      const auto chunks = chunks_of(ref, dtype);
      const std::size_t elem = dtype_size(dtype);
      std::vector<std::string> codecs{"lz4", "zstd:-1", "zstd:1", "zstd:3", "gzip:1"};
      for (const std::string& spec : codecs) {
        const CodecResult c = codec_bench(chunks, elem, parse_compression(spec));
        const std::string name = (elem > 1 ? "shuffle+" : "") + spec;
        std::cout << "| " << label << " | " << name << " | " << num(c.ratio, 3) << " | " << num(c.encode_mbs, 0)
                  << " | " << num(c.decode_mbs, 0) << " |" << std::endl;
        report["codecs"].push_back({{"data", label}, {"codec", name}, {"ratio", c.ratio},
                                    {"encode_mb_s_per_core", c.encode_mbs}, {"decode_mb_s_per_core", c.decode_mbs}});
      }
      if (!a["plugin-dir"].empty()) {
        // Bitshuffle (filter 32008): cd_values = {version major, minor, element size, block size
        // (0: automatic), compression (2: LZ4, 3: zstd), zstd level}.
        const fs::path bshuf = fs::path(a["plugin-dir"]) / "libh5bshuf.so";
        for (const auto& [name, cd] : std::vector<std::pair<std::string, std::vector<unsigned>>>{
                 {"bitshuffle+lz4", {0, 5, unsigned(elem), 0, 2}}, {"bitshuffle+zstd:1", {0, 5, unsigned(elem), 0, 3, 1}}}) {
          const CodecResult c = plugin_bench(chunks, bshuf, cd);
          std::cout << "| " << label << " | " << name << " (hdf5plugin) | " << num(c.ratio, 3) << " | "
                    << num(c.encode_mbs, 0) << " | " << num(c.decode_mbs, 0) << " |" << std::endl;
          report["codecs"].push_back({{"data", label}, {"codec", name + " (hdf5plugin)"}, {"ratio", c.ratio},
                                      {"encode_mb_s_per_core", c.encode_mbs}, {"decode_mb_s_per_core", c.decode_mbs}});
        }
      }
      if (dtype == DType::BF16) {  // float8 quantization of bf16 chunks, one core
        const int64_t rows = ShardWriter::chunk_rows(P, H, DType::BF16);
        std::vector<uint8_t> codes(std::size_t(rows * P * H));
        std::vector<float> scales(std::size_t(rows * P));
        std::vector<Fp8Fidelity> err(static_cast<std::size_t>(P));
        double in = 0;
        const double t0 = thread_cpu_seconds();
        for (const auto& c : chunks) {
          quantize_fp8_rows(DType::BF16, c.data(), rows, P, H, codes.data(), scales.data(), &err);
          in += double(c.size());
        }
        const double t = thread_cpu_seconds() - t0;
        std::cout << "| bf16 | float8 quantization + error statistics | 2.000 | " << num(in / t / 1e6, 0) << " | - |"
                  << std::endl;
        report["fp8_quantize_mb_s_per_core"] = in / t / 1e6;
      }
    }

    if (!a["json"].empty()) std::ofstream(a["json"]) << report.dump(1) << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "bench_storage: " << e.what() << "\n";
    return 1;
  }
}
