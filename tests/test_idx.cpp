// The IDX reader: good files (gzipped and plain), the real Debian files, and each way a file
// can be broken, with messages that name the file.
#include <cstdint>

#include <zlib.h>

#include "idx.hpp"
#include "support.hpp"

using namespace wick::test;
using wick::idx::IdxError;
using wick::idx::read_idx;

namespace {

std::string payload(std::size_t n) {
  std::string s;
  for (std::size_t i = 0; i < n; ++i) s += static_cast<char>(i * 7 % 256);
  return s;
}

void write_gz(const fs::path& p, const std::string& bytes) {
  gzFile f = gzopen(p.c_str(), "wb");
  REQUIRE(f != nullptr);
  REQUIRE(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())) ==
          static_cast<int>(bytes.size()));
  REQUIRE(gzclose(f) == Z_OK);
}

IdxError::Kind kind_of(const fs::path& p, int rank, std::string& msg) {
  try {
    read_idx(p.string(), rank);
  } catch (const IdxError& e) {
    msg = e.what();
    return e.kind;
  }
  FAIL("read_idx accepted " << p);
  return IdxError::Kind::missing;
}

}  // namespace

TEST_CASE("read_idx reads a gzipped 3-d file and a plain 1-d file") {
  TempDir dir;
  write_gz(dir / "img.gz", idx_header(0x00000803, {2, 3, 4}) + payload(24));
  auto d = read_idx((dir / "img.gz").string(), 3);
  CHECK(d.dims == std::vector<std::int64_t>{2, 3, 4});
  REQUIRE(d.bytes.size() == 24);
  for (std::size_t i = 0; i < 24; ++i) CHECK(d.bytes[i] == i * 7 % 256);

  write_file(dir / "lbl", idx_header(0x00000801, {5}) + payload(5));
  auto l = read_idx((dir / "lbl").string(), 1);
  CHECK(l.dims == std::vector<std::int64_t>{5});
  CHECK(l.bytes.size() == 5);
}

TEST_CASE("read_idx names the file and the fault") {
  TempDir dir;
  std::string msg;
  SECTION("missing") {
    CHECK(kind_of(dir / "nope.gz", 1, msg) == IdxError::Kind::missing);
    CHECK_THAT(msg, Catch::Contains((dir / "nope.gz").string()));
    CHECK_THAT(msg, Catch::Contains("No such file"));
  }
  SECTION("wrong magic: a label file where images are expected") {
    write_gz(dir / "x.gz", idx_header(0x00000801, {3}) + payload(3));
    CHECK(kind_of(dir / "x.gz", 3, msg) == IdxError::Kind::bad_magic);
    CHECK_THAT(msg, Catch::Contains((dir / "x.gz").string()));
    CHECK_THAT(msg, Catch::Contains("magic number 0x00000801, expected 0x00000803"));
  }
  SECTION("not IDX at all") {
    write_gz(dir / "x.gz", "<html>not found</html>");
    CHECK(kind_of(dir / "x.gz", 1, msg) == IdxError::Kind::bad_magic);
    CHECK_THAT(msg, Catch::Contains("0x3C68746D"));  // "<htm"
  }
  SECTION("fewer than 4 bytes") {
    write_gz(dir / "x.gz", std::string("\0\0", 2));
    CHECK(kind_of(dir / "x.gz", 1, msg) == IdxError::Kind::truncated);
  }
  SECTION("truncated in the header") {
    write_gz(dir / "x.gz", idx_header(0x00000803, {2, 3}));
    CHECK(kind_of(dir / "x.gz", 3, msg) == IdxError::Kind::truncated);
    CHECK_THAT(msg, Catch::Contains("header"));
  }
  SECTION("truncated data") {
    write_gz(dir / "x.gz", idx_header(0x00000803, {2, 3, 4}) + payload(10));
    CHECK(kind_of(dir / "x.gz", 3, msg) == IdxError::Kind::truncated);
    CHECK_THAT(msg, Catch::Contains("2 x 3 x 4 = 24 bytes of data, the file has 10"));
  }
  SECTION("trailing data") {
    write_gz(dir / "x.gz", idx_header(0x00000801, {3}) + payload(4));
    CHECK(kind_of(dir / "x.gz", 1, msg) == IdxError::Kind::trailing_data);
  }
  SECTION("a gzip stream cut in the middle") {
    write_gz(dir / "full.gz", idx_header(0x00000801, {60000}) + payload(60000));
    auto bytes = read_file(dir / "full.gz");
    write_file(dir / "x.gz", bytes.substr(0, bytes.size() / 2));
    auto k = kind_of(dir / "x.gz", 1, msg);
    CHECK((k == IdxError::Kind::truncated || k == IdxError::Kind::unreadable));
    CHECK_THAT(msg, Catch::Contains((dir / "x.gz").string()));
  }
}

TEST_CASE("read_idx reads Debian's Fashion-MNIST training labels and images") {
  const std::string dir = "/usr/share/datasets/fashion-mnist/";
  auto labels = read_idx(dir + "train-labels-idx1-ubyte.gz", 1);
  REQUIRE(labels.dims == std::vector<std::int64_t>{60000});
  // The first ten training labels of the published data set.
  const std::vector<std::uint8_t> first = {9, 0, 0, 3, 0, 2, 7, 2, 5, 5};
  CHECK(std::vector<std::uint8_t>(labels.bytes.begin(), labels.bytes.begin() + 10) == first);
  std::vector<std::int64_t> counts(10, 0);
  for (auto l : labels.bytes) counts.at(l)++;
  for (auto c : counts) CHECK(c == 6000);  // balanced: 6,000 per class
  auto images = read_idx(dir + "t10k-images-idx3-ubyte.gz", 3);
  CHECK(images.dims == std::vector<std::int64_t>{10000, 28, 28});
}

TEST_CASE("a header larger than its file could hold is refused before anything is decompressed") {
  TempDir d;
  // 65536 x 1024 x 1024 = 64 GiB claimed by a gzip file of a few dozen bytes: no deflate
  // stream expands that far, so it is refused at once (a gzip bomb or a corrupt header).
  write_gz(d / "bomb.gz", idx_header(0x00000803u, {65536, 1024, 1024}));
  std::string msg;
  CHECK(kind_of(d / "bomb.gz", 3, msg) == IdxError::Kind::bad_size);
  CHECK_THAT(msg,
             Catch::Contains((d / "bomb.gz").string() + ": the header's sizes (65536 x 1024 "
                                                        "x 1024) claim 68719476736 bytes, more "
                                                        "than a gzip file of"));

  // The sizes a caller expects (Fashion-MNIST's: as many 28 x 28 images as labels) are checked
  // from the header alone: the data behind it is never read.
  write_gz(d / "images.gz", idx_header(0x00000803u, {100000, 28, 28}) + payload(1000));
  try {
    read_idx((d / "images.gz").string(), 3, {10, 28, 28});
    FAIL("read_idx accepted a header that disagrees with the expected sizes");
  } catch (const IdxError& e) {
    CHECK(e.kind == IdxError::Kind::bad_size);
    CHECK(std::string(e.what()) ==
          (d / "images.gz").string() + ": the header's dimension 0 is 100000, expected 10");
  }
}
