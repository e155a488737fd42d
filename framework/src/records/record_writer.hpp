// Private: the record writer. Collects the values logged for the next record, writes each
// record to metrics.jsonl (rank 0) and hands it to the record sinks; counts the records, so
// that a checkpoint knows how many were written and a resume rewinds every sink to it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

#include "wick/metrics.hpp"

namespace wick {

class StateDict;

// Sets `key` to `value` in a record's values: replaced where present, else appended, so that a
// record holds each key once.
void set_value(std::vector<std::pair<std::string, double>>& values, std::string_view key,
               double value);

class RecordWriter {
 public:
  using Sinks = std::vector<std::function<void(const Record&)>>;
  using Rewinds = std::vector<std::function<void(const std::vector<Record>&)>>;

  RecordWriter() = default;
  ~RecordWriter();
  RecordWriter(const RecordWriter&) = delete;
  RecordWriter& operator=(const RecordWriter&) = delete;

  // metrics.jsonl: appended to when `append` (a resume), else started afresh at the first
  // record. Throws naming the file and the fix when it cannot be written.
  void open(const std::filesystem::path& file, bool append);
  void set_sinks(const Sinks* sinks, const Rewinds* rewinds) {
    sinks_ = sinks;
    rewinds_ = rewinds;
  }

  // Values for the next record; a key logged twice keeps the last value. The tensor overload
  // defers the device sync to write().
  void log(std::string_view key, double value);
  void log(std::string_view key, const at::Tensor& scalar);

  // Adds the pending values (replacing a value of the same key), writes the record and hands
  // it to the sinks. A write that fails (full disk) throws: the run must not report success.
  void write(Record r) {
    stage(std::move(r));
    commit();
  }
  // The epoch record is open through after_epoch: stage() makes it last() (what hooks read
  // there) with the values pending so far, and values logged until commit() go into it too;
  // commit() writes it. Nothing staged: commit() does nothing.
  void stage(Record r);
  void commit();
  bool staged() const { return staged_; }
  // Values logged and not yet in a record (after the last one of a fit).
  bool has_pending() const { return !pending_.empty(); }
  std::int64_t count() const { return count_; }
  // A record could not be written to metrics.jsonl: the run is past a record its history lacks,
  // so no checkpoint may be taken from here (a resume from it would never write that record).
  bool write_failed() const { return write_failed_; }
  const Record& last() const { return last_; }

  // Resume: keeps the first n records of `file` (metrics.jsonl; truncated when this writer has
  // it open, i.e. on rank 0; every rank reads them back) and hands them to every rewind
  // callback; the count continues from there.
  void rewind(const std::filesystem::path& file, std::int64_t n, bool truncate);

  // The values logged but not yet written (a checkpoint between two records carries them).
  void save_pending(StateDict& out) const;
  void load_pending(const StateDict& in);
  void set_count(std::int64_t n) { count_ = n; }

 private:
  void take_pending();  // the pending values into last_

  std::vector<std::pair<std::string, std::variant<double, at::Tensor>>> pending_;
  std::filesystem::path file_;
  int fd_ = -1;
  bool cut_at_first_write_ = false;  // opened afresh: the old history goes at the first record
  std::int64_t count_ = 0;
  Record last_;
  bool staged_ = false;
  bool write_failed_ = false;
  const Sinks* sinks_ = nullptr;
  const Rewinds* rewinds_ = nullptr;
};

}  // namespace wick
