// Helpers shared by the I/O tests: scratch directories, the message a call throws, deterministic
// batches and activation-like bytes, and a check that a shard holds exactly a given sequence of
// batches.
#pragma once
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <exception>
#include <filesystem>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/captured_batch.hpp"
#include "core/dtype.hpp"
#include "io/shard_reader.hpp"
#include "io/shard_writer.hpp"

namespace layertap::io::test {

namespace fs = std::filesystem;

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class TempDir {
 public:
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "layertap-io-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const fs::path& path() const { return path_; }
  std::vector<std::string> files() const {  // sorted names of the entries
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(path_)) names.push_back(e.path().filename());
    std::sort(names.begin(), names.end());
    return names;
  }

 private:
  fs::path path_;
};

// The message of the `E` that `f` throws; "" when it returns. Any other exception propagates (and
// fails the test).
template <class E = std::exception>
std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  }
  return "";
}

inline uint64_t mix(uint64_t x) {  // splitmix64 finaliser
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

inline uint64_t key(int64_t sample, int64_t token, int64_t point, int64_t h) {
  return mix(mix(mix(mix(uint64_t(sample)) ^ uint64_t(token)) ^ uint64_t(point)) ^ uint64_t(h));
}

// Finite bf16 bits of either sign across the whole exponent range (subnormals included).
inline uint16_t pattern_bf16(int64_t sample, int64_t token, int64_t point, int64_t h) {
  auto b = uint16_t(key(sample, token, point, h));
  if ((b & 0x7f80u) == 0x7f80u) b = uint16_t(b & ~0x0400u);  // never Inf/NaN
  return b;
}

// Finite float32 values of either sign and varied magnitude.
inline float pattern_f32(int64_t sample, int64_t token, int64_t point, int64_t h) {
  auto b = uint32_t(key(sample, token, point, h));
  if ((b & 0x7f800000u) == 0x7f800000u) b &= ~0x04000000u;
  return std::bit_cast<float>(b);
}

// L = 8; points "2", "4", "5", "final" (ids 2, 4, 5, 9), the first P of them.
inline OutputMeta test_meta(int64_t points, int64_t hidden, DType dtype) {
  OutputMeta m;
  const std::vector<std::string> specs{"2", "4", "5", "final"};
  const std::vector<int64_t> ids{2, 4, 5, 9};
  m.point_specs.assign(specs.begin(), specs.begin() + points);
  m.point_ids.assign(ids.begin(), ids.begin() + points);
  m.capture_request = points == 4 ? "eagle3" : "2,4,5";
  m.convention = "layertap-v1";
  m.num_layers = 8;
  m.hidden = hidden;
  m.dtype = dtype;
  m.architecture = "LlamaForCausalLM";
  m.config_sha256 = std::string(64, 'c');
  m.weights_fingerprint = std::string(64, 'w');
  return m;
}

// Smooth bf16 values of a few exponents, as real activations are (they compress, unlike the
// random bit patterns above).
inline std::vector<std::byte> activation_like_bytes(std::size_t n) {
  std::vector<std::byte> v(n);
  for (std::size_t i = 0; i + 1 < n; i += 2) {
    const uint16_t b = float_to_bf16(std::sin(float(i) * 0.01f) * float(1 + mix(i) % 7));
    std::memcpy(v.data() + i, &b, 2);
  }
  return v;
}

inline int32_t pattern_token(int64_t sample, int64_t t) { return int32_t((sample * 7 + t) % 1000); }
inline uint8_t pattern_mask(int64_t t) { return t % 3 != 0; }

// Samples `indices` with `lengths` tokens each; states from the patterns above.
inline CapturedBatch make_batch(const std::vector<int64_t>& indices,
                                const std::vector<int64_t>& lengths, const OutputMeta& meta) {
  CapturedBatch b;
  b.sample_index = indices;
  b.hidden = meta.hidden;
  b.dtype = meta.batch_dtype();
  b.offsets = {0};
  for (std::size_t s = 0; s < indices.size(); ++s) {
    for (int64_t t = 0; t < lengths[s]; ++t) {
      b.input_ids.push_back(pattern_token(indices[s], t));
      b.loss_mask.push_back(pattern_mask(t));
    }
    b.offsets.push_back(b.offsets.back() + lengths[s]);
  }
  const int64_t T = b.num_tokens(), H = meta.hidden;
  const std::size_t elem = dtype_size(b.dtype);
  b.states.resize(meta.point_ids.size());
  for (int64_t p = 0; p < meta.num_points(); ++p) {
    auto& st = b.states[p];  // [T, H]
    st.resize(std::size_t(T * H) * elem);
    for (std::size_t s = 0; s < indices.size(); ++s)
      for (int64_t t = 0; t < lengths[s]; ++t)
        for (int64_t h = 0; h < H; ++h) {
          const std::size_t at = std::size_t((b.offsets[s] + t) * H + h) * elem;
          if (b.dtype == DType::BF16) {
            const uint16_t v = pattern_bf16(indices[s], t, p, h);
            std::memcpy(st.data() + at, &v, elem);
          } else {
            const float v = pattern_f32(indices[s], t, p, h);
            std::memcpy(st.data() + at, &v, elem);
          }
        }
  }
  return b;
}

// The float32 values a shard of `meta.dtype` returns for one [T, H] state tensor of a batch:
// the values themselves, or for float8 storage what quantizing and dequantizing them gives.
inline std::vector<float> stored_values(const OutputMeta& meta, const std::vector<std::byte>& state, int64_t T) {
  const int64_t H = meta.hidden;
  std::vector<float> want(std::size_t(T * H));
  if (meta.dtype != DType::F8_E4M3) {
    to_float(meta.dtype, state.data(), want.data(), want.size());
    return want;
  }
  std::vector<uint8_t> codes(want.size());
  std::vector<float> scales(static_cast<std::size_t>(T));
  quantize_fp8_rows(meta.batch_dtype(), state.data(), T, 1, H, codes.data(), scales.data(), nullptr);
  dequantize_fp8_rows(codes.data(), scales.data(), T, 1, H, want.data());
  return want;
}

// Expects the shard to hold exactly `batches`, in order: ids, masks, offsets, sample index and
// every state value (as float32; for float8 storage, the dequantized values).
inline void expect_shard_holds(const ShardReader& r, const std::vector<CapturedBatch>& batches) {
  std::vector<int32_t> ids;
  std::vector<uint8_t> mask;
  std::vector<int64_t> offsets{0}, index;
  for (const auto& b : batches) {
    ids.insert(ids.end(), b.input_ids.begin(), b.input_ids.end());
    mask.insert(mask.end(), b.loss_mask.begin(), b.loss_mask.end());
    index.insert(index.end(), b.sample_index.begin(), b.sample_index.end());
    const int64_t base = offsets.back();
    for (std::size_t s = 1; s < b.offsets.size(); ++s) offsets.push_back(base + b.offsets[s]);
  }
  EXPECT_EQ(r.input_ids(), ids);
  EXPECT_EQ(r.loss_mask(), mask);
  EXPECT_EQ(r.sample_offsets(), offsets);
  EXPECT_EQ(r.sample_index(), index);
  EXPECT_TRUE(r.structure_problems().empty());

  const OutputMeta& m = r.meta();
  const int64_t P = m.num_points(), H = m.hidden;
  int64_t row = 0;
  int64_t mismatches = 0;
  for (const auto& b : batches) {
    const auto got = r.hidden_states(row, row + b.num_tokens());  // [T_b, P, H]
    for (int64_t p = 0; p < P; ++p) {
      const std::vector<float> want = stored_values(m, b.states[p], b.num_tokens());
      for (int64_t t = 0; t < b.num_tokens(); ++t)
        for (int64_t h = 0; h < H; ++h)
          mismatches += std::memcmp(&got[std::size_t((t * P + p) * H + h)],
                                    &want[std::size_t(t * H + h)], sizeof(float)) != 0;
    }
    row += b.num_tokens();
  }
  EXPECT_EQ(mismatches, 0) << "hidden-state values differ bitwise from what was written";
}

}  // namespace layertap::io::test
