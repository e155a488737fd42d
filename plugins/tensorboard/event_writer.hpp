// TensorBoard event files written by hand: the few protobuf messages a scalar, a text and a
// histogram summary need (tensorflow/core/util/event.proto, framework/summary.proto), framed
// as TFRecords (length, masked CRC-32C of the length, data, masked CRC-32C of the data).
// Torch-free.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace wick_tb {

// CRC-32C (Castagnoli) and TFRecord's masking of it.
std::uint32_t crc32c(const std::string& bytes);
std::uint32_t masked_crc32c(const std::string& bytes);

// A histogram: counts of values in buckets whose right edges are `limits`.
struct Histogram {
  double min = 0, max = 0, num = 0, sum = 0, sum_squares = 0;
  std::vector<double> limits, counts;
};

// The serialised Event messages.
std::string file_version_event(double wall_time);
std::string scalar_event(double wall_time, std::int64_t step, const std::string& tag, float value);
std::string text_event(double wall_time, std::int64_t step, const std::string& tag,
                       const std::string& text);
std::string histogram_event(double wall_time, std::int64_t step, const std::string& tag,
                            const Histogram& h);

// One events.out.tfevents.* file, each event flushed as it is written (TensorBoard reads the
// file while the run goes on; a killed run loses nothing written).
class EventFile {
 public:
  explicit EventFile(const std::string& path);  // truncates; throws naming the path
  ~EventFile();
  EventFile(const EventFile&) = delete;
  EventFile& operator=(const EventFile&) = delete;
  void write(const std::string& event);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* f_ = nullptr;
};

}  // namespace wick_tb
