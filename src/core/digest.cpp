#include "core/digest.hpp"

#include <openssl/evp.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "core/regular_file.hpp"

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
  // Plain read(2) into a large buffer: about twice the speed of an ifstream here, which matters
  // because every shard is checksummed once written and again when verified or resumed.
  const RegularFile f(path, "file to checksum");
  Sha256 h;
  std::vector<char> buf(std::size_t(8) << 20);
  for (;;) {
    const ssize_t n = ::read(f.fd(), buf.data(), buf.size());
    if (n == 0) break;
    if (n < 0 && errno == EINTR) continue;
    LT_CHECK(n > 0, "read error while checksumming '", path, "': ", std::strerror(errno));
    h.update(buf.data(), std::size_t(n));
  }
  return h.hex();
}

}  // namespace layertap
