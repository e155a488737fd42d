#include "config/toml_depth.hpp"

#include <string>
#include <vector>

namespace wick {

namespace {

struct TomlScanner {
  std::string_view t;
  std::size_t i = 0, line = 1, line_at = 0;  // line_at: the offset where the line starts

  TextPlace here() const { return {line, i - line_at + 1}; }
  void newline_at(std::size_t j) {
    ++line;
    line_at = j + 1;
  }
  bool starts(std::string_view s) const { return t.substr(i, s.size()) == s; }

  // From the opening quote at i to the string's last character. A single-line string that
  // is not closed ends before its line's end, which the caller then reads.
  void skip_string() {
    const char q = t[i];
    const std::string triple(3, q);
    const bool multi = starts(triple), basic = q == '"';
    for (i += multi ? 3 : 1; i < t.size(); ++i) {
      const char c = t[i];
      if (basic && c == '\\') {
        if (i + 1 < t.size() && t[i + 1] == '\n') newline_at(i + 1);
        ++i;
      } else if (c == '\n') {
        if (!multi) {
          --i;
          return;
        }
        newline_at(i);
      } else if (c == q && (!multi || starts(triple))) {
        if (multi) {
          i += 2;  // up to two more quotes belong to the string
          for (int extra = 0; extra < 2 && i + 1 < t.size() && t[i + 1] == q; ++extra) ++i;
        }
        return;
      }
    }
    i = t.size() - 1;
  }
};

}  // namespace

std::optional<TextPlace> toml_too_deep(std::string_view text) {
  struct Open {
    char kind;  // '{' an inline table, '[' an array
    int depth;  // the depth it was opened at
  };
  std::vector<Open> open;
  TomlScanner s{text};
  int header = 0;  // levels of the current [table] header
  int depth = 0;
  bool key = true;         // reading a key, else a value
  bool line_start = true;  // only blanks so far in this top-level statement
  std::optional<TextPlace> too_deep;
  auto deeper = [&] {
    if (++depth > kMaxTomlDepth && !too_deep) too_deep = s.here();
  };
  for (; s.i < text.size() && !too_deep; ++s.i) {
    const char c = text[s.i];
    if (c == '\n') {
      s.newline_at(s.i);
      if (open.empty()) {
        key = line_start = true;
        depth = header;
      }
      continue;
    }
    if (c == ' ' || c == '\t' || c == '\r') continue;
    if (c == '#') {
      while (s.i + 1 < text.size() && text[s.i + 1] != '\n') ++s.i;
      continue;
    }
    const bool first = line_start;
    line_start = false;
    if (c == '"' || c == '\'') {
      s.skip_string();
      continue;
    }
    if (key && open.empty() && first && c == '[') {
      // [a.b] or [[a.b]]: the header's parts, and a level more for an array's element.
      depth = 0;
      if (s.i + 1 < text.size() && text[s.i + 1] == '[') {
        ++s.i;
        deeper();
      }
      deeper();
      for (++s.i; s.i < text.size() && text[s.i] != ']' && text[s.i] != '\n' && !too_deep; ++s.i) {
        if (text[s.i] == '"' || text[s.i] == '\'')
          s.skip_string();
        else if (text[s.i] == '.')
          deeper();
      }
      if (s.i < text.size() && text[s.i] == '\n') --s.i;  // not closed: the parser says so
      header = depth;
      continue;
    }
    if (key) {
      if (c == '.') {
        deeper();
      } else if (c == '=') {
        deeper();
        key = false;
      } else if (c == '}' && !open.empty() && open.back().kind == '{') {  // {} or {a = 1,}
        depth = open.back().depth;
        open.pop_back();
        key = false;
      }
      continue;
    }
    if (c == '{') {
      open.push_back({'{', depth});
      key = true;
    } else if (c == '[') {
      open.push_back({'[', depth});
      deeper();
    } else if (c == ',' && !open.empty()) {
      depth = open.back().depth;
      if (open.back().kind == '{')
        key = true;
      else
        deeper();
    } else if ((c == '}' || c == ']') && !open.empty()) {
      depth = open.back().depth;
      open.pop_back();
    }
  }
  return too_deep;
}

}  // namespace wick
