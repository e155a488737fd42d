// A PNG writer for greyscale or RGB 8-bit images (zlib's deflate and crc32), enough to look at
// what a generator draws without an image library.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace wick::sample {

// pixels: height rows of width * channels bytes (channels 1: grey, 3: RGB). Throws
// std::runtime_error naming the file when it cannot be written.
void write_png(const std::string& path, const std::vector<std::uint8_t>& pixels, int width,
               int height, int channels);

}  // namespace wick::sample
