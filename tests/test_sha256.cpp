// wick::Sha256 (over nettle) against the FIPS 180-4 example vectors published by NIST,
// fed in one piece and in odd-sized chunks that straddle the 64-byte blocks.
#include <algorithm>

#include "support.hpp"
#include "wick/sha256.hpp"

namespace {

struct Vector {
  const char* name;
  std::string message;
  const char* digest;
};

const std::vector<Vector>& vectors() {
  static const std::vector<Vector> v = {
      {"empty", "", "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
      {"abc", "abc", "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
      {"448 bits", "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq",
       "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
      {"one million 'a'", std::string(1000000, 'a'),
       "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
  };
  return v;
}

// Feeds `m` in chunks whose sizes cycle through `sizes`.
std::string chunked(const std::string& m, const std::vector<std::size_t>& sizes) {
  wick::Sha256 h;
  std::size_t pos = 0;
  for (std::size_t i = 0; pos < m.size(); ++i) {
    const std::size_t n = std::min(sizes[i % sizes.size()], m.size() - pos);
    h.update(m.data() + pos, n);
    pos += n;
  }
  return h.hex();
}

}  // namespace

TEST_CASE("SHA-256 gives the FIPS 180-4 example digests") {
  for (const auto& v : vectors()) {
    INFO(v.name);
    CHECK(wick::sha256_hex(v.message) == v.digest);
    wick::Sha256 h;
    h.update(v.message.data(), v.message.size());
    CHECK(h.hex() == v.digest);
  }
}

TEST_CASE("SHA-256 gives the same digests when fed in odd-sized chunks") {
  for (const auto& v : vectors()) {
    INFO(v.name);
    CHECK(chunked(v.message, {1}) == v.digest);
    CHECK(chunked(v.message, {3, 7, 13}) == v.digest);
    CHECK(chunked(v.message, {63, 1, 65, 127, 129}) == v.digest);
    CHECK(chunked(v.message, {55, 9, 0, 56}) == v.digest);  // around the length field
    CHECK(chunked(v.message, {4097}) == v.digest);
  }
}

TEST_CASE("SHA-256 digest bytes match the hex, and a finished hash starts afresh") {
  wick::Sha256 h;
  h.update("abc", 3);
  const auto d = h.digest();
  CHECK(d.size() == 32);
  CHECK(d[0] == 0xba);
  CHECK(d[31] == 0xad);
  // digest() finished the hash: the object now hashes a new message from the start.
  CHECK(h.hex() == vectors()[0].digest);
  h.update("abc", 3);
  CHECK(h.hex() == vectors()[1].digest);
}
