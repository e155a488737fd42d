// Hardening (issue 13) of what wick reads from data: `wick plot` never lets a metric name or a
// run folder's name become a gnuplot command, and the IDX reader never allocates on a header's
// claim alone.
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cstdio>

#include "idx.hpp"
#include "support.hpp"

using namespace wick::test;

namespace {

std::string read_idx_error(const fs::path& p, int rank, wick::idx::IdxError::Kind& kind) {
  try {
    wick::idx::read_idx(p.string(), rank);
  } catch (const wick::idx::IdxError& e) {
    kind = e.kind;
    return e.what();
  }
  FAIL("read_idx accepted " << p);
  return {};
}

}  // namespace

TEST_CASE("wick plot: no metric name or run folder name becomes a gnuplot command") {
  need_program("gnuplot", "gnuplot-nox");
  TempDir dir;
  // A run folder whose name has a quote, a newline, a backquoted command and a semicolon.
  const fs::path run = dir / "ru\"n\n'x`touch PWNED_DIR`;y";
  fs::create_directories(run);
  const fs::path pwned = dir / "PWNED";
  // Keys ending in "loss" (so they are drawn) that try each way out of a gnuplot string.
  const std::vector<std::string> keys = {
      "a\"\nsystem(\"touch " + pwned.string() + "\")\n#loss",
      "b`touch " + pwned.string() + "`loss",
      "c'\nsystem('touch " + pwned.string() + "')\n'loss",
      "d\\\"; system(\"touch " + pwned.string() + "\"); print \"loss",
      "e@x\rloss",
  };
  std::string lines;
  for (int step = 0; step < 4; ++step) {
    nlohmann::json j = {{"kind", "step"}, {"epoch", 0}, {"step", step}};
    for (std::size_t k = 0; k < keys.size(); ++k) j[keys[k]] = 1.0 / (step + 1 + k);
    lines += j.dump() + "\n";
  }
  nlohmann::json e = {{"kind", "epoch"}, {"epoch", 0}, {"step", 4}, {keys[0], 0.3}};
  lines += e.dump() + "\n";
  write_file(run / "metrics.jsonl", lines);

  // The output path (-o) carries the same attempt.
  const fs::path out = dir / "out'\n`touch PWNED_OUT`.png";
  auto r = run_wick({"plot", run.string(), "-o", out.string()});
  INFO(r.err << r.out);
  CHECK(r.exit_code == 0);
  CHECK(r.out.rfind("wick: plot " + out.string() + " (1200x800)\n", 0) == 0);
  CHECK(fs::file_size(out) > 1000);
  CHECK_FALSE(fs::exists(pwned));
  // The backquoted commands in the folder and file names would have run in the current folder.
  for (const char* made : {"PWNED_DIR", "PWNED_OUT"}) {
    CHECK_FALSE(fs::exists(fs::current_path() / made));
    CHECK_FALSE(fs::exists(dir / made));
  }
  // And the default output, inside the oddly named run folder.
  auto r2 = run_wick({"plot", run.string()});
  INFO(r2.err);
  CHECK(r2.exit_code == 0);
  CHECK(fs::file_size(run / "curves.png") > 1000);
  CHECK_FALSE(fs::exists(pwned));
}

TEST_CASE("wick plot refuses a metrics.jsonl that is not a regular file") {
  TempDir dir;
  fs::create_directories(dir / "run");
  fs::create_symlink("/dev/zero", dir / "run" / "metrics.jsonl");
  auto r = run({"/usr/bin/timeout", "120", WICK_BIN, "plot", (dir / "run").string()});
  CHECK(r.exit_code == 1);
  CHECK(r.err ==
        "wick: error: '" + (dir / "run" / "metrics.jsonl").string() + "' is not a regular file\n");
}

TEST_CASE("read_idx: a header claiming millions of images in a tiny file allocates nothing") {
  TempDir dir;
  using Kind = wick::idx::IdxError::Kind;
  Kind kind{};
  // 16 bytes of header claiming 10,000,000 28x28 images (7.84 GB), and 17 bytes of data: 33.
  const std::string tiny = idx_header(0x00000803, {10000000, 28, 28}) + std::string(17, '\x07');
  REQUIRE(tiny.size() == 33);
  // An address-space cap of 1 GiB above what the process uses now, far below the claim: an
  // allocation from the header alone would fail with std::bad_alloc instead of the IdxError
  // checked here. (Not under ASan, whose shadow memory needs far more address space.)
#if !defined(__SANITIZE_ADDRESS__)
  rlimit old{};
  getrlimit(RLIMIT_AS, &old);
  unsigned long long pages = 0;
  if (FILE* f = std::fopen("/proc/self/statm", "r")) {
    if (std::fscanf(f, "%llu", &pages) != 1) pages = 0;
    std::fclose(f);
  }
  REQUIRE(pages > 0);
  rlimit cap = old;
  cap.rlim_cur = std::min<rlim_t>(
      old.rlim_max, pages * static_cast<rlim_t>(sysconf(_SC_PAGESIZE)) + (rlim_t{1} << 30));
  REQUIRE(setrlimit(RLIMIT_AS, &cap) == 0);
#endif

  SECTION("plain file: refused from its size, before reading") {
    write_file(dir / "img", tiny);
    const auto msg = read_idx_error(dir / "img", 3, kind);
    CHECK(kind == Kind::truncated);
    CHECK(msg == (dir / "img").string() +
                     ": truncated: the header says 10000000 x 28 x 28 = 7840000000 bytes of data, "
                     "the file has 17 (33 bytes in all)");
  }
  SECTION("gzipped: a claim no gzip file of its size can hold is refused before decompressing") {
    gzFile f = gzopen((dir / "img.gz").c_str(), "wb");
    REQUIRE(f != nullptr);
    REQUIRE(gzwrite(f, tiny.data(), static_cast<unsigned>(tiny.size())) ==
            static_cast<int>(tiny.size()));
    REQUIRE(gzclose(f) == Z_OK);
    const auto msg = read_idx_error(dir / "img.gz", 3, kind);
    CHECK(kind == Kind::bad_size);
    CHECK(msg == (dir / "img.gz").string() +
                     ": the header's sizes (10000000 x 28 x 28) claim 7840000000 bytes, more than "
                     "a gzip file of " +
                     std::to_string(fs::file_size(dir / "img.gz")) + " bytes can hold");
  }
  SECTION("a header beyond any real size is refused outright") {
    write_file(dir / "huge", idx_header(0x00000803, {0xFFFFFFFFu, 0xFFFFFFFFu, 2}));
    const auto msg = read_idx_error(dir / "huge", 3, kind);
    CHECK(kind == Kind::bad_size);
    CHECK(msg == (dir / "huge").string() +
                     ": the header claims an impossible size (4294967295 x 4294967295...)");
  }
  SECTION("a FIFO or a device is not read") {
    REQUIRE(::mkfifo((dir / "fifo").c_str(), 0600) == 0);
    const auto msg = read_idx_error(dir / "fifo", 1, kind);
    CHECK(kind == Kind::unreadable);
    CHECK(msg == (dir / "fifo").string() + ": not a regular file");
    CHECK(read_idx_error("/dev/zero", 1, kind) == "/dev/zero: not a regular file");
  }
#if !defined(__SANITIZE_ADDRESS__)
  setrlimit(RLIMIT_AS, &old);
#endif
}
