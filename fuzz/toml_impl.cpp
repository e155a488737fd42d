// toml++'s implementation (its parser), compiled once into the config fuzz target instead of
// linking Debian's uninstrumented libtomlplusplus.so, so that the parser's branches guide the
// fuzzer and ASan and UBSan check it. The other sources see TOML_HEADER_ONLY=0.
//
// Two known bugs of toml++ 3.3.0 (Debian's) would stop every run within seconds, so they are
// let through here, as the release library lets them through:
// - its debug builds assert preconditions that the parser then checks anyway: "[&a]"
//   (upstream issue 294) or "t = 1979-05-27T\x11" abort there, where the release library
//   reports the syntax error that wick passes on. toml++'s assertions are off below.
// - a non-ASCII character where whitespace may follow ("a = 1é") reaches TOML_UNREACHABLE in
//   is_non_ascii_horizontal_whitespace (upstream issues 190 and 295, fixed by pull request 305
//   after 3.3.0). fuzz/CMakeLists.txt leaves UBSan's unreachable check out of this file; with
//   Debian's library and with this build, every code point U+0080..U+10FFFF next to a value,
//   key or table name gives a syntax error (checked exhaustively, fuzz/README.md).
// Memory errors and other undefined behaviour stay findings.
#define TOML_ASSERT(expr) static_cast<void>(0)
#define TOML_IMPLEMENTATION
#include <toml++/toml.h>
