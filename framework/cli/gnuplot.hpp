// gnuplot, for the PNGs of `wick plot` and `wick lr-find`. Nothing read from a run becomes
// gnuplot code: values are numbers we format, titles go through quote(), and gnuplot writes
// into a private temporary folder whose name we generate; the PNG is then copied to its
// destination by this program.
#pragma once

#include <filesystem>
#include <stdexcept>
#include <string>

namespace wick::cli {

// Any text as a single-quoted gnuplot string literal that stays one.
std::string quote(const std::string& s);
// What render throws when there is no gnuplot to run (lr-find's plot is an extra it then
// leaves out).
struct GnuplotMissing : std::runtime_error {
  using std::runtime_error::runtime_error;
};
// Draws `body` (gnuplot commands after the terminal and output) into the PNG `out` of
// width x height pixels. Throws GnuplotMissing when gnuplot is not on PATH, std::runtime_error
// naming the fix when it fails or the PNG cannot be written.
void render(const std::string& body, const std::filesystem::path& out, int width, int height);

}  // namespace wick::cli
