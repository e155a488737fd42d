// Private: an error's text as users read it. A LibTorch error (c10::Error) carries its C++
// backtrace ("Exception raised from ... (most recent call first):" and "frame #N: ..." lines)
// in what(), and keeps it when a layer wraps the text in its own message: summary.json and the
// terminal get tens of lines of addresses. Torch-free.
#pragma once

#include <string>

namespace wick {

// `text` without each LibTorch backtrace in it; what comes after one (a wrapper's words) stays.
inline std::string without_backtraces(std::string text) {
  const std::string mark = "\nException raised from ";
  for (auto at = text.find(mark); at != std::string::npos; at = text.find(mark, at)) {
    auto end = text.find('\n', at + 1);
    while (end != std::string::npos && text.compare(end + 1, 7, "frame #") == 0)
      end = text.find('\n', end + 1);
    text.erase(at, end == std::string::npos ? std::string::npos : end - at);
    // The backtrace's last line break, before a wrapper's words (" (model.pt ...)") or the end.
    if (at < text.size() && (at + 1 == text.size() || text[at + 1] == ' ')) text.erase(at, 1);
  }
  return text;
}

}  // namespace wick
