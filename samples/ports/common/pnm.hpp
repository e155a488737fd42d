// The ports' image reader, in place of OpenCV: binary PGM (P5, grey) and PPM (P6, RGB) files
// with 8-bit samples, as RGB (a grey image repeated), resized to side x side. ImageMagick
// (convert photo.jpg photo.ppm) or netpbm (jpegtopnm) makes them from JPEG files.
#pragma once

#include <torch/torch.h>

#include <cctype>
#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <stdexcept>
#include <string>

namespace ports {

// A uint8 tensor [3, side, side], resized bilinearly.
inline torch::Tensor read_pnm(const std::string& path, std::int64_t side) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path + ": cannot open");
  auto token = [&] {  // the next header field, skipping # comments
    std::string t;
    while (in >> t && t[0] == '#') std::getline(in, t);
    return t;
  };
  const auto magic = token();
  const std::int64_t c = magic == "P6" ? 3 : magic == "P5" ? 1 : 0;
  const auto w = std::atol(token().c_str()), h = std::atol(token().c_str());
  const auto maxval = std::atol(token().c_str());
  if (!in || !c || w < 1 || h < 1 || w > 16384 || h > 16384 || maxval != 255 ||
      !std::isspace(in.get()))
    throw std::runtime_error(path + ": not a binary PGM or PPM file with 8-bit samples");
  auto img = torch::empty({h, w, c}, torch::kUInt8);
  if (!in.read(reinterpret_cast<char*>(img.data_ptr<std::uint8_t>()), img.numel()))
    throw std::runtime_error(path + ": truncated");
  namespace F = torch::nn::functional;
  auto opts = F::InterpolateFuncOptions().size(std::vector<std::int64_t>{side, side});
  auto x = F::interpolate(img.permute({2, 0, 1}).expand({3, h, w}).unsqueeze(0).to(torch::kFloat),
                          opts.mode(torch::kBilinear).align_corners(false));
  return x.squeeze(0).round().clamp(0, 255).to(torch::kUInt8);
}

}  // namespace ports
