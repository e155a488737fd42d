#include "wick/sha256.hpp"

#include <nettle/sha2.h>

#include <cstdint>
#include <new>

namespace wick {

namespace {
static_assert(sizeof(sha256_ctx) <= sizeof(unsigned char[128]) && alignof(sha256_ctx) <= 8,
              "wick::Sha256 holds nettle's sha256_ctx in place: enlarge its storage");
static_assert(SHA256_DIGEST_SIZE == 32, "SHA-256 digests are 32 bytes");

sha256_ctx* ctx(unsigned char* storage) {
  return std::launder(reinterpret_cast<sha256_ctx*>(storage));
}
}  // namespace

Sha256::Sha256() {
  sha256_init(new (ctx_) sha256_ctx);
}

void Sha256::update(const void* data, std::size_t len) {
  sha256_update(ctx(ctx_), len, static_cast<const std::uint8_t*>(data));
}

std::array<std::uint8_t, 32> Sha256::digest() {
  std::array<std::uint8_t, 32> out{};
  sha256_digest(ctx(ctx_), out.size(), out.data());  // also resets the context
  return out;
}

std::string Sha256::hex() {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (auto b : digest()) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

std::string sha256_hex(const std::string& bytes) {
  Sha256 h;
  h.update(bytes.data(), bytes.size());
  return h.hex();
}

}  // namespace wick
