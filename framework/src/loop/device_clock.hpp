// Private: a clock on a device's own timeline (on CUDA, events recorded on the current
// stream). A mark costs the host no wait; the time between two marks is what the device spent
// between them, read later, when the marks are done. Torch-free.
#pragma once

#include <cstddef>

namespace wick {

class DeviceClock {
 public:
  virtual ~DeviceClock() = default;
  // Records a mark after the work queued so far; returns its index.
  virtual std::size_t mark() = 0;
  // Seconds between marks `from` and `to` on the device (waits until `to` is reached).
  virtual double seconds(std::size_t from, std::size_t to) = 0;
  // Forgets every mark (their resources are reused by the next ones).
  virtual void clear() = 0;
};

}  // namespace wick
