#include "records/record_writer.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>

#include "wick/outputs.hpp"
#include "wick/state_dict.hpp"

namespace wick {

namespace fs = std::filesystem;

RecordWriter::~RecordWriter() {
  if (fd_ >= 0) ::close(fd_);
}

void RecordWriter::open(const fs::path& file, bool append) {
  if (fd_ >= 0) ::close(fd_);
  file_ = file;
  fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_APPEND, 0644);
  if (fd_ < 0)
    throw std::runtime_error("cannot write '" + file.string() + "': " + std::strerror(errno) +
                             "; set trainer.output_dir to a writable folder");
  // A new history replaces the old at its first record: a fit that fails before writing one
  // (a hook's check in before_fit) leaves the earlier run's records as they were.
  cut_at_first_write_ = !append;
}

namespace {
// A value under one of a line's own fields would replace it (a resume could not read the line
// back), one under a value the trainer measures would replace that silently (what the
// summary, early stopping and a checkpoint's monitor read), and one without a name is no
// column. An lr may be logged (a hook's own schedule), replacing the trainer's.
void check_key(std::string_view key) {
  if (key.empty()) throw std::invalid_argument("Context::log: a value needs a name");
  if (is_record_field(key))
    throw std::invalid_argument("Context::log: '" + std::string(key) +
                                "' is a field of every metrics record (kind, epoch, step, "
                                "samples_seen, time_s); log the value under another name");
  for (const char* own : {"train/loss", "valid/loss", "epoch_time_s", "samples_per_s",
                          "peak_rss_mb", "train/flops_per_s", "train/flops_utilization"})
    if (key == own)
      throw std::invalid_argument("Context::log: '" + std::string(key) +
                                  "' is the trainer's own measurement, which the value would "
                                  "replace; log it under another name");
}
}  // namespace

void RecordWriter::log(std::string_view key, double value) {
  check_key(key);
  for (auto& [k, v] : pending_)
    if (k == key) {
      v = value;
      return;
    }
  pending_.emplace_back(std::string(key), value);
}

void RecordWriter::log(std::string_view key, const at::Tensor& scalar) {
  check_key(key);
  // Checked here, where the hook is blamed, not when the record reads it.
  if (scalar.numel() != 1)
    throw std::invalid_argument("Context::log(\"" + std::string(key) +
                                "\", tensor): the tensor has " + std::to_string(scalar.numel()) +
                                " elements; log one value (a mean, a sum, an element)");
  // Read at the record as a double: a value with no data (meta) or two parts (complex) would
  // fail there, blamed on whatever wrote the record.
  if (scalar.is_meta() || scalar.is_complex())
    throw std::invalid_argument("Context::log(\"" + std::string(key) + "\", tensor): a " +
                                (scalar.is_meta()
                                     ? std::string("meta tensor holds no value")
                                     : std::string("complex value is not one number")) +
                                "; log a real value on the CPU or the GPU");
  for (auto& [k, v] : pending_)
    if (k == key) {
      v = scalar.detach();
      return;
    }
  pending_.emplace_back(std::string(key), scalar.detach());
}

void set_value(std::vector<std::pair<std::string, double>>& values, std::string_view key,
               double value) {
  auto same =
      std::find_if(values.begin(), values.end(), [&](const auto& kv) { return kv.first == key; });
  if (same != values.end())
    same->second = value;
  else
    values.emplace_back(std::string(key), value);
}

void RecordWriter::stage(Record r) {
  commit();  // one open record at a time
  last_ = std::move(r);
  staged_ = true;
  take_pending();
}

void RecordWriter::take_pending() {
  for (auto& [k, v] : pending_) {
    const double x = std::holds_alternative<double>(v) ? std::get<double>(v)
                                                       : std::get<at::Tensor>(v).item<double>();
    // A hook's value replaces the trainer's own of the same key (an lr a hook logs).
    set_value(last_.values, k, x);
  }
  pending_.clear();
}

void RecordWriter::commit() {
  if (!staged_) return;
  take_pending();  // what hooks logged while it was open
  staged_ = false;
  const Record& r = last_;
  if (fd_ >= 0) {
    if (cut_at_first_write_ && ::ftruncate(fd_, 0) != 0) {
      write_failed_ = true;
      throw std::runtime_error("cannot start '" + file_.string() +
                               "' afresh: " + std::strerror(errno));
    }
    cut_at_first_write_ = false;
    // Removed while the fit ran (`rm -r` of the run folder): what follows would go to a file
    // no one can read, and the run's history would be gone without a word.
    struct stat st {};
    if (::fstat(fd_, &st) == 0 && st.st_nlink == 0) {
      write_failed_ = true;
      throw std::runtime_error("'" + file_.string() +
                               "' was removed while the fit ran (its run folder with it?); the "
                               "records from here on would be lost: start the fit again, or "
                               "resume it from a checkpoint kept elsewhere");
    }
    const std::string line = record_to_json(r) + "\n";
    std::size_t off = 0;
    while (off < line.size()) {
      const ssize_t n = ::write(fd_, line.data() + off, line.size() - off);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        write_failed_ = true;
        throw std::runtime_error("cannot append to '" + file_.string() +
                                 "': " + std::strerror(errno) +
                                 " (free space or fix permissions, then resume from the last "
                                 "checkpoint)");
      }
      off += static_cast<std::size_t>(n);
    }
  }
  ++count_;
  if (sinks_)
    for (const auto& sink : *sinks_) sink(last_);
}

void RecordWriter::rewind(const fs::path& file, std::int64_t n, bool truncate) {
  staged_ = false;
  std::vector<Record> kept;
  std::uint64_t keep_bytes = 0;
  std::error_code ec;
  if (fs::is_regular_file(file, ec)) {
    std::ifstream in(file, std::ios::binary);
    std::string line;
    while (static_cast<std::int64_t>(kept.size()) < n && std::getline(in, line)) {
      if (in.eof()) break;  // a last line without its newline is an unfinished write
      keep_bytes += line.size() + 1;
      try {
        kept.push_back(record_from_json(line));
      } catch (const std::exception& e) {
        throw std::runtime_error("'" + file.string() + "' line " + std::to_string(kept.size() + 1) +
                                 " is not a metrics record: " + e.what());
      }
    }
  }
  if (static_cast<std::int64_t>(kept.size()) < n)
    std::fprintf(stderr,
                 "wick: warning: '%s' holds %zu records, the checkpoint counts %lld; the "
                 "history continues from what is there\n",
                 file.c_str(), kept.size(), static_cast<long long>(n));
  if (truncate && fd_ >= 0) {
    cut_at_first_write_ = false;
    if (::ftruncate(fd_, static_cast<off_t>(keep_bytes)) != 0)
      throw std::runtime_error("cannot cut '" + file_.string() +
                               "' back to the checkpoint: " + std::strerror(errno));
    ::lseek(fd_, 0, SEEK_END);
  }
  count_ = static_cast<std::int64_t>(kept.size());
  last_ = kept.empty() ? Record{} : kept.back();
  if (rewinds_)
    for (const auto& fn : *rewinds_) fn(kept);
}

void RecordWriter::save_pending(StateDict& out) const {
  out.set_int("pending", static_cast<std::int64_t>(pending_.size()));
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    const auto& [k, v] = pending_[i];
    out.set_string("pending_key." + std::to_string(i), k);
    out.set_float("pending_value." + std::to_string(i),
                  std::holds_alternative<double>(v) ? std::get<double>(v)
                                                    : std::get<at::Tensor>(v).item<double>());
  }
}

void RecordWriter::load_pending(const StateDict& in) {
  pending_.clear();
  const std::int64_t n = in.has("pending") ? in.get_int("pending") : 0;
  if (n < 0 || n > 100000) throw std::runtime_error("pending record values: bad count");
  for (std::int64_t i = 0; i < n; ++i)
    pending_.emplace_back(in.get_string("pending_key." + std::to_string(i)),
                          in.get_float("pending_value." + std::to_string(i)));
}

}  // namespace wick
