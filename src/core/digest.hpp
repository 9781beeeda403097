// SHA-256 (OpenSSL) for fingerprints of configs, weights headers, datasets and shard checksums.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace layertap {

class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;
  void update(const void* data, std::size_t n);
  void update(std::string_view s) { update(s.data(), s.size()); }
  std::string hex();  // finalises; call once

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

std::string sha256_hex(std::string_view bytes);
std::string sha256_file(const std::string& path);  // streams the file; throws naming it on error

}  // namespace layertap
