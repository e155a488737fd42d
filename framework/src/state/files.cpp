// write_file_atomic (wick/files.hpp): its own file, as checkpoint folders and run outputs
// both use it, and the fuzz build links it without the run outputs.
#include "wick/files.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>

namespace wick {

void write_file_atomic(const std::string& path, const std::string& bytes) {
  const std::filesystem::path file(path);
  const auto tmp = file.string() + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw std::runtime_error("cannot write '" + tmp + "': " + std::strerror(errno));
  std::size_t off = 0;
  while (off < bytes.size()) {
    ssize_t n = ::write(fd, bytes.data() + off, bytes.size() - off);
    if (n < 0) {
      int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      throw std::runtime_error("cannot write '" + tmp + "': " + std::strerror(err));
    }
    off += static_cast<std::size_t>(n);
  }
  if (::fsync(fd) != 0 || ::close(fd) != 0) {
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot flush '" + tmp + "': " + std::strerror(errno));
  }
  if (::rename(tmp.c_str(), file.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw std::runtime_error("cannot rename '" + tmp + "' to '" + file.string() +
                             "': " + std::strerror(err));
  }
  int dfd = ::open(file.parent_path().empty() ? "." : file.parent_path().c_str(),
                   O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

}  // namespace wick
