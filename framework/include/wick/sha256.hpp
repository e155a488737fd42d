// SHA-256 (FIPS 180-4), for model fingerprints and checkpoint manifests. Computed by nettle
// (Debian's libnettle); this header keeps nettle out of its users' includes.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include "wick/version.hpp"  // WICK_PUBLIC_BEGIN

WICK_PUBLIC_BEGIN

namespace wick {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t len);
  std::array<std::uint8_t, 32> digest();  // finishes the hash (and starts a new one)
  std::string hex();                      // finishes the hash (and starts a new one)

 private:
  // nettle's struct sha256_ctx, held in place (its size is checked in sha256.cpp).
  alignas(8) unsigned char ctx_[128];
};

std::string sha256_hex(const std::string& bytes);

}  // namespace wick

WICK_PUBLIC_END
