#include "records/run_lock.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>

#include "wick/files.hpp"
#include "wick/params.hpp"  // ConfigError

namespace wick {

namespace {

// The holder's line ("pid 1234 host h"), at most a few hundred bytes of it.
std::string read_holder(int fd) {
  char buf[256];
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string s(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
  while (!s.empty() && (s.back() == '\n' || s.back() == '\0')) s.pop_back();
  return s;
}

}  // namespace

void RunLock::acquire(const std::filesystem::path& dir, const std::string& what,
                      const std::string& fix) {
  release();
  const auto file = dir / "wick.lock";
  const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0644);
  if (fd < 0)
    throw std::runtime_error("cannot write '" + file.string() + "': " + std::strerror(errno) +
                             "; make the " + what + " writable or " + fix);
  if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    const std::string holder = read_holder(fd);
    ::close(fd);
    if (err != EWOULDBLOCK)
      throw std::runtime_error("cannot lock '" + file.string() + "': " + std::strerror(err));
    long pid = 0;
    char host[256] = "";
    if (std::sscanf(holder.c_str(), "pid %ld host %255s", &pid, host) != 2)
      throw ConfigError(what + " '" + dir.string() +
                        "' is in use by another wick fit that is starting; wait for it to end "
                        "or " +
                        fix);
    const std::string p = std::to_string(pid);
    throw ConfigError(what + " '" + dir.string() + "' is in use by wick pid " + p + " on host " +
                      host + "; wait for it to end, stop it (kill -INT " + p + "), or " + fix);
  }
  // Ours now. A holder's line still there means its process ended without letting go.
  const std::string left = read_holder(fd);
  if (!left.empty())
    std::fprintf(stderr, "wick: taking over '%s' from wick %s, which ended without releasing it\n",
                 file.c_str(), left.c_str());
  char host[256] = "?";
  ::gethostname(host, sizeof host - 1);
  const std::string line =
      "pid " + std::to_string(::getpid()) + " host " + std::string(host) + "\n";
  if (::ftruncate(fd, 0) != 0 ||
      ::pwrite(fd, line.data(), line.size(), 0) != static_cast<ssize_t>(line.size())) {
    const int err = errno;
    ::close(fd);
    throw std::runtime_error("cannot write '" + file.string() + "': " + std::strerror(err) +
                             " (free space or fix permissions)");
  }
  fd_ = fd;
}

void RunLock::release() {
  if (fd_ < 0) return;
  // Empty before unlocking, so that the next fit does not think we died. Should it fail, the
  // lock still goes with close(); the next fit only prints its notice.
  const bool emptied = ::ftruncate(fd_, 0) == 0;
  static_cast<void>(emptied);
  ::close(fd_);
  fd_ = -1;
}

std::shared_ptr<void> lock_folder(const std::string& folder, const std::string& what,
                                  const std::string& fix) {
  auto lock = std::make_shared<RunLock>();
  lock->acquire(folder, what, fix);
  return lock;
}

}  // namespace wick
