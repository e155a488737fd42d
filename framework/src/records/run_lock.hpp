// Private: one fit at a time per output folder (and per folder a plugin locks, lock_folder in
// wick/files.hpp). Two fits writing one folder would garble each other's metrics and
// checkpoints; the lock is an flock'd file, so it goes with its process however that ends
// (kill -9 included), and the file names the holder for the message.
#pragma once

#include <filesystem>
#include <string>

namespace wick {

class RunLock {
 public:
  RunLock() = default;
  ~RunLock() { release(); }
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  // Takes `dir`/wick.lock. Throws ConfigError naming the holder's pid and host and the fix
  // when a live process holds it; notes on stderr a lock left by a process that died. `what`
  // names the folder in messages, `fix` is the way out besides waiting for the holder.
  void acquire(const std::filesystem::path& dir, const std::string& what = "output folder",
               const std::string& fix = "set trainer.output_dir to another folder");
  // Empties the file (no holder) and lets go; safe to call when not held.
  void release();
  bool held() const { return fd_ >= 0; }

 private:
  int fd_ = -1;
};

}  // namespace wick
