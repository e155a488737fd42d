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
// grows with the data that really arrives, never on the header's claim alone: before anything
// is read past the header, its sizes must match `expect` (one per dimension, -1: any), and
// the data they claim must fit the file (a plain file's size; for a gzip stream its size times
// deflate's largest ratio, 1032) and this machine's available memory. Throws IdxError naming
// the file and the dimension or size at fault.
IdxData read_idx(const std::string& path, int rank, const std::vector<std::int64_t>& expect = {});

}  // namespace wick::idx
