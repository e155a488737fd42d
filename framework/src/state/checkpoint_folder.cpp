#include "state/checkpoint_folder.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <random>

#include "wick/files.hpp"
#include "wick/sha256.hpp"

namespace wick {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

constexpr int kFormat = 2;
constexpr std::uint64_t kMaxManifestBytes = 1 << 20;

void fsync_dir(const fs::path& dir) {
  int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) {
    ::fsync(fd);
    ::close(fd);
  }
}

// What a path that should be a regular file is instead, for messages.
std::string not_regular(const std::string& name, mode_t mode) {
  const char* kind = S_ISDIR(mode)    ? "a folder"
                     : S_ISLNK(mode)  ? "a symbolic link"
                     : S_ISFIFO(mode) ? "a FIFO"
                     : S_ISSOCK(mode) ? "a socket"
                                      : "a device";
  return name + " is not a regular file (it is " + kind + ")";
}

// Reads a regular file (never following a symlink, never opening a FIFO or device) of at
// most `limit` bytes.
std::string read_regular(const fs::path& p, std::uint64_t limit, const std::string& name) {
  struct stat st {};
  if (::lstat(p.c_str(), &st) != 0) throw CheckpointError(name + " is missing");
  if (!S_ISREG(st.st_mode)) throw CheckpointError(not_regular(name, st.st_mode));
  const auto size = static_cast<std::uint64_t>(st.st_size);
  if (size > limit)
    throw CheckpointError(name + " has " + std::to_string(size) + " bytes, more than " +
                          std::to_string(limit));
  int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK);
  if (fd < 0) throw CheckpointError(name + " cannot be read: " + std::strerror(errno));
  std::string bytes(size, '\0');
  std::size_t off = 0;
  while (off < size) {
    const ssize_t n = ::read(fd, bytes.data() + off, size - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    off += static_cast<std::size_t>(n);
  }
  ::close(fd);
  if (off != size) throw CheckpointError(name + " changed while it was read");
  return bytes;
}

std::int64_t get_count(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j.at(key).is_number_integer())
    throw CheckpointError(where + " '" + key + "' is missing or not an integer");
  const auto v = j.at(key).get<std::int64_t>();
  if (v < 0)
    throw CheckpointError(where + " '" + key + "' is negative (" + std::to_string(v) + ")");
  return v;
}

bool is_run_id(const std::string& s) {
  return s.size() == 32 && std::all_of(s.begin(), s.end(), [](char c) {
           return std::isxdigit(static_cast<unsigned char>(c));
         });
}

bool get_flag(const json& j, const char* key, const std::string& where) {
  if (!j.contains(key) || !j.at(key).is_boolean())
    throw CheckpointError(where + " '" + key + "' is missing or not true/false");
  return j.at(key).get<bool>();
}

}  // namespace

std::uint64_t write_checkpoint_folder(const fs::path& dir, const Manifest& m, const Files& files,
                                      const std::function<void()>& between_renames) {
  const auto parent = dir.parent_path();
  const auto name = dir.filename().string();
  const auto tmp = parent / (".tmp-" + name + "-" + std::to_string(::getpid()));
  // What is replaced is an earlier checkpoint only: never a file, the run folder or a folder
  // of anything else (a checkpoint's folder holds its manifest, written last).
  {
    std::error_code ec;
    const auto here = fs::symlink_status(dir, ec);
    if (fs::exists(here) && !(fs::is_directory(here) &&
                              fs::is_regular_file(fs::symlink_status(dir / "manifest.json", ec))))
      throw std::runtime_error("cannot save checkpoint '" + dir.string() +
                               "': it exists and is not a checkpoint's folder (no manifest.json), "
                               "which a checkpoint would replace; give a free folder name");
  }
  std::uint64_t total = 0;
  try {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec) throw std::runtime_error("cannot create '" + tmp.string() + "': " + ec.message());
    json listed = json::object();
    for (const auto& [file, bytes] : files) {
      write_file_atomic((tmp / file).string(), bytes);
      listed[file] = {{"bytes", bytes.size()}, {"sha256", sha256_hex(bytes)}};
      total += bytes.size();
    }
    json j = {{"format", kFormat},
              {"reason", m.reason},
              {"position",
               {{"epoch", m.position.epoch},
                {"batch", m.position.batch},
                {"dealt_from_batch", m.dealt_from_batch},
                {"dealt_from_sample", m.dealt_from_sample}}},
              {"optimizer_step", m.optimizer_step},
              {"micro_step", m.micro_step},
              {"samples_seen", m.samples_seen},
              {"records", m.records},
              {"run",
               {{"seed", m.run.seed},
                {"batch_size", m.run.batch_size},
                {"world_size", m.run.world_size},
                {"shuffle", m.run.shuffle},
                {"drop_last", m.run.drop_last}}},
              {"files", listed}};
    if (!m.run.id.empty()) j["run"]["id"] = m.run.id;
    if (m.run.threads > 0) j["run"]["threads"] = m.run.threads;
    if (m.run.grad_accum_steps > 0) j["run"]["grad_accum_steps"] = m.run.grad_accum_steps;
    if (m.run.train_samples >= 0) j["run"]["train_samples"] = m.run.train_samples;
    if (m.run.steps_per_epoch >= 0) j["run"]["steps_per_epoch"] = m.run.steps_per_epoch;
    // The manifest last: a folder without one is an unfinished write.
    write_file_atomic((tmp / "manifest.json").string(), j.dump(2) + "\n");
    fsync_dir(tmp);
    if (fs::exists(dir, ec)) {
      // Replacing (best, or a position an earlier run also saved): move the old one aside,
      // put the new one in place, then drop the old one.
      const auto old = parent / (".old-" + name + "-" + std::to_string(::getpid()));
      fs::remove_all(old, ec);
      fs::rename(dir, old);
      try {
        if (between_renames) between_renames();
        fs::rename(tmp, dir);
      } catch (...) {
        fs::rename(old, dir, ec);  // the earlier one back under its name
        throw;
      }
      fs::remove_all(old, ec);
    } else {
      fs::rename(tmp, dir);
    }
    fsync_dir(parent);
    return total;
  } catch (const std::exception& e) {
    std::error_code ec;
    fs::remove_all(tmp, ec);
    throw std::runtime_error("cannot save checkpoint '" + dir.string() + "': " + e.what() +
                             "; the earlier checkpoints in '" + parent.string() +
                             "' are untouched (free space or fix permissions, then resume)");
  }
}

Manifest read_checkpoint(const fs::path& dir, Files* files) {
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0)
    throw CheckpointError(std::string("no such folder (") + std::strerror(errno) + ")");
  if (!S_ISDIR(st.st_mode)) throw CheckpointError("not a checkpoint folder (not a folder)");
  if (::lstat((dir / "manifest.json").c_str(), &st) != 0)
    throw CheckpointError("no manifest.json (an unfinished write?)");
  json j;
  try {
    j = json::parse(read_regular(dir / "manifest.json", kMaxManifestBytes, "manifest.json"));
  } catch (const CheckpointError&) {
    throw;
  } catch (const std::exception& e) {
    throw CheckpointError(std::string("manifest.json is unreadable: ") + e.what());
  }
  if (!j.is_object() || !j.contains("format") || !j.at("format").is_number_integer() ||
      j.at("format").get<std::int64_t>() != kFormat)
    throw CheckpointError("manifest.json is not a wick checkpoint manifest of format " +
                          std::to_string(kFormat));
  Manifest m;
  const std::string mf = "manifest.json";
  if (j.contains("reason") && j.at("reason").is_string()) m.reason = j.at("reason");
  if (!j.contains("position") || !j.at("position").is_object())
    throw CheckpointError(mf + " has no position");
  m.position.epoch = get_count(j.at("position"), "epoch", mf + " position");
  m.position.batch = get_count(j.at("position"), "batch", mf + " position");
  // Absent in older checkpoints (none of them resumed on another geometry).
  if (j.at("position").contains("dealt_from_batch")) {
    m.dealt_from_batch = get_count(j.at("position"), "dealt_from_batch", mf + " position");
    m.dealt_from_sample = get_count(j.at("position"), "dealt_from_sample", mf + " position");
    if (m.dealt_from_batch > m.position.batch)
      throw CheckpointError(mf + " position 'dealt_from_batch' is past its 'batch'");
  }
  constexpr std::int64_t kMaxPosition = std::int64_t{1} << 40;  // no overflow in the dealing
  if (m.position.batch > kMaxPosition || m.dealt_from_sample > kMaxPosition)
    throw CheckpointError(mf + " position is out of range (batch " +
                          std::to_string(m.position.batch) + ", dealt_from_sample " +
                          std::to_string(m.dealt_from_sample) + ")");
  m.optimizer_step = get_count(j, "optimizer_step", mf);
  m.micro_step = get_count(j, "micro_step", mf);
  m.samples_seen = get_count(j, "samples_seen", mf);
  m.records = get_count(j, "records", mf);
  if (!j.contains("run") || !j.at("run").is_object()) throw CheckpointError(mf + " has no run");
  const auto& r = j.at("run");
  m.run.seed = r.contains("seed") && r.at("seed").is_number_integer()
                   ? r.at("seed").get<std::int64_t>()
                   : throw CheckpointError(mf + " run 'seed' is missing or not an integer");
  m.run.batch_size = get_count(r, "batch_size", mf + " run");
  m.run.world_size = get_count(r, "world_size", mf + " run");
  // Bounded, so that the arithmetic of a resume on another geometry cannot overflow.
  if (m.run.batch_size < 1 || m.run.batch_size > (std::int64_t{1} << 31) || m.run.world_size < 1 ||
      m.run.world_size > (std::int64_t{1} << 20))
    throw CheckpointError(mf + " run 'batch_size' or 'world_size' is out of range (" +
                          std::to_string(m.run.batch_size) + ", " +
                          std::to_string(m.run.world_size) + ")");
  m.run.shuffle = get_flag(r, "shuffle", mf + " run");
  m.run.drop_last = get_flag(r, "drop_last", mf + " run");
  if (r.contains("threads")) {
    m.run.threads = get_count(r, "threads", mf + " run");
    if (m.run.threads < 1 || m.run.threads > 1024)
      throw CheckpointError(mf + " run 'threads' is out of range (" +
                            std::to_string(m.run.threads) + ")");
  }
  if (r.contains("grad_accum_steps")) {
    m.run.grad_accum_steps = get_count(r, "grad_accum_steps", mf + " run");
    if (m.run.grad_accum_steps < 1 || m.run.grad_accum_steps > (std::int64_t{1} << 31))
      throw CheckpointError(mf + " run 'grad_accum_steps' is out of range (" +
                            std::to_string(m.run.grad_accum_steps) + ")");
  }
  if (r.contains("train_samples")) m.run.train_samples = get_count(r, "train_samples", mf + " run");
  if (r.contains("steps_per_epoch"))
    m.run.steps_per_epoch = get_count(r, "steps_per_epoch", mf + " run");
  if (r.contains("id")) {
    const auto& id = r.at("id");
    if (!id.is_string() || !is_run_id(id.get<std::string>()))
      throw CheckpointError(mf + " run 'id' is not 32 hex digits");
    m.run.id = id.get<std::string>();
  }

  if (!j.contains("files") || !j.at("files").is_object())
    throw CheckpointError(mf + " lists no files");
  const auto& listed = j.at("files");
  for (const char* need : kCheckpointFiles)
    if (!listed.contains(need)) throw CheckpointError(mf + " lists no " + need);
  for (const auto& [name, info] : listed.items()) {
    // Only the known plain names: never a path that leaves the folder.
    // (std::find, not a lambda: C++17 lets no lambda capture a structured binding; clang
    // refuses what GCC accepts.)
    if (std::find(std::begin(kCheckpointFiles), std::end(kCheckpointFiles), name) ==
        std::end(kCheckpointFiles))
      throw CheckpointError(mf + " lists an unexpected file '" + name + "'");
    if (!info.is_object() || !info.contains("bytes") || !info.at("bytes").is_number_unsigned() ||
        !info.contains("sha256") || !info.at("sha256").is_string())
      throw CheckpointError(mf + " entry of " + name + " needs 'bytes' and 'sha256'");
    const auto want = info.at("bytes").get<std::uint64_t>();
    const auto p = dir / name;
    if (::lstat(p.c_str(), &st) != 0) throw CheckpointError(name + " is missing");
    if (!S_ISREG(st.st_mode)) throw CheckpointError(not_regular(name, st.st_mode));
    if (static_cast<std::uint64_t>(st.st_size) != want)
      throw CheckpointError(name + " has " + std::to_string(st.st_size) +
                            " bytes, the manifest says " + std::to_string(want) + " (truncated?)");
    auto bytes = read_regular(p, want, name);
    auto hash = sha256_hex(bytes);
    if (hash != info.at("sha256").get<std::string>())
      throw CheckpointError(name + " does not match its sha256 in the manifest (corrupted)");
    m.verified_sha256.emplace_back(name, std::move(hash));
    if (files) files->emplace_back(name, std::move(bytes));
  }
  return m;
}

CheckpointInfo checkpoint_info(const fs::path& dir, const Manifest& m, std::uint64_t bytes) {
  CheckpointInfo info;
  info.path = fs::absolute(dir).lexically_normal().string();
  info.position = m.position;
  info.optimizer_step = m.optimizer_step;
  info.records = m.records;
  info.reason = m.reason;
  info.bytes = bytes;
  return info;
}

std::string new_run_id() {
  // The OS's entropy, not a torch generator: drawing it must not move the run's random state.
  std::random_device rd;
  std::string id;
  for (int i = 0; i < 4; ++i) {
    char part[9];
    std::snprintf(part, sizeof part, "%08x", static_cast<unsigned>(rd()));
    id += part;
  }
  return id;
}

}  // namespace wick
