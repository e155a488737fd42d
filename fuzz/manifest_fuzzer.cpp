// libFuzzer target: the checkpoint manifest reader (read_checkpoint), which takes a checkpoint
// folder as untrusted input. An input is a manifest.json, read in two folders made once per
// process:
//   good/      model.pt, optimizer.pt and state.pt as regular files with fixed bytes (the
//              corpus manifests give their real sizes and sha256, so a valid one passes every
//              check);
//   a bad one  the same but for one file: model.pt a symlink to good/model.pt, optimizer.pt a
//              FIFO, state.pt a folder, or state.pt missing. Which one by the input's length:
//              each input meets one, the same every time it runs, and the run keeps its speed
//              (the JSON is parsed once per folder).
// A manifest cannot choose the files' bytes, but a mutated one reaches every check before the
// hash, and the hashes of the seeds let it past that one too.
//
// A finding is a crash, a sanitizer report, a hang (a FIFO opened), an exception other than
// CheckpointError (the only one read_checkpoint promises), a folder accepted with files that
// differ from what is on disk, or a bad folder accepted at all.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>

#include "state/checkpoint_folder.hpp"

namespace fs = std::filesystem;

namespace {

// The good folder's files (fuzz/corpus/manifest lists these sizes and hashes).
const wick::Files kFiles = {{"model.pt", "model weights, fuzz fixture\n"},
                            {"optimizer.pt", "optimizer state, fuzz fixture\n"},
                            {"state.pt", "loop state, fuzz fixture\n"}};

[[noreturn]] void finding(const std::string& what) {
  std::fprintf(stderr, "fuzz_manifest: %s\n", what.c_str());
  std::abort();
}

// POSIX rather than std::ofstream: its buffer, allocated per call, was most of the time.
void write(const fs::path& p, const std::string& bytes) {
  const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  const bool ok =
      fd >= 0 && ::write(fd, bytes.data(), bytes.size()) == static_cast<ssize_t>(bytes.size());
  if (fd >= 0) ::close(fd);
  if (!ok) finding("cannot write " + p.string());
}

struct Folders {
  fs::path root, good;
  std::array<fs::path, 4> bad;  // a symlink, a FIFO, a folder, a file missing
  Folders() {
    // In memory where there is /dev/shm: each input is written twice, and on a disk that is
    // most of the time.
    std::error_code ec;
    const fs::path base =
        fs::is_directory("/dev/shm", ec) ? fs::path("/dev/shm") : fs::temp_directory_path();
    const fs::path tmp = base / "wick-fuzz-manifest-XXXXXX";
    std::string name = tmp.string();
    if (!::mkdtemp(name.data())) finding("cannot create a folder in " + tmp.parent_path().string());
    root = name;
    good = root / "good";
    bad = {root / "link", root / "fifo", root / "folder", root / "missing"};
    for (const auto& dir : {good, bad[0], bad[1], bad[2], bad[3]}) {
      fs::create_directory(dir);
      for (const auto& [file, bytes] : kFiles) write(dir / file, bytes);
    }
    fs::remove(bad[0] / "model.pt");
    fs::create_symlink(good / "model.pt", bad[0] / "model.pt");
    fs::remove(bad[1] / "optimizer.pt");
    if (::mkfifo((bad[1] / "optimizer.pt").c_str(), 0600) != 0) finding("cannot make a FIFO");
    fs::remove(bad[2] / "state.pt");
    fs::create_directory(bad[2] / "state.pt");
    fs::remove(bad[3] / "state.pt");
  }
  ~Folders() {
    std::error_code ec;
    fs::remove_all(root, ec);
  }
};

// True when read_checkpoint accepted the folder; false on CheckpointError.
bool read(const fs::path& dir, wick::Files* files) {
  try {
    const wick::Manifest m = wick::read_checkpoint(dir, files);
    if (m.position.epoch < 0 || m.position.batch < 0 || m.optimizer_step < 0 || m.micro_step < 0 ||
        m.samples_seen < 0 || m.records < 0 || m.run.batch_size < 0 || m.run.world_size < 0)
      finding("accepted manifest with a negative count");
    return true;
  } catch (const wick::CheckpointError&) {
    return false;
  } catch (const std::exception& e) {
    finding(std::string("an exception other than CheckpointError: ") + e.what());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const Folders folders;
  const std::string manifest(reinterpret_cast<const char*>(data), size);
  const fs::path& bad = folders.bad[size % folders.bad.size()];
  write(folders.good / "manifest.json", manifest);
  write(bad / "manifest.json", manifest);

  wick::Files files;
  if (read(folders.good, &files)) {
    // Every file, once, with the bytes on disk.
    if (files.size() != kFiles.size())
      finding("accepted with " + std::to_string(files.size()) + " files, not " +
              std::to_string(kFiles.size()));
    for (const auto& [name, bytes] : kFiles) {
      std::size_t seen = 0;
      for (const auto& [n, b] : files)
        if (n == name) {
          ++seen;
          if (b != bytes) finding("accepted " + name + " with other bytes than on disk");
        }
      if (seen != 1) finding("accepted with " + name + " " + std::to_string(seen) + " times");
    }
  }
  if (read(bad, nullptr)) finding("accepted " + bad.filename().string() + "/");
  return 0;
}
