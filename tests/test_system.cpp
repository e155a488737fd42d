// Which BLAS LibTorch calls: the maps-line parsing (the fallback) and path classification behind
// the warning at the start of `fit` and `wick doctor`, and both end to end with the reference BLAS
// forced in through LD_LIBRARY_PATH; the CPU features `wick doctor` reports.
#include <torch/version.h>

#include "support.hpp"
#include "wick/hardware.hpp"
#include "wick/system.hpp"

using namespace wick::test;
using Catch::Matchers::Contains;
using wick::BlasKind;

TEST_CASE("blas_path_in_maps_line picks the BLAS library out of a /proc/self/maps line") {
  const std::string pre = "7f2c4a000000-7f2c4a0a5000 r-xp 00012000 08:01 1838392    ";
  CHECK(wick::blas_path_in_maps_line(pre +
                                     "/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3") ==
        "/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3");
  CHECK(wick::blas_path_in_maps_line(pre + "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0") ==
        "/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0");
  CHECK(wick::blas_path_in_maps_line(pre + "/usr/lib/x86_64-linux-gnu/libopenblasp-r0.3.21.so") ==
        "/usr/lib/x86_64-linux-gnu/libopenblasp-r0.3.21.so");
  CHECK(wick::blas_path_in_maps_line(pre + "/usr/lib/x86_64-linux-gnu/liblapack.so.3").empty());
  CHECK(wick::blas_path_in_maps_line(pre + "/usr/lib/libblastest.so").empty());
  CHECK(wick::blas_path_in_maps_line("7ffd1b5e2000-7ffd1b603000 rw-p 00000000 00:00 0    [stack]")
            .empty());
}

TEST_CASE("classify_blas_path tells the reference BLAS from the fast ones") {
  CHECK(wick::classify_blas_path("/usr/lib/x86_64-linux-gnu/blas/libblas.so.3.11.0") ==
        BlasKind::reference);
  CHECK(wick::classify_blas_path("/usr/lib/x86_64-linux-gnu/openblas-openmp/libblas.so.3") ==
        BlasKind::openblas);
  CHECK(wick::classify_blas_path("/usr/lib/x86_64-linux-gnu/openblas-pthread/libblas.so.3") ==
        BlasKind::openblas);
  CHECK(wick::classify_blas_path("/usr/lib/x86_64-linux-gnu/blis-openmp/libblas.so.3") ==
        BlasKind::other);
  CHECK(wick::classify_blas_path("/opt/intel/lib/libmkl_rt.so") == BlasKind::other);
  // PyPI's wheel links MKL into libtorch_cpu, whose sgemm_ LibTorch then calls.
  CHECK(wick::classify_blas_path("/venv/torch/lib/libtorch_cpu.so") == BlasKind::bundled);
  CHECK(wick::classify_blas_path("") == BlasKind::none);
}

TEST_CASE("the BLAS LibTorch links is mapped in this process and reported") {
  // libtorch_cpu needs libblas.so.3 directly, so it is mapped once libwick is loaded.
  auto report = wick::system_report();
  CHECK_FALSE(report.blas_path.empty());
  CHECK(report.blas != BlasKind::none);
  CHECK(report.blas == wick::classify_blas_path(wick::loaded_blas()));
  CHECK(report.intra_op_threads >= 1);
  CHECK_FALSE(report.torch_version.empty());
}

namespace {

const char* kReferenceBlasDir = "/usr/lib/x86_64-linux-gnu/blas";

std::string tiny_config(const TempDir& dir) {
  write_file(dir / "cfg.toml", "[trainer]\nepochs = 1\nbatch_size = 32\noutput_dir = \"" +
                                   (dir / "run").string() +
                                   "\"\n[task]\nplugin = \"synthetic\"\nsamples = 64\n");
  return (dir / "cfg.toml").string();
}

}  // namespace

TEST_CASE("wick doctor prints the set-up") {
  auto r = run_wick({"doctor"});
  INFO(r.out << r.err);
  CHECK((r.exit_code == 0 || r.exit_code == 1));
  // The LibTorch this build compiled against, and where it was loaded from.
  const auto sys = wick::system_report();
  CHECK_THAT(r.out, Contains("LibTorch   " + std::string(TORCH_VERSION) + " ("));
  CHECK_THAT(r.out, Contains(sys.torch_library));
  CHECK_THAT(r.out, Contains(sys.cuda_version.empty() ? "CPU only" : "CUDA " + sys.cuda_version));
  CHECK_THAT(r.out, Contains("BLAS"));
  CHECK_THAT(r.out, Contains("intra-op"));
  CHECK_THAT(r.out, Contains("CUDA"));
  CHECK_THAT(r.out, Contains("synthetic"));  // the built-in plugin folder is searched
  if (sys.blas != BlasKind::reference) CHECK_THAT(r.out, !Contains("reference BLAS"));
}

TEST_CASE("with the reference BLAS, wick fit warns and wick doctor says what to fix") {
  if (!fs::exists(fs::path(kReferenceBlasDir) / "libblas.so.3"))
    skip("Debian's reference BLAS (libblas3) is not installed; nothing to force in");
  if (wick::system_report().blas == BlasKind::bundled)
    skip("this LibTorch has its BLAS linked in (" + wick::system_report().blas_info +
         "): no libblas.so.3 to replace");
  // The loader searches LD_LIBRARY_PATH before the alternatives symlink, so libtorch_cpu's
  // libblas.so.3 becomes the reference implementation.
  const std::vector<std::string> env = {std::string("LD_LIBRARY_PATH=") + kReferenceBlasDir};
  auto d = run_wick({"doctor"}, env);
  INFO(d.out << d.err);
  CHECK(d.exit_code == 1);
  CHECK_THAT(d.out, Contains("reference BLAS (slow): " + std::string(kReferenceBlasDir)));
  CHECK_THAT(d.out, Contains("libopenblas0-openmp"));

  TempDir dir;
  auto f = run_wick({"fit", tiny_config(dir)}, env);
  INFO(f.out << f.err);
  CHECK(f.exit_code == 0);
  CHECK_THAT(f.err, Contains("warning: LibTorch is using the reference BLAS"));
}

TEST_CASE("with a fast BLAS, wick fit does not warn") {
  if (wick::system_report().blas == BlasKind::reference)
    skip("this machine uses the reference BLAS itself; install libopenblas0-openmp");
  TempDir dir;
  auto f = run_wick({"fit", tiny_config(dir)});
  INFO(f.out << f.err);
  CHECK(f.exit_code == 0);
  CHECK_THAT(f.err, !Contains("reference BLAS"));
}

TEST_CASE(
    "wick doctor reports the CPU's features as /proc/cpuinfo lists them, and LibTorch's kernels") {
  const auto flags = cpu_flags();
  auto yes = [&](const char* f) { return flags.count(f) ? std::string("yes") : std::string("no"); };
  auto r = run_wick({"doctor"});
  INFO(r.out << r.err);
  CHECK_THAT(r.out, Contains("AVX2 " + yes("avx2") + ", AVX-512 " + yes("avx512f") +
                             ", AVX512-BF16 " + yes("avx512_bf16") + ", AMX " + yes("amx_tile")));
  const bool native = flags.count("avx512_bf16") || flags.count("amx_bf16");
  CHECK(wick::cpu_features().native_bf16() == native);
  CHECK_THAT(r.out, Contains(native ? "bf16: this CPU runs it natively" : "bf16 is not native"));
  CHECK_THAT(r.out, Contains("plugin = \"channels_last\""));
  // LibTorch's dispatch follows ATEN_CPU_CAPABILITY; doctor reports what it chose.
  auto d = run_wick({"doctor"}, {"ATEN_CPU_CAPABILITY=default"});
  CHECK_THAT(d.out, Contains("LibTorch's own kernels: DEFAULT"));
  if (flags.count("avx2")) CHECK_THAT(r.out, !Contains("LibTorch's own kernels: DEFAULT"));
}
