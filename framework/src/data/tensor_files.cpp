#include "wick/tensor_files.hpp"

#include <torch/torch.h>

#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "wick/files.hpp"
#include "wick/params.hpp"

namespace wick {

namespace fs = std::filesystem;

namespace {

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the .npy code assumes little endian");

std::string extension_of(const std::string& path) {
  auto e = fs::path(path).extension().string();
  for (auto& c : e) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return e;
}

std::string read_bytes(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw ConfigError(path + ": " +
                      (fs::exists(path, ec) ? "not a regular file" : "no such file") +
                      "; give the path of a .npy, .csv or .pt file");
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  if (!f && !f.eof()) throw ConfigError(path + ": cannot be read");
  return s.str();
}

// The value of 'key' in a .npy header dict, e.g. "'<f4'" or "(3, 4)".
std::string npy_field(const std::string& header, const std::string& key,
                      const std::string& path) {
  const auto k = header.find("'" + key + "'");
  const auto colon = k == std::string::npos ? k : header.find(':', k);
  if (colon == std::string::npos)
    throw ConfigError(path + ": the .npy header has no '" + key + "'; write it with numpy.save");
  auto start = header.find_first_not_of(' ', colon + 1);
  auto end = header[start] == '(' ? header.find(')', start) + 1 : header.find(',', start);
  if (start == std::string::npos || end == std::string::npos || end == 0)
    throw ConfigError(path + ": the .npy header's '" + key + "' is cut short");
  return header.substr(start, end - start);
}

at::Tensor read_npy(const std::string& path) {
  const std::string b = read_bytes(path);
  if (b.size() < 10 || b.compare(0, 6, "\x93NUMPY") != 0)
    throw ConfigError(path + ": not a .npy file (no \\x93NUMPY magic); write it with numpy.save");
  const int major = static_cast<unsigned char>(b[6]);
  std::size_t hlen = 0, off = 0;
  if (major == 1) {
    hlen = static_cast<unsigned char>(b[8]) | (static_cast<std::size_t>(b[9]) & 0xff) << 8;
    off = 10;
  } else if ((major == 2 || major == 3) && b.size() >= 12) {
    for (int i = 0; i < 4; ++i) hlen |= (static_cast<std::size_t>(b[8 + i]) & 0xff) << (8 * i);
    off = 12;
  } else {
    throw ConfigError(path + ": .npy format version " + std::to_string(major) +
                      " is not known; write it with numpy.save");
  }
  if (off + hlen > b.size()) throw ConfigError(path + ": the .npy header runs past the file");
  const std::string header = b.substr(off, hlen);
  std::string descr = npy_field(header, "descr", path);
  if (descr.size() >= 2 && descr.front() == '\'') descr = descr.substr(1, descr.size() - 2);
  if (npy_field(header, "fortran_order", path) != "False")
    throw ConfigError(path +
                      ": the array is in Fortran order; save numpy.ascontiguousarray(a) instead");
  struct Kind {
    const char* descr;
    at::ScalarType type;
  };
  static const Kind kinds[] = {{"<f4", at::kFloat}, {"<f8", at::kDouble}, {"<f2", at::kHalf},
                               {"<i8", at::kLong},  {"<i4", at::kInt},    {"<i2", at::kShort},
                               {"|i1", at::kChar},  {"|u1", at::kByte},   {"|b1", at::kBool}};
  const Kind* kind = nullptr;
  for (const auto& k : kinds)
    if (descr == k.descr) kind = &k;
  if (!kind)
    throw ConfigError(path + ": dtype '" + descr +
                      "' is not one wick reads; save a bool, integer or float array "
                      "(a.astype(numpy.float32))");
  std::vector<std::int64_t> shape;
  const std::string dims = npy_field(header, "shape", path);
  for (std::size_t i = 1; i < dims.size();) {
    while (i < dims.size() && !std::isdigit(static_cast<unsigned char>(dims[i]))) ++i;
    if (i >= dims.size()) break;
    std::size_t used = 0;
    shape.push_back(std::stoll(dims.substr(i), &used));
    i += used;
  }
  if (shape.empty())
    throw ConfigError(path + ": holds a single value (shape ()); predict reads one row per "
                             "sample, shape [N, ...]");
  const auto elem = static_cast<std::size_t>(c10::elementSize(kind->type));
  std::size_t n = 1;
  for (auto d : shape) {
    if (d != 0 && n > (b.size() / static_cast<std::size_t>(d))) {
      n = SIZE_MAX;
      break;
    }
    n *= static_cast<std::size_t>(d);
  }
  const std::size_t data = off + hlen;
  if (n == SIZE_MAX || n * elem != b.size() - data)
    throw ConfigError(path + ": the header's shape " + dims + " does not match the " +
                      std::to_string(b.size() - data) + " bytes of data; the file is cut short "
                      "or not a .npy file");
  auto t = torch::empty(shape, kind->type);
  if (n) std::memcpy(t.data_ptr(), b.data() + data, n * elem);
  return t;
}

at::Tensor read_csv(const std::string& path) {
  std::istringstream in(read_bytes(path));
  std::string line;
  if (!std::getline(in, line))
    throw ConfigError(path + ": empty; a .csv needs a header row, then one row per sample");
  const auto columns = static_cast<std::int64_t>(std::count(line.begin(), line.end(), ',') + 1);
  std::vector<float> values;
  std::int64_t row = 1;
  while (std::getline(in, line)) {
    ++row;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::int64_t cells = 0;
    std::size_t pos = 0;
    while (true) {
      const auto comma = line.find(',', pos);
      const std::string cell =
          line.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
      char* end = nullptr;
      const float v = std::strtof(cell.c_str(), &end);
      if (cell.empty() || end == cell.c_str() ||
          std::string_view(end).find_first_not_of(" \t") != std::string_view::npos)
        throw ConfigError(path + ":" + std::to_string(row) + ": cell " + std::to_string(cells + 1) +
                          " '" + cell + "' is not a number; every cell after the header row "
                          "must be numeric");
      values.push_back(v);
      ++cells;
      if (comma == std::string::npos) break;
      pos = comma + 1;
    }
    if (cells != columns)
      throw ConfigError(path + ":" + std::to_string(row) + ": " + std::to_string(cells) +
                        " cells where the header has " + std::to_string(columns));
  }
  if (values.empty()) throw ConfigError(path + ": has a header row but no sample rows");
  const auto rows = static_cast<std::int64_t>(values.size()) / columns;
  return torch::from_blob(values.data(), {rows, columns}, torch::kFloat).clone();
}

at::Tensor read_pt(const std::string& path, const std::string& key) {
  const std::string b = read_bytes(path);
  c10::IValue v;
  try {
    v = torch::pickle_load(std::vector<char>(b.begin(), b.end()));
  } catch (const std::exception& e) {
    throw ConfigError(path + ": not a file torch.save wrote (" +
                      std::string(e.what()).substr(0, 200) + ")");
  }
  if (v.isTensor()) return v.toTensor();
  if (v.isGenericDict()) {
    for (const auto& kv : v.toGenericDict())
      if (kv.key().isString() && kv.key().toStringRef() == key && kv.value().isTensor())
        return kv.value().toTensor();
    throw ConfigError(path + ": the dict holds no tensor under '" + key +
                      "'; torch.save({\"" + key + "\": x}, ...) or save the tensor itself");
  }
  throw ConfigError(path + ": holds a " + v.tagKind() +
                    ", not a tensor or a dict of tensors; torch.save a tensor");
}

std::string npy_bytes(const at::Tensor& t) {
  std::string shape = "(";
  for (auto d : t.sizes()) shape += std::to_string(d) + ", ";
  if (t.dim() > 1) shape.resize(shape.size() - 2);
  if (t.dim() == 1) shape.resize(shape.size() - 1);
  shape += ")";
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }";
  // Magic, version, length, header and its padding: a multiple of 64 bytes, ending in '\n'.
  const std::size_t total = (10 + header.size() + 1 + 63) / 64 * 64;
  header.append(total - 10 - header.size() - 1, ' ');
  header += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(header.size() & 0xff);
  out += static_cast<char>(header.size() >> 8);
  out += header;
  out.append(static_cast<const char*>(t.data_ptr()),
             static_cast<std::size_t>(t.numel()) * sizeof(float));
  return out;
}

std::string csv_bytes(const at::Tensor& t) {
  const std::int64_t n = t.size(0), cols = n ? t.numel() / n : 0;
  std::string out = "sample";
  for (std::int64_t j = 0; j < cols; ++j) out += "," + std::to_string(j);
  out += "\n";
  const float* p = t.data_ptr<float>();
  char buf[32];
  for (std::int64_t i = 0; i < n; ++i) {
    out += std::to_string(i);
    for (std::int64_t j = 0; j < cols; ++j) {
      std::snprintf(buf, sizeof buf, ",%.9g", static_cast<double>(p[i * cols + j]));
      out += buf;
    }
    out += "\n";
  }
  return out;
}

}  // namespace

at::Tensor read_tensor_file(const std::string& path, const std::string& key) {
  const auto ext = extension_of(path);
  if (ext == ".npy") return read_npy(path);
  if (ext == ".csv") return read_csv(path);
  if (ext == ".pt" || ext == ".pth") return read_pt(path, key);
  throw ConfigError(path + ": '" + ext + "' is not a data format wick reads; give a .npy, .csv or " +
                    ".pt file");
}

void write_tensor_file(const std::string& path, const at::Tensor& t) {
  const auto ext = extension_of(path);
  if (ext != ".npy" && ext != ".csv")
    throw ConfigError(path + ": '" + ext + "' is not an output format; name a .npy or .csv file");
  const auto c = t.detach().to(at::kCPU, at::kFloat).contiguous();
  if (c.dim() == 0) throw std::invalid_argument("write_tensor_file: a tensor [N, ...] is needed");
  write_file_atomic(path, ext == ".npy" ? npy_bytes(c) : csv_bytes(c));
}

}  // namespace wick
