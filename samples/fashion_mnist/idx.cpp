#include "idx.hpp"

#include <zlib.h>

#include <sys/stat.h>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
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

// deflate's largest expansion: about 1032 output bytes for one input byte.
constexpr std::uint64_t kMaxDeflateRatio = 1032;

// MemAvailable of /proc/meminfo in bytes (0 when it cannot be read).
std::uint64_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  std::uint64_t kib = 0;
  while (in >> key >> kib) {
    if (key == "MemAvailable:") return kib * 1024;
    in.ignore(256, '\n');
  }
  return 0;
}

}  // namespace

IdxData read_idx(const std::string& path, int rank, const std::vector<std::int64_t>& expect) {
  if (rank < 1 || rank > 255) throw std::invalid_argument("read_idx: rank must be 1..255");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0)
    throw IdxError(
        errno == ENOENT || errno == ENOTDIR ? IdxError::Kind::missing : IdxError::Kind::unreadable,
        path + ": " + std::strerror(errno));
  // A FIFO or a device (/dev/zero) could block or never end.
  if (!S_ISREG(st.st_mode))
    throw IdxError(IdxError::Kind::unreadable, path + ": not a regular file");
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
  std::string shape;
  for (int i = 0; i < rank; ++i) {
    const std::uint32_t n = be32(sizes.data() + 4 * i);
    if (static_cast<std::size_t>(i) < expect.size() && expect[i] >= 0 && expect[i] != n)
      throw IdxError(IdxError::Kind::bad_size, path + ": the header's dimension " +
                                                   std::to_string(i) + " is " + std::to_string(n) +
                                                   ", expected " + std::to_string(expect[i]));
    d.dims.push_back(n);
    shape += (i ? " x " : "") + std::to_string(n);
    // 2^40 bytes is far beyond any IDX file; a header claiming more is corrupt.
    if (n != 0 && total > (std::uint64_t{1} << 40) / n)
      throw IdxError(IdxError::Kind::bad_size,
                     path + ": the header claims an impossible size (" + shape + "...)");
    total *= n;
  }
  auto short_data = [&](std::uint64_t has, const std::string& more) {
    return IdxError(IdxError::Kind::truncated,
                    path + ": truncated: the header says " + shape + " = " + std::to_string(total) +
                        " bytes of data, the file has " + std::to_string(has) + more);
  };
  // Nothing is allocated on the header's word alone. A plain file's size bounds the data at
  // once; a gzip stream's is known only as it is read, so the buffer grows with what arrives.
  const std::uint64_t header_bytes = 4 + sizes.size();
  const auto file_bytes = static_cast<std::uint64_t>(st.st_size);
  if (gzdirect(f.get()) == 1) {
    const std::uint64_t data_bytes = file_bytes > header_bytes ? file_bytes - header_bytes : 0;
    if (data_bytes < total)
      throw short_data(data_bytes, " (" + std::to_string(file_bytes) + " bytes in all)");
  } else if (total > file_bytes * kMaxDeflateRatio) {
    // Not even a stream of zeros compresses that far: a corrupt header, or a gzip bomb.
    throw IdxError(IdxError::Kind::bad_size, path + ": the header's sizes (" + shape + ") claim " +
                                                 std::to_string(total) +
                                                 " bytes, more than a gzip file of " +
                                                 std::to_string(file_bytes) + " bytes can hold");
  }
  if (const auto avail = available_memory(); avail > 0 && total > avail)
    throw IdxError(IdxError::Kind::bad_size,
                   path + ": the header's sizes (" + shape + ") claim " + std::to_string(total) +
                       " bytes, more than this machine's available memory (" +
                       std::to_string(avail) + " bytes)");
  std::uint64_t got = 0;
  constexpr std::uint64_t kChunk = std::uint64_t{4} << 20;
  while (got < total) {
    const std::uint64_t want = std::min(total - got, std::max(kChunk, got));  // doubling
    d.bytes.resize(static_cast<std::size_t>(got + want));
    const std::size_t n = read_some(f.get(), path, d.bytes.data() + got, want);
    got += n;
    if (n < want) break;
  }
  if (got < total) throw short_data(got, "");
  d.bytes.resize(static_cast<std::size_t>(total));
  std::uint8_t extra;
  if (read_some(f.get(), path, &extra, 1) != 0)
    throw IdxError(IdxError::Kind::trailing_data,
                   path + ": more data than the header's sizes account for");
  return d;
}

}  // namespace wick::idx
