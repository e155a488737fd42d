#include "idx.hpp"

#include <zlib.h>

#include <sys/stat.h>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <memory>

namespace wick::idx {

namespace {

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using Gz = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// Reads up to n bytes; returns how many were read (short only at the end of the stream).
std::size_t read_some(gzFile f, const std::string& path, std::uint8_t* out, std::size_t n) {
  std::size_t got = 0;
  while (got < n) {
    // gzread takes an unsigned count: read in chunks well below its limit.
    const unsigned chunk = static_cast<unsigned>(std::min<std::size_t>(n - got, 1u << 30));
    int r = gzread(f, out + got, chunk);
    if (r < 0) {
      int err = 0;
      const char* msg = gzerror(f, &err);
      throw IdxError(IdxError::Kind::unreadable,
                     path + ": cannot decompress (" + (msg ? msg : "zlib error") + ")");
    }
    if (r == 0) break;
    got += static_cast<std::size_t>(r);
  }
  // A gzip stream cut short reads as a short count with Z_BUF_ERROR set.
  int err = 0;
  const char* msg = gzerror(f, &err);
  if (err != Z_OK && err != Z_STREAM_END && err != Z_BUF_ERROR)
    throw IdxError(IdxError::Kind::unreadable,
                   path + ": cannot decompress (" + (msg ? msg : "zlib error") + ")");
  return got;
}

std::string hex32(std::uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08X", v);
  return buf;
}

std::uint32_t be32(const std::uint8_t* p) {
  return (std::uint32_t{p[0]} << 24) | (std::uint32_t{p[1]} << 16) | (std::uint32_t{p[2]} << 8) |
         std::uint32_t{p[3]};
}

}  // namespace

IdxData read_idx(const std::string& path, int rank) {
  if (rank < 1 || rank > 255) throw std::invalid_argument("read_idx: rank must be 1..255");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw IdxError(IdxError::Kind::missing, path + ": " + std::strerror(errno));
  Gz f(gzopen(path.c_str(), "rb"));
  if (!f)
    throw IdxError(IdxError::Kind::unreadable, path + ": cannot open: " + std::strerror(errno));

  const std::uint32_t expected = 0x00000800u | static_cast<std::uint32_t>(rank);
  std::uint8_t head[4];
  if (read_some(f.get(), path, head, 4) < 4)
    throw IdxError(IdxError::Kind::truncated,
                   path + ": truncated: fewer than 4 bytes, no IDX magic number");
  const std::uint32_t magic = be32(head);
  if (magic != expected)
    throw IdxError(IdxError::Kind::bad_magic, path + ": not an IDX file of unsigned bytes with " +
                                                  std::to_string(rank) + " dimension" +
                                                  (rank == 1 ? "" : "s") + ": magic number " +
                                                  hex32(magic) + ", expected " + hex32(expected));

  IdxData d;
  std::vector<std::uint8_t> sizes(static_cast<std::size_t>(rank) * 4);
  if (read_some(f.get(), path, sizes.data(), sizes.size()) < sizes.size())
    throw IdxError(IdxError::Kind::truncated, path + ": truncated in the header (" +
                                                  std::to_string(rank) + " sizes expected)");
  std::uint64_t total = 1;
  for (int i = 0; i < rank; ++i) {
    const std::uint32_t n = be32(sizes.data() + 4 * i);
    d.dims.push_back(n);
    total *= n;
    // 2^40 bytes is far beyond any IDX file; a header claiming more is corrupt.
    if (total > (std::uint64_t{1} << 40))
      throw IdxError(IdxError::Kind::bad_size, path + ": header claims an impossible size");
  }
  d.bytes.resize(static_cast<std::size_t>(total));
  const std::size_t got = read_some(f.get(), path, d.bytes.data(), d.bytes.size());
  if (got < total) {
    std::string shape;
    for (std::size_t i = 0; i < d.dims.size(); ++i)
      shape += (i ? " x " : "") + std::to_string(d.dims[i]);
    throw IdxError(IdxError::Kind::truncated,
                   path + ": truncated: the header says " + shape + " = " + std::to_string(total) +
                       " bytes of data, the file has " + std::to_string(got));
  }
  std::uint8_t extra;
  if (read_some(f.get(), path, &extra, 1) != 0)
    throw IdxError(IdxError::Kind::trailing_data,
                   path + ": more data than the header's sizes account for");
  return d;
}

}  // namespace wick::idx
