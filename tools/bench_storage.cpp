// Storage-option benchmark on real activations (run by tools/bench_storage.sh; docs/FORMAT.md,
// "Storage options"). Reads a float32 layertap output (the real states), then for each storage
// option writes the same states through io::OutputWriter (the production writer: interleave,
// float8 quantization, compression workers, HDF5, fsync, SHA-256, rename) and, alternating with
// it, a raw sequential write of the same payload bytes (write(2) in 8 MiB blocks + fsync) to the
// same directory. Per option: bytes per token on disk, writer MB/s and raw MB/s of the payload,
// the median over repetitions of their ratio (raw time / writer time of the same repetition),
// and for float8 the error against bf16 that the writer records. Then per codec:
// compression ratio and encode/decode MB/s per core (thread CPU time, so other load on the machine
// does not count), including codecs layertap does not write (bitshuffle, via the hdf5plugin
// filter library, when --plugin-dir names it).
//
//   bench_storage --ref DIR --scratch DIR [--options bf16:none,bf16:lz4,...] [--repeat K]
//                 [--reps R] [--threads N] [--shard-mib M] [--batch-tokens N]
//                 [--plugin-dir DIR] [--json FILE] [--keep DIR] [--verify 0|1]
#include <dlfcn.h>
#include <fcntl.h>
#include <hdf5.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <sstream>
#include <thread>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

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

// write(2) of `bytes` bytes taken from the batches' state buffers, 8 MiB at a time, then fsync.
double raw_write(const fs::path& file, const std::vector<CapturedBatch>& batches, int64_t bytes) {
  const auto t0 = Clock::now();
  const int fd = ::open(file.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  LT_CHECK(fd >= 0, "cannot create '", file.string(), "'");
  int64_t left = bytes;
  for (const auto& b : batches)
    for (const auto& st : b.states)
      for (std::size_t at = 0; at < st.size() && left > 0;) {
        const std::size_t n = std::min({st.size() - at, std::size_t(8) << 20, std::size_t(left)});
        const ssize_t w = ::write(fd, st.data() + at, n);
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

struct WriterRun {
  double seconds = 0;
  int64_t file_bytes = 0;
  std::vector<ShardInfo> shards;
};

WriterRun writer_write(const fs::path& dir, const OutputMeta& meta, std::vector<CapturedBatch> batches,
                       int64_t shard_bytes) {
  fs::remove_all(dir);
  fs::create_directories(dir);
  WriterRun run;
  const auto t0 = Clock::now();
  {
    OutputWriter w(dir, "shard", meta, shard_bytes);
    for (auto& b : batches) w.submit(std::move(b));
    run.shards = w.finish();
  }
  run.seconds = seconds_since(t0);
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
                                         {"plugin-dir", ""},
                                         {"json", ""},
                                         {"verify", "1"},
                                         {"keep", ""}};
    for (int i = 1; i + 1 < argc; i += 2) {
      std::string k = argv[i];
      LT_CHECK(k.rfind("--", 0) == 0, "expected --key value, got '", k, "'");
      a[k.substr(2)] = argv[i + 1];
    }
    LT_CHECK(a.count("ref") && a.count("scratch"), "usage: bench_storage --ref DIR --scratch DIR [options]");
    const fs::path scratch = a["scratch"];
    fs::create_directories(scratch);
    const int repeat = std::stoi(a["repeat"]), reps = std::stoi(a["reps"]), threads = std::stoi(a["threads"]);
    const int64_t shard_bytes = std::stoll(a["shard-mib"]) << 20, batch_tokens = std::stoll(a["batch-tokens"]);

    const auto t_load = Clock::now();
    const Reference ref = load_reference(a["ref"]);
    const int64_t P = ref.meta.num_points(), H = ref.meta.hidden;
    std::cerr << "reference: " << ref.samples() << " samples, " << ref.tokens() << " tokens, " << P << " points x "
              << H << " (loaded in " << num(seconds_since(t_load), 1) << " s)\n";

    std::vector<Option> options;
    std::stringstream list(a["options"]);
    for (std::string item; std::getline(list, item, ',');) {
      // "bf16:zstd" then ":1" arrive split by ':' only, never by ','.
      options.push_back(parse_option(item));
    }

    json report;
    report["reference"] = {{"dir", a["ref"]},       {"samples", ref.samples()}, {"tokens", ref.tokens()},
                           {"points", ref.meta.point_specs}, {"hidden", H},    {"repeat", repeat},
                           {"reps", reps},          {"shard_mib", std::stoll(a["shard-mib"])},
                           {"batch_tokens", batch_tokens}, {"hardware_threads", std::thread::hardware_concurrency()}};

    // bf16 against the float32 values, for scale: what bf16 storage itself loses.
    {
      double e2 = 0, v2 = 0;
      for (float x : ref.states) {
        const double d = double(bf16_to_float(float_to_bf16(x))) - double(x);
        e2 += d * d;
        v2 += double(x) * double(x);
      }
      report["bf16_vs_float32_rel_rms_error"] = std::sqrt(e2 / v2);
    }

    // --- the writer, per storage option -----------------------------------------------------------
    std::cout << "| option | threads | bytes/token | ratio | writer MB/s | raw MB/s | writer/raw | tokens/s |\n"
                 "|---|---|---|---|---|---|---|---|\n";
    std::map<DType, std::vector<CapturedBatch>> batches;
    for (const Option& o : options) {
      OutputMeta meta = ref.meta;
      meta.dtype = o.dtype;
      meta.compression = o.compression;
      meta.compression.threads = threads;
      if (!batches.count(meta.batch_dtype()))
        batches[meta.batch_dtype()] = make_batches(ref, meta.batch_dtype(), batch_tokens, repeat);
      const auto& input = batches[meta.batch_dtype()];
      const int64_t tokens = ref.tokens() * repeat;
      const int64_t payload = tokens * P * H * int64_t(dtype_size(o.dtype));
      std::vector<double> w_s, r_s;
      WriterRun last;
      for (int rep = 0; rep < reps; ++rep) {
        r_s.push_back(raw_write(scratch / "raw.bin", input, payload));
        last = writer_write(scratch / "out", meta, input, shard_bytes);
        w_s.push_back(last.seconds);
        if (rep == 0 && a["verify"] == "1") verify(scratch / "out", last.shards, input, meta);
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
      if (o.dtype == DType::F8_E4M3) {
        const auto f = fp8_fidelity_of(scratch / "out", last.shards);
        json pts = json::array();
        for (std::size_t p = 0; p < f.size(); ++p) {
          json j = to_json(f[p]);
          j["point"] = ref.meta.point_specs[p];
          pts.push_back(j);
        }
        row["fp8_error_vs_bf16"] = pts;
      }
      std::cout << "| " << o.name << " | " << row["threads"].get<int>() << " | "
                << num(row["bytes_per_token"].get<double>(), 0) << " | " << num(row["ratio"].get<double>(), 3) << " | "
                << num(row["writer_mb_s"].get<double>(), 0) << " | " << num(row["raw_mb_s"].get<double>(), 0) << " | "
                << num(row["writer_over_raw"].get<double>(), 2) << " | " << num(row["writer_tokens_s"].get<double>(), 0)
                << " |" << std::endl;
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

    // --- float8 error per point -------------------------------------------------------------------
    for (const json& row : report["writer"])
      if (row.contains("fp8_error_vs_bf16")) {
        std::cout << "\nfloat8_e4m3fn (" << row["option"].get<std::string>()
                  << ") against the bf16 values (bf16 itself vs float32: rel RMS "
                  << sci(report["bf16_vs_float32_rel_rms_error"].get<double>()) << ")\n"
                  << "| point | rel RMS error | mean row rel error | max row rel error | max abs error | flushed to zero |\n"
                     "|---|---|---|---|---|---|\n";
        for (const json& p : row["fp8_error_vs_bf16"])
          std::cout << "| " << p["point"].get<std::string>() << " | " << sci(p["rel_rms_error"].get<double>()) << " | "
                    << sci(p["mean_row_rel_error"].get<double>()) << " | " << sci(p["max_row_rel_error"].get<double>())
                    << " | " << sci(p["max_abs_error"].get<double>()) << " | "
                    << num(100 * p["flushed_to_zero_fraction"].get<double>(), 2) << "% |\n";
        break;
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
