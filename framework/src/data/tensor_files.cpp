#include "wick/tensor_files.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <torch/torch.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string_view>

#include "state/pickle_load.hpp"
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

void check_regular(const std::string& path) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec))
    throw ConfigError(path + ": " + (fs::exists(path, ec) ? "not a regular file" : "no such file") +
                      "; give the path of a data file");
}

std::string read_bytes(const std::string& path) {
  check_regular(path);
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  if (!f && !f.eof()) throw ConfigError(path + ": cannot be read");
  return s.str();
}

std::uint32_t le32(const char* p) {
  std::uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
std::uint16_t le16(const char* p) {
  std::uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

// ---- .npy -----------------------------------------------------------------------------------

struct NpyHeader {
  at::ScalarType type;
  std::vector<std::int64_t> shape;
  std::size_t data = 0;   // offset of the first element
  std::size_t bytes = 0;  // of the elements
};

// The value of 'key' in a .npy header dict, e.g. "'<f4'" or "(3, 4)".
std::string npy_field(const std::string& header, const std::string& key, const std::string& path) {
  const auto k = header.find("'" + key + "'");
  const auto colon = k == std::string::npos ? k : header.find(':', k);
  if (colon == std::string::npos)
    throw ConfigError(path + ": the .npy header has no '" + key + "'; write it with numpy.save");
  const auto start = header.find_first_not_of(' ', colon + 1);
  if (start == std::string::npos) throw ConfigError(path + ": the .npy header is cut short");
  const auto end = header[start] == '(' ? header.find(')', start) : header.find(',', start);
  if (end == std::string::npos) throw ConfigError(path + ": the .npy header is cut short");
  return header.substr(start, end - start + (header[start] == '(' ? 1 : 0));
}

// Parses and checks the header of `size` bytes of .npy at p: the elements must fill the rest.
NpyHeader parse_npy(const char* p, std::size_t size, const std::string& path) {
  if (size < 10 || std::memcmp(p, "\x93NUMPY", 6) != 0)
    throw ConfigError(path + ": not a .npy file (no \\x93NUMPY magic); write it with numpy.save");
  const int major = static_cast<unsigned char>(p[6]);
  std::size_t hlen = 0, off = 0;
  if (major == 1) {
    hlen = le16(p + 8);
    off = 10;
  } else if ((major == 2 || major == 3) && size >= 12) {
    hlen = le32(p + 8);
    off = 12;
  } else {
    throw ConfigError(path + ": .npy format version " + std::to_string(major) +
                      " is not known; write it with numpy.save");
  }
  if (hlen > size - off) throw ConfigError(path + ": the .npy header runs past the file");
  const std::string header(p + off, hlen);
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
  NpyHeader h;
  h.type = kind->type;
  const std::string dims = npy_field(header, "shape", path);
  for (std::size_t i = 1; i < dims.size();) {
    while (i < dims.size() && !std::isdigit(static_cast<unsigned char>(dims[i]))) ++i;
    if (i >= dims.size()) break;
    std::size_t used = 0;
    h.shape.push_back(std::stoll(dims.substr(i, 18), &used));
    i += used;
  }
  if (h.shape.empty())
    throw ConfigError(path +
                      ": holds a single value (shape ()); give one row per sample, "
                      "shape [N, ...]");
  h.data = off + hlen;
  // The element count, refusing any product that could not fit in the file.
  std::size_t n = 1;
  const std::size_t avail = size - h.data;
  for (auto d : h.shape) {
    if (d != 0 && n > avail / static_cast<std::size_t>(d)) {
      n = SIZE_MAX;
      break;
    }
    n *= static_cast<std::size_t>(d);
  }
  h.bytes = n == SIZE_MAX ? SIZE_MAX : n * static_cast<std::size_t>(c10::elementSize(h.type));
  if (h.bytes != avail)
    throw ConfigError(path + ": the header's shape " + dims + " does not match the " +
                      std::to_string(avail) +
                      " bytes of data; the file is cut short or not a "
                      ".npy file");
  return h;
}

// A .npy file, memory-mapped read-only: pages are read when used, so a set bigger than memory
// can be cut into batches by index (index_select reads; nothing may write into the tensor).
at::Tensor read_npy(const std::string& path) {
  check_regular(path);
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw ConfigError(path + ": cannot be opened: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || st.st_size == 0) {
    ::close(fd);
    throw ConfigError(path + ": empty, or its size cannot be read");
  }
  const auto size = static_cast<std::size_t>(st.st_size);
  void* map = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (map == MAP_FAILED) throw ConfigError(path + ": cannot be mapped: " + std::strerror(errno));
  NpyHeader h;
  try {
    h = parse_npy(static_cast<const char*>(map), size, path);
  } catch (...) {
    ::munmap(map, size);
    throw;
  }
  return torch::from_blob(
      static_cast<char*>(map) + h.data, h.shape, [map, size](void*) { ::munmap(map, size); },
      torch::TensorOptions().dtype(h.type));
}

at::Tensor npy_from_bytes(const std::string& b, const std::string& path) {
  const auto h = parse_npy(b.data(), b.size(), path);
  auto t = torch::empty(h.shape, h.type);
  if (h.bytes) std::memcpy(t.data_ptr(), b.data() + h.data, h.bytes);
  return t;
}

// ---- .npz: a zip of NAME.npy members, stored or deflated (numpy.savez / savez_compressed) --

std::vector<std::pair<std::string, at::Tensor>> read_npz(const std::string& path) {
  const std::string b = read_bytes(path);
  const auto bad = [&](const std::string& why) {
    return ConfigError(path + ": " + why + "; write it with numpy.savez");
  };
  // The end of central directory record: its signature within the last 64 KiB + 22 bytes.
  if (b.size() < 22) throw bad("not a .npz (zip) file");
  std::size_t eocd = std::string::npos;
  for (std::size_t i = b.size() - 22 + 1; i-- > 0 && b.size() - i <= 65557;)
    if (le32(b.data() + i) == 0x06054b50) {
      eocd = i;
      break;
    }
  if (eocd == std::string::npos) throw bad("not a .npz (zip) file");
  const std::size_t entries = le16(b.data() + eocd + 10);
  std::size_t at = le32(b.data() + eocd + 16);
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (std::size_t e = 0; e < entries; ++e) {
    if (at + 46 > b.size() || le32(b.data() + at) != 0x02014b50)
      throw bad("a damaged zip directory");
    const char* c = b.data() + at;
    const auto method = le16(c + 10);
    const std::size_t csize = le32(c + 20), usize = le32(c + 24);
    const std::size_t nlen = le16(c + 28), xlen = le16(c + 30), klen = le16(c + 32);
    const std::size_t local = le32(c + 42);
    if (at + 46 + nlen > b.size()) throw bad("a damaged zip directory");
    std::string name(c + 46, nlen);
    at += 46 + nlen + xlen + klen;
    if (csize == 0xffffffff || usize == 0xffffffff || local == 0xffffffff)
      throw bad("member '" + name +
                "' is a ZIP64 entry (over 4 GiB), which wick does not read; "
                "save big arrays as separate .npy files in a folder");
    if (local + 30 > b.size() || le32(b.data() + local) != 0x04034b50)
      throw bad("a damaged zip entry '" + name + "'");
    const std::size_t start =
        local + 30 + le16(b.data() + local + 26) + le16(b.data() + local + 28);
    if (start > b.size() || csize > b.size() - start)
      throw bad("member '" + name + "' is cut short");
    std::string data;
    if (method == 0) {
      data.assign(b.data() + start, csize);
    } else if (method == 8) {
      data.resize(usize);
      z_stream z{};
      if (inflateInit2(&z, -MAX_WBITS) != Z_OK) throw bad("zlib cannot start");
      z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(b.data() + start));
      z.avail_in = static_cast<uInt>(csize);
      z.next_out = reinterpret_cast<Bytef*>(data.data());
      z.avail_out = static_cast<uInt>(usize);
      const int rc = inflate(&z, Z_FINISH);
      inflateEnd(&z);
      if (rc != Z_STREAM_END || z.total_out != usize)
        throw bad("member '" + name + "' does not inflate");
    } else {
      throw bad("member '" + name + "' uses zip method " + std::to_string(method));
    }
    if (name.size() > 4 && name.compare(name.size() - 4, 4, ".npy") == 0)
      name.resize(name.size() - 4);
    out.emplace_back(name, npy_from_bytes(data, path + ":" + name));
  }
  return out;
}

// ---- .csv -------------------------------------------------------------------------------------

struct Csv {
  std::vector<std::string> names;
  at::Tensor values;  // [rows, columns] float32
};

Csv read_csv(const std::string& path) {
  std::istringstream in(read_bytes(path));
  Csv csv;
  std::string line;
  if (!std::getline(in, line))
    throw ConfigError(path + ": empty; a .csv needs a header row, then one row per sample");
  if (!line.empty() && line.back() == '\r') line.pop_back();
  // A UTF-8 byte order mark (Excel's "CSV UTF-8") is no part of the first column's name.
  if (line.rfind("\xEF\xBB\xBF", 0) == 0) line.erase(0, 3);
  for (std::size_t pos = 0;;) {
    const auto comma = line.find(',', pos);
    std::string name = line.substr(pos, comma == std::string::npos ? comma : comma - pos);
    while (!name.empty() && name.front() == ' ') name.erase(0, 1);
    while (!name.empty() && name.back() == ' ') name.pop_back();
    csv.names.push_back(name);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  for (std::size_t i = 0; i < csv.names.size(); ++i)
    for (std::size_t k = 0; k < i; ++k)
      if (csv.names[i] == csv.names[k])
        throw ConfigError(path + ":1: the header names column '" + csv.names[i] +
                          "' twice (columns " + std::to_string(k + 1) + " and " +
                          std::to_string(i + 1) + "); give each column its own name");
  const auto columns = static_cast<std::int64_t>(csv.names.size());
  std::vector<float> values;
  for (std::int64_t row = 2; std::getline(in, line); ++row) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    std::int64_t cells = 0;
    for (std::size_t pos = 0;;) {
      const auto comma = line.find(',', pos);
      const std::string cell = line.substr(pos, comma == std::string::npos ? comma : comma - pos);
      // from_chars reads '.' as the decimal point whatever locale a host program set (strtof
      // would not); it also reads "inf" and "nan": a cell is a finite decimal number.
      const char* first = cell.data() + std::min(cell.find_first_not_of(" \t"), cell.size());
      const char* last = cell.data() + cell.size();
      if (last - first > 1 && *first == '+' && first[1] != '-') ++first;
      double d = 0;  // then narrowed: a float32 underflows to 0 as strtof's did
      const auto [end, ec] = std::from_chars(first, last, d);
      const bool fits = std::isfinite(d) && std::fabs(d) <= std::numeric_limits<float>::max();
      const float v = fits ? static_cast<float>(d) : 0.0f;
      if (first == last || ec != std::errc() ||
          std::string_view(end, static_cast<std::size_t>(last - end)).find_first_not_of(" \t") !=
              std::string_view::npos ||
          !fits)
        throw ConfigError(path + ":" + std::to_string(row) + ":" + std::to_string(pos + 1) + ": '" +
                          cell +
                          "' is not a number; every cell after the header row "
                          "must be a finite decimal number (float32)");
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
  csv.values = torch::from_blob(values.data(), {rows, columns}, torch::kFloat).clone();
  return csv;
}

// ---- .pt ----------------------------------------------------------------------------------

c10::IValue read_pt(const std::string& path) {
  const std::string b = read_bytes(path);
  try {
    // On the CPU, where the loader works, whichever device Python saved them from.
    return load_pickle(b, c10::Device(c10::kCPU));
  } catch (const std::exception& e) {
    std::string why = e.what();
    throw ConfigError(path + ": not a file torch.save wrote (" + why.substr(0, why.find('\n')) +
                      ")");
  }
}

// The named tensors of a file: a .pt dict's, a .pt tuple's or list's ("0", "1", ...), a
// .npz's, a folder's KEY.npy files (memory-mapped).
std::vector<std::pair<std::string, at::Tensor>> named_tensors(const std::string& path) {
  std::vector<std::pair<std::string, at::Tensor>> out;
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    for (const auto& e : fs::directory_iterator(path, ec))
      if (extension_of(e.path().string()) == ".npy")
        out.emplace_back(e.path().stem().string(), read_npy(e.path().string()));
    std::sort(out.begin(), out.end(),
              [](const auto& a, const auto& b) { return a.first < b.first; });
    return out;
  }
  const auto ext = extension_of(path);
  if (ext == ".npz") return read_npz(path);
  if (ext != ".pt" && ext != ".pth")
    throw ConfigError(path + ": '" + ext +
                      "' holds no named tensors; give a .pt, .npz or .csv "
                      "file, or a folder of .npy files");
  const auto v = read_pt(path);
  if (v.isGenericDict()) {
    for (const auto& kv : v.toGenericDict())
      if (kv.key().isString() && kv.value().isTensor())
        out.emplace_back(kv.key().toStringRef(), kv.value().toTensor());
  } else if (v.isTuple() || v.isList()) {
    const auto items = v.isTuple() ? v.toTupleRef().elements().vec() : v.toList().vec();
    for (std::size_t i = 0; i < items.size(); ++i)
      if (items[i].isTensor()) out.emplace_back(std::to_string(i), items[i].toTensor());
  } else if (v.isTensor()) {
    out.emplace_back("", v.toTensor());
  } else {
    throw ConfigError(path + ": holds a " + std::string(v.tagKind()) +
                      ", not tensors; torch.save a dict or a tuple of tensors");
  }
  return out;
}

at::Tensor pick(const std::vector<std::pair<std::string, at::Tensor>>& all, const std::string& key,
                const std::string& path, const char* setting) {
  std::string keys;
  for (const auto& [k, t] : all) {
    if (k == key) return t;
    keys += (keys.empty() ? "'" : ", '") + k + "'";
  }
  throw ConfigError(path + ": no tensor '" + key + "'; it holds " +
                    (keys.empty() ? std::string("none") : keys) + "; set " + setting +
                    " to one of them");
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
  for (std::int64_t i = 0; i < n; ++i) {
    out += std::to_string(i);
    for (std::int64_t j = 0; j < cols; ++j)
      out += "," + number_text(static_cast<double>(p[i * cols + j]), 9);  // any host locale
    out += "\n";
  }
  return out;
}

}  // namespace

at::Tensor read_tensor_file(const std::string& path, const std::string& key) {
  const auto ext = extension_of(path);
  if (ext == ".npy") return read_npy(path);
  if (ext == ".csv") return read_csv(path).values;
  if (ext == ".pt" || ext == ".pth" || ext == ".npz") {
    const auto all = named_tensors(path);
    // A bare tensor, or a tuple's first (the input, as in a data file).
    if (!all.empty() && (all[0].first.empty() || all[0].first == "0")) return all[0].second;
    return pick(all, key, path, "the key");
  }
  throw ConfigError(path + ": '" + ext + "' is not a data format wick reads; give a .npy, .npz, " +
                    ".csv or .pt file");
}

TensorPair read_data_file(const std::string& path, const std::string& input_key,
                          const std::string& target_key) {
  TensorPair p;
  if (extension_of(path) == ".csv") {
    const auto csv = read_csv(path);
    std::int64_t col = -1;
    std::string names;
    for (std::size_t i = 0; i < csv.names.size(); ++i) {
      if (csv.names[i] == target_key) col = static_cast<std::int64_t>(i);
      names += (names.empty() ? "'" : ", '") + csv.names[i] + "'";
    }
    if (col < 0)
      throw ConfigError(path + ": no column '" + target_key + "' in the header row (" + names +
                        "); set target_key to the target's column");
    if (csv.names.size() < 2)
      throw ConfigError(path + ": the target is its only column; the input needs at least one");
    p.target = csv.values.select(1, col).contiguous();
    std::vector<std::int64_t> keep;
    for (std::int64_t i = 0; i < static_cast<std::int64_t>(csv.names.size()); ++i)
      if (i != col) keep.push_back(i);
    p.input = csv.values.index_select(1, torch::tensor(keep)).contiguous();
  } else {
    const auto all = named_tensors(path);
    const bool tuple = !all.empty() && all[0].first == "0";
    p.input = pick(all, tuple ? "0" : input_key, path, "input_key");
    p.target = pick(all, tuple ? "1" : target_key, path, "target_key");
  }
  if (p.input.dim() == 0 || p.target.dim() == 0 || p.input.size(0) != p.target.size(0))
    throw ConfigError(path + ": the input has " +
                      (p.input.dim() ? std::to_string(p.input.size(0)) : std::string("no")) +
                      " rows and the target " +
                      (p.target.dim() ? std::to_string(p.target.size(0)) : std::string("no")) +
                      "; they need one row per sample each");
  return p;
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
