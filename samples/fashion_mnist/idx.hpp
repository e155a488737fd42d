// Reader for gzipped IDX files (the MNIST family's format): a big-endian header of magic
// (0, 0, type, number of dimensions) and one uint32 size per dimension, then the data.
// Torch-free, so that it can be unit-tested alone.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace wick::idx {

// Every message names the file and what is wrong with it.
class IdxError : public std::runtime_error {
 public:
  enum class Kind { missing, unreadable, bad_magic, truncated, trailing_data, bad_size };
  IdxError(Kind k, const std::string& msg) : std::runtime_error(msg), kind(k) {}
  Kind kind;
};

struct IdxData {
  std::vector<std::uint8_t> bytes;  // row-major, dims[0] * dims[1] * ... values
  std::vector<std::int64_t> dims;
};

// Reads an IDX file of unsigned bytes (type 0x08) with `rank` dimensions, gzipped or plain
// (zlib reads plain files transparently). Checks the magic number, that the data is exactly
// as long as the header says, and nothing follows it. Only regular files are read, and memory
// grows with the data that really arrives, never on the header's claim alone (a plain file
// claiming more than its size is refused before reading). Throws IdxError.
IdxData read_idx(const std::string& path, int rank);

}  // namespace wick::idx
