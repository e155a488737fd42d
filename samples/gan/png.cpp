#include "png.hpp"

#include <zlib.h>

#include <cstdint>
#include <fstream>
#include <stdexcept>

namespace wick::sample {

namespace {

void put32(std::string& out, std::uint32_t v) {
  for (int s = 24; s >= 0; s -= 8) out += static_cast<char>((v >> s) & 0xff);
}

// A chunk: length, type, data, CRC-32 of type and data.
void chunk(std::string& out, const char* type, const std::string& data) {
  put32(out, static_cast<std::uint32_t>(data.size()));
  const std::string body = std::string(type, 4) + data;
  out += body;
  put32(out, static_cast<std::uint32_t>(crc32(0, reinterpret_cast<const Bytef*>(body.data()),
                                              static_cast<uInt>(body.size()))));
}

}  // namespace

void write_png(const std::string& path, const std::vector<std::uint8_t>& pixels, int width,
               int height, int channels) {
  const std::size_t row = static_cast<std::size_t>(width) * static_cast<std::size_t>(channels);
  if ((channels != 1 && channels != 3) || pixels.size() != row * static_cast<std::size_t>(height))
    throw std::invalid_argument("write_png: pixels do not match width x height x channels");
  // Each row starts with its filter type (0: none).
  std::string raw;
  raw.reserve((row + 1) * static_cast<std::size_t>(height));
  for (int y = 0; y < height; ++y) {
    raw += '\0';
    raw.append(reinterpret_cast<const char*>(pixels.data()) + static_cast<std::size_t>(y) * row,
               row);
  }
  uLongf size = compressBound(static_cast<uLong>(raw.size()));
  std::string deflated(size, '\0');
  if (compress(reinterpret_cast<Bytef*>(deflated.data()), &size,
               reinterpret_cast<const Bytef*>(raw.data()), static_cast<uLong>(raw.size())) != Z_OK)
    throw std::runtime_error("write_png: zlib could not compress the image for " + path);
  deflated.resize(size);

  std::string png = "\x89PNG\r\n\x1a\n";
  std::string ihdr;
  put32(ihdr, static_cast<std::uint32_t>(width));
  put32(ihdr, static_cast<std::uint32_t>(height));
  ihdr += static_cast<char>(8);                      // bits per channel
  ihdr += static_cast<char>(channels == 1 ? 0 : 2);  // grey or RGB
  ihdr += std::string(3, '\0');                      // deflate, adaptive filters, no interlace
  chunk(png, "IHDR", ihdr);
  chunk(png, "IDAT", deflated);
  chunk(png, "IEND", "");
  std::ofstream out(path, std::ios::binary);
  out.write(png.data(), static_cast<std::streamsize>(png.size()));
  out.flush();
  if (!out) throw std::runtime_error("cannot write '" + path + "'");
}

}  // namespace wick::sample
