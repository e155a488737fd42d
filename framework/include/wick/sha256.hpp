// SHA-256 (FIPS 180-4), for model fingerprints and checkpoint manifests.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

namespace wick {

class Sha256 {
 public:
  Sha256();
  void update(const void* data, std::size_t len);
  std::array<std::uint8_t, 32> digest();  // finishes the hash
  std::string hex();                      // finishes the hash

 private:
  void block(const std::uint8_t* p);
  std::array<std::uint32_t, 8> h_;
  std::array<std::uint8_t, 64> buf_{};
  std::size_t buf_len_ = 0;
  std::uint64_t total_ = 0;
};

std::string sha256_hex(const std::string& bytes);

}  // namespace wick
