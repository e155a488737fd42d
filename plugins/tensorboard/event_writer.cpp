#include "event_writer.hpp"

#include <boost/crc.hpp>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>

namespace wick_tb {

std::uint32_t crc32c(const std::string& bytes) {
  boost::crc_optimal<32, 0x1EDC6F41, 0xFFFFFFFF, 0xFFFFFFFF, true, true> c;
  c.process_bytes(bytes.data(), bytes.size());
  return c.checksum();
}

std::uint32_t masked_crc32c(const std::string& bytes) {
  const std::uint32_t c = crc32c(bytes);
  return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

namespace {

// Protobuf wire format: a key is (field << 3) | wire type; 0 varint, 1 64-bit, 2 length-
// delimited, 5 32-bit. Little-endian fixed-size values.
void varint(std::string& out, std::uint64_t v) {
  while (v >= 0x80) {
    out += static_cast<char>((v & 0x7f) | 0x80);
    v >>= 7;
  }
  out += static_cast<char>(v);
}
void key(std::string& out, int field, int wire) {
  varint(out, static_cast<std::uint64_t>(field) << 3 | static_cast<std::uint64_t>(wire));
}
template <class T>
void little(std::string& out, T v) {
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // x86-64 and aarch64 are little-endian
  out.append(b, sizeof(T));
}
void f_double(std::string& out, int field, double v) {
  key(out, field, 1);
  little(out, v);
}
void f_float(std::string& out, int field, float v) {
  key(out, field, 5);
  little(out, v);
}
void f_int(std::string& out, int field, std::int64_t v) {
  key(out, field, 0);
  varint(out, static_cast<std::uint64_t>(v));
}
void f_bytes(std::string& out, int field, const std::string& v) {
  key(out, field, 2);
  varint(out, v.size());
  out += v;
}
void f_packed_doubles(std::string& out, int field, const std::vector<double>& v) {
  std::string p;
  for (double d : v) little(p, d);
  f_bytes(out, field, p);
}

// Event { double wall_time = 1; int64 step = 2; string file_version = 3; Summary summary = 5 }
std::string event(double wall_time, std::int64_t step, const std::string& summary) {
  std::string e;
  f_double(e, 1, wall_time);
  f_int(e, 2, step);
  f_bytes(e, 5, summary);
  return e;
}
// Summary { repeated Value value = 1 }
std::string summary_of(const std::string& value) {
  std::string s;
  f_bytes(s, 1, value);
  return s;
}

}  // namespace

std::string file_version_event(double wall_time) {
  std::string e;
  f_double(e, 1, wall_time);
  f_bytes(e, 3, "brain.Event:2");
  return e;
}

// Value { string tag = 1; float simple_value = 2 }
std::string scalar_event(double wall_time, std::int64_t step, const std::string& tag, float value) {
  std::string v;
  f_bytes(v, 1, tag);
  f_float(v, 2, value);
  return event(wall_time, step, summary_of(v));
}

// Value { tag = 1; SummaryMetadata metadata = 9 { PluginData plugin_data = 1 { plugin_name = 1
// } }; TensorProto tensor = 8 { DataType dtype = 1 (DT_STRING = 7); TensorShapeProto
// tensor_shape = 2 (a scalar: empty); repeated bytes string_val = 8 } }
std::string text_event(double wall_time, std::int64_t step, const std::string& tag,
                       const std::string& text) {
  std::string plugin_data, metadata, tensor, v;
  f_bytes(plugin_data, 1, "text");
  f_bytes(metadata, 1, plugin_data);
  f_int(tensor, 1, 7);
  f_bytes(tensor, 2, "");
  f_bytes(tensor, 8, text);
  f_bytes(v, 1, tag);
  f_bytes(v, 9, metadata);
  f_bytes(v, 8, tensor);
  return event(wall_time, step, summary_of(v));
}

// Value { tag = 1; HistogramProto histo = 5 { min = 1; max = 2; num = 3; sum = 4;
// sum_squares = 5; repeated double bucket_limit = 6 [packed]; repeated double bucket = 7
// [packed] } }
std::string histogram_event(double wall_time, std::int64_t step, const std::string& tag,
                            const Histogram& h) {
  std::string histo, v;
  f_double(histo, 1, h.min);
  f_double(histo, 2, h.max);
  f_double(histo, 3, h.num);
  f_double(histo, 4, h.sum);
  f_double(histo, 5, h.sum_squares);
  f_packed_doubles(histo, 6, h.limits);
  f_packed_doubles(histo, 7, h.counts);
  f_bytes(v, 1, tag);
  f_bytes(v, 5, histo);
  return event(wall_time, step, summary_of(v));
}

EventFile::EventFile(const std::string& path) : path_(path) {
  f_ = std::fopen(path.c_str(), "wb");
  if (!f_)
    throw std::runtime_error("cannot create the event file '" + path +
                             "': " + std::strerror(errno));
}

EventFile::~EventFile() {
  if (f_) std::fclose(f_);
}

void EventFile::write(const std::string& event) {
  std::string len;
  little(len, static_cast<std::uint64_t>(event.size()));
  std::string rec = len;
  little(rec, masked_crc32c(len));
  rec += event;
  little(rec, masked_crc32c(event));
  if (std::fwrite(rec.data(), 1, rec.size(), f_) != rec.size() || std::fflush(f_) != 0)
    throw std::runtime_error("cannot write the event file '" + path_ +
                             "': " + std::strerror(errno));
}

}  // namespace wick_tb
