#include "token_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <utility>
#include <vector>

namespace wick_gpt {

namespace {

const char* const kRemake = "; make one with samples/gpt/tokenize.py (uint16 little-endian tokens)";

// splitmix64's finaliser: spreads a running sample number over 64 bits.
std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31);
}

// Windows of T + 1 tokens at the given starts: input the first T, target the last T.
wick::Batch cut(const TokenFile& file, const std::vector<std::int64_t>& starts, std::int64_t T,
                std::int64_t vocab) {
  const auto B = static_cast<std::int64_t>(starts.size());
  auto w = torch::empty({B, T + 1}, torch::kLong);
  auto* out = w.data_ptr<std::int64_t>();
  for (std::int64_t b = 0; b < B; ++b) file.window(starts[b], T + 1, vocab, out + b * (T + 1));
  return {w.slice(1, 0, T).contiguous(), w.slice(1, 1, T + 1).contiguous()};
}

std::uint32_t sampled_crc(const unsigned char* data, std::size_t bytes) {
  const std::size_t edge = 64 * 1024, block = 4096, blocks = 64;
  uLong crc = crc32_z(0L, Z_NULL, 0);
  auto add = [&](std::size_t from, std::size_t n) {
    n = std::min(n, bytes - from);
    crc = crc32_z(crc, data + from, n);
  };
  add(0, edge);
  if (bytes > 2 * edge) {
    const std::size_t middle = bytes - 2 * edge;
    for (std::size_t i = 0; i < blocks; ++i) add(edge + middle / blocks * i, block);
  }
  if (bytes > edge) add(bytes - std::min(edge, bytes - edge), edge);
  return static_cast<std::uint32_t>(crc);
}

}  // namespace

TokenFile::TokenFile(const std::string& path, std::int64_t min_tokens) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    throw std::runtime_error(path + ": cannot open it (" + std::strerror(errno) + ")" + kRemake);
  struct ::stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw std::runtime_error(path + ": not a regular file" + kRemake);
  }
  bytes_ = static_cast<std::size_t>(st.st_size);
  tokens_ = static_cast<std::int64_t>(bytes_ / 2);
  std::string problem;
  if (bytes_ == 0)
    problem = "the file is empty";
  else if (bytes_ % 2 != 0)
    problem = "its size (" + std::to_string(bytes_) +
              " bytes) is odd, but a token file holds 2-byte tokens";
  else if (tokens_ < min_tokens)
    problem = "it holds " + std::to_string(tokens_) + " tokens, fewer than the " +
              std::to_string(min_tokens) + " of one window (context + 1)";
  if (!problem.empty()) {
    ::close(fd);
    throw std::runtime_error(path + ": " + problem + kRemake);
  }
  void* p = ::mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE, fd, 0);
  const int err = errno;
  ::close(fd);  // the mapping keeps the file open
  if (p == MAP_FAILED)
    throw std::runtime_error(path + ": cannot map it (" + std::strerror(err) + ")");
  data_ = static_cast<const unsigned char*>(p);
  fingerprint_ = sampled_crc(data_, bytes_);
}

TokenFile::~TokenFile() {
  if (data_) ::munmap(const_cast<unsigned char*>(data_), bytes_);
}

void TokenFile::window(std::int64_t start, std::int64_t n, std::int64_t vocab,
                       std::int64_t* out) const {
  if (start < 0 || n < 0 || start + n > tokens_)
    throw std::logic_error(path_ + ": window [" + std::to_string(start) + ", " +
                           std::to_string(start + n) + ") outside the file's " +
                           std::to_string(tokens_) + " tokens");
  // Byte by byte: little-endian whatever the host, and no alignment assumed.
  const unsigned char* p = data_ + 2 * start;
  std::int64_t top = 0;
  for (std::int64_t i = 0; i < n; ++i) {
    out[i] = static_cast<std::int64_t>(p[2 * i]) | static_cast<std::int64_t>(p[2 * i + 1]) << 8;
    top = std::max(top, out[i]);
  }
  // The check rides on the copy (a max over what was just read), so data is checked where it
  // is used, at no extra pass over the file.
  if (top < vocab) return;
  for (std::int64_t i = 0; i < n; ++i)
    if (out[i] >= vocab)
      throw std::runtime_error(path_ + ": token " + std::to_string(out[i]) + " at token offset " +
                               std::to_string(start + i) + " is outside the vocabulary (" +
                               std::to_string(vocab) +
                               " ids); set [task] vocab larger, or tokenize with a vocabulary "
                               "that fits");
}

wick::Batch RandomWindows::get(const at::Tensor& indices, wick::Fetch& fetch) {
  const auto B = indices.size(0);
  // Starts 0 .. size - T - 1: every window of T + 1 tokens.
  const auto span = static_cast<std::uint64_t>(file_->size() - context_);
  auto draws = torch::randint(static_cast<std::int64_t>(span), {B}, fetch.generator, torch::kLong);
  const auto* d = draws.data_ptr<std::int64_t>();
  const auto idx = indices.to(torch::kLong).contiguous();
  const auto* ix = idx.data_ptr<std::int64_t>();
  std::vector<std::int64_t> starts(static_cast<std::size_t>(B));
  for (std::int64_t b = 0; b < B; ++b) {
    // The Fetch generator is seeded per (seed, epoch, batch), the same on every data-parallel
    // rank; the running sample numbers differ by rank, so offsetting by them gives each rank
    // its own windows. Still uniform: the draw alone is.
    const std::uint64_t off = mix(static_cast<std::uint64_t>(ix[b])) % span;
    starts[static_cast<std::size_t>(b)] =
        static_cast<std::int64_t>((static_cast<std::uint64_t>(d[b]) + off) % span);
  }
  return cut(*file_, starts, context_, vocab_);
}

std::int64_t FixedWindows::start(std::int64_t i) const {
  const std::int64_t last = file_->size() - context_ - 1;  // the last start of a whole window
  if (count_ <= 1) return 0;
  // i * last / (count - 1) without the product overflowing.
  const std::int64_t q = last / (count_ - 1), r = last % (count_ - 1);
  return i * q + i * r / (count_ - 1);
}

wick::Batch FixedWindows::get(const at::Tensor& indices, wick::Fetch&) {
  const auto idx = indices.to(torch::kLong).contiguous();
  const auto* ix = idx.data_ptr<std::int64_t>();
  std::vector<std::int64_t> starts(static_cast<std::size_t>(idx.size(0)));
  for (std::size_t b = 0; b < starts.size(); ++b) starts[b] = start(ix[b]);
  return cut(*file_, starts, context_, vocab_);
}

}  // namespace wick_gpt
