#include "core/digest.hpp"

#include <openssl/evp.h>

#include <fstream>
#include <vector>

#include "core/error.hpp"

namespace layertap {

struct Sha256::Impl {
  EVP_MD_CTX* ctx = nullptr;
};

Sha256::Sha256() : impl_(std::make_unique<Impl>()) {
  impl_->ctx = EVP_MD_CTX_new();
  LT_CHECK(impl_->ctx && EVP_DigestInit_ex(impl_->ctx, EVP_sha256(), nullptr) == 1,
           "OpenSSL: cannot initialise SHA-256");
}

Sha256::~Sha256() { EVP_MD_CTX_free(impl_->ctx); }

void Sha256::update(const void* data, std::size_t n) {
  LT_CHECK(EVP_DigestUpdate(impl_->ctx, data, n) == 1, "OpenSSL: SHA-256 update failed");
}

std::string Sha256::hex() {
  unsigned char md[EVP_MAX_MD_SIZE];
  unsigned int len = 0;
  LT_CHECK(EVP_DigestFinal_ex(impl_->ctx, md, &len) == 1, "OpenSSL: SHA-256 final failed");
  static const char* digits = "0123456789abcdef";
  std::string out;
  out.reserve(2 * len);
  for (unsigned int i = 0; i < len; ++i) {
    out.push_back(digits[md[i] >> 4]);
    out.push_back(digits[md[i] & 15]);
  }
  return out;
}

std::string sha256_hex(std::string_view bytes) {
  Sha256 h;
  h.update(bytes);
  return h.hex();
}

std::string sha256_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  LT_CHECK(in, "cannot open '", path, "' for checksumming");
  Sha256 h;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    h.update(buf.data(), std::size_t(in.gcount()));
  }
  LT_CHECK(in.eof(), "read error while checksumming '", path, "'");
  return h.hex();
}

}  // namespace layertap
