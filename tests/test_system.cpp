// Which BLAS LibTorch calls: the maps-line parsing (the fallback) and path classification behind
// the warning at the start of `fit` and `wick doctor`, and both end to end with the reference BLAS
// forced in through LD_LIBRARY_PATH; the CPU features `wick doctor` reports; which library the
// standard library's symbols come from.
#include <dlfcn.h>
#include <torch/version.h>

#include <atomic>
#include <sstream>
#include <thread>

#include "cuda/cuda_load.hpp"
#include "cuda/own_kernels.hpp"
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
  INFO(r.err << r.out);
  CHECK((r.exit_code == 0 || r.exit_code == 1));
  // The LibTorch this build compiled against, and where it was loaded from.
  const auto sys = wick::system_report();
  CHECK_THAT(r.out, Contains("LibTorch   " + std::string(TORCH_VERSION) + " ("));
  CHECK_THAT(r.out, Contains(sys.torch_library));
  CHECK_THAT(r.out, Contains(sys.cuda_version.empty() ? "CPU only" : "CUDA " + sys.cuda_version));
  CHECK_THAT(r.out, Contains("BLAS"));
  CHECK_THAT(r.out, Contains("intra-op"));
  CHECK_THAT(r.out, Contains("CUDA"));
  if (!sys.cuda_version.empty()) {
    // LibTorch's CUDA side loaded before LibTorch was asked about CUDA, in the command as here:
    // its own hooks answer (its stand-in has no runtime version).
    CHECK(sys.cuda_missing.empty());
    CHECK(sys.cuda_runtime > 0);
    CHECK_THAT(r.out, Contains("runtime " + std::to_string(sys.cuda_runtime)));
  }
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
  INFO(d.err << d.out);
  CHECK(d.exit_code == 1);
  CHECK_THAT(d.out, Contains("reference BLAS (slow): " + std::string(kReferenceBlasDir)));
  CHECK_THAT(d.out, Contains("libopenblas0-openmp"));

  TempDir dir;
  auto f = run_wick({"fit", tiny_config(dir)}, env);
  INFO(f.err << f.out);
  CHECK(f.exit_code == 0);
  CHECK_THAT(f.err, Contains("warning: LibTorch is using the reference BLAS"));
}

TEST_CASE("with a fast BLAS, wick fit does not warn") {
  if (wick::system_report().blas == BlasKind::reference)
    skip("this machine uses the reference BLAS itself; install libopenblas0-openmp");
  TempDir dir;
  auto f = run_wick({"fit", tiny_config(dir)});
  INFO(f.err << f.out);
  CHECK(f.exit_code == 0);
  CHECK_THAT(f.err, !Contains("reference BLAS"));
}

TEST_CASE(
    "wick doctor reports the CPU's features as /proc/cpuinfo lists them, and LibTorch's kernels",
    "[cpu-path]") {
  const auto flags = cpu_flags();
  auto yes = [&](const char* f) { return flags.count(f) ? std::string("yes") : std::string("no"); };
  auto r = run_wick({"doctor"});
  INFO(r.err << r.out);
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

TEST_CASE(
    "WICK_CPU_DISABLE hides CPU features from wick and LibTorch, and a wrong name is refused") {
  // avx512f hides every AVX-512 feature and AMX with it; doctor says what is hidden, and
  // LibTorch's own kernels follow (ATEN_CPU_CAPABILITY, set by wick at start).
  // (WICK_CUDA_DISABLE's report rides on the same run: its own test below.)
  auto r = run_wick({"doctor"}, {"WICK_CPU_DISABLE=avx512f", "WICK_CUDA_DISABLE= adam,layer_norm"});
  INFO(r.err << r.out);
  CHECK_THAT(r.out, Contains("hidden by WICK_CUDA_DISABLE: layer_norm,adam (LibTorch's operators"));
  CHECK_THAT(r.out, Contains("AVX-512 no, AVX512-BF16 no, AMX no"));
  CHECK_THAT(r.out, Contains("hidden by WICK_CPU_DISABLE: avx512f,avx512_bf16,amx_tile,amx_bf16"));
  CHECK_THAT(r.out, Contains("bf16 is not native"));
  CHECK_THAT(r.out, !Contains("LibTorch's own kernels: AVX512"));
  auto bad = run_wick({"doctor"}, {"WICK_CPU_DISABLE=avx512bf16"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Contains("WICK_CPU_DISABLE: 'avx512bf16' is not a CPU feature wick can "
                               "hide; name some of avx2, avx512f, avx512_bf16, amx_tile, "
                               "amx_bf16, separated by commas"));
}

TEST_CASE("WICK_CUDA_DISABLE names wick's own CUDA kernels to leave unused, a wrong name refused") {
  using namespace wick::cuda;
  // Bits in kOwnKernelNames's order; spaces and empty names dropped; all is every one.
  CHECK(parse_own_kernels("") == 0);
  CHECK(parse_own_kernels("adam") == 1u << static_cast<unsigned>(OwnKernel::adam));
  CHECK(parse_own_kernels(" linear ,, cross_entropy") ==
        ((1u << static_cast<unsigned>(OwnKernel::linear)) |
         (1u << static_cast<unsigned>(OwnKernel::cross_entropy))));
  const auto all = parse_own_kernels("all");
  CHECK(own_kernel_names(all) ==
        "layer_norm, cross_entropy, gelu_mlp, linear, adam, bf16_copies, bias_grad");
  CHECK(parse_own_kernels("gelu_mlp,all") == all);
  CHECK(own_kernel_names(0).empty());
  CHECK_THROWS_WITH(parse_own_kernels("adam,layernorm"),
                    "WICK_CUDA_DISABLE: 'layernorm' is not one of wick's CUDA kernels; name some "
                    "of layer_norm, cross_entropy, gelu_mlp, linear, adam, bf16_copies, "
                    "bias_grad (or all), separated by commas");
  // A test may set the set; each name answers for itself alone.
  set_hidden_own_kernels(parse_own_kernels("gelu_mlp"));
  CHECK(hidden(OwnKernel::gelu_mlp));
  CHECK_FALSE(hidden(OwnKernel::linear));
  set_hidden_own_kernels(0);
  CHECK_FALSE(hidden(OwnKernel::gelu_mlp));
  // `wick` refuses a wrong name at start, before any command runs (exit 2).
  auto bad = run_wick({"doctor"}, {"WICK_CUDA_DISABLE=adamw"});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Contains("WICK_CUDA_DISABLE: 'adamw' is not one of wick's CUDA kernels"));
}

// PyPI's LibTorch exports pieces of a libstdc++ (std::filesystem among them, unversioned) that
// satisfy a program's references too. Found first, they run with another compiler's inline
// parts of the same classes: remove_all crashed here with GCC 12 before wick linked libstdc++
// first (WICK_LIBSTDCXX_FIRST, CMakeLists.txt). Both the test process and the wick command must
// bind every std::filesystem symbol to the C++ library itself.
TEST_CASE("std::filesystem comes from the C++ standard library, not from a copy in LibTorch") {
  void* sym = dlsym(RTLD_DEFAULT, "_ZNSt10filesystem10remove_allERKNS_7__cxx114pathE");
  REQUIRE(sym != nullptr);
  Dl_info where{};
  REQUIRE(dladdr(sym, &where) != 0);
  REQUIRE(where.dli_fname != nullptr);
  CHECK_THAT(where.dli_fname, Contains("libstdc++"));

  // Every binding the wick command makes at start (LD_BIND_NOW: all of them, not just those a
  // --version run calls), as the dynamic linker reports them.
  auto r = run_wick({"--version"}, {"LD_DEBUG=bindings", "LD_BIND_NOW=1"});
  REQUIRE(r.exit_code == 0);
  std::istringstream lines(r.err);
  int to_libstdcxx = 0;
  for (std::string line; std::getline(lines, line);) {
    if (line.find("`_ZNSt10filesystem") == std::string::npos) continue;
    INFO(line);
    // "binding file A [0] to B [0]: normal symbol `...'": B is where the definition is. The
    // program's own inline copies (a path's constructor) are its compiler's too; LibTorch's
    // never.
    const auto to = line.find(" to ");
    REQUIRE(to != std::string::npos);
    const auto target = line.substr(to + 4, line.find(": ", to) - to - 4);
    CHECK(target.find("libtorch") == std::string::npos);
    CHECK(target.find("libc10") == std::string::npos);
    to_libstdcxx += target.find("libstdc++") != std::string::npos;
  }
  CHECK(to_libstdcxx > 0);  // libwick uses std::filesystem: the check saw its bindings
}

TEST_CASE("trainer.device = auto resolves once, to the GPU where LibTorch sees one") {
  // Config's run facts (what a plugin's constructor reads) and the Trainer both resolve it
  // through resolve_device: on a GPU machine both say cuda, elsewhere both cpu.
  const bool gpu = wick::system_report().cuda_available;
  const auto d = wick::resolve_device(wick::Device{}, /*auto_device=*/true);
  CHECK(d.is_cuda() == gpu);
  CHECK(wick::resolve_device(wick::Device{}, false).is_cpu());
  if (!gpu)
    CHECK_THROWS_WITH(wick::resolve_device(wick::Device{wick::DeviceType::cuda, 0}, false),
                      Contains("trainer.device = \"cuda:0\" but no CUDA device is visible to "
                               "LibTorch (no GPU or driver here"));
}

TEST_CASE("each rank of a job on one machine gets a GPU of its own unless the config names one") {
  using wick::Device, wick::DeviceType;
  const Device any{DeviceType::cuda, -1}, cpu{}, second{DeviceType::cuda, 1};
  // Four ranks on four GPUs: LOCAL_RANK's; on two: shared round the GPUs; each rank left one
  // GPU by CUDA_VISIBLE_DEVICES: that one.
  CHECK(wick::device_for_rank(any, 3, 8, 4) == Device{DeviceType::cuda, 3});
  CHECK(wick::device_for_rank(any, 3, 8, 2) == Device{DeviceType::cuda, 1});
  CHECK(wick::device_for_rank(any, 3, 8, 1) == Device{DeviceType::cuda, 0});
  // One process, a GPU the config names, or the CPU: as asked.
  CHECK(wick::device_for_rank(any, 0, 1, 4) == any);
  CHECK(wick::device_for_rank(second, 3, 8, 4) == second);
  CHECK(wick::device_for_rank(cpu, 3, 8, 4) == cpu);
}

TEST_CASE("a CUDA device asked for where none is visible: CUDA_VISIBLE_DEVICES is named") {
  TempDir dir;
  auto r = run_wick({"check", tiny_config(dir), "--set", "trainer.device=\"cuda\""},
                    {"CUDA_VISIBLE_DEVICES="});
  INFO(r.err);
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.err, Contains("trainer.device = \"cuda\" but no CUDA device is visible to "
                             "LibTorch (no GPU or driver here, a CPU build of LibTorch, or "
                             "CUDA_VISIBLE_DEVICES hiding them: it is \"\"); use \"cpu\""));
}

namespace {

bool cuda_mapped() {
  return read_file("/proc/self/maps").find("libtorch_cuda.so") != std::string::npos;
}

}  // namespace

TEST_CASE("a CPU run never loads LibTorch's CUDA side, and asking for CUDA loads it first") {
  if (!wick::cuda::compiled())
    skip("this wick is built against a CPU-only LibTorch (" TORCH_VERSION ")");
  // This program links libwick, which links LibTorch's CPU side alone.
  CHECK_FALSE(cuda_mapped());
  // Nor does the command load it for a CPU fit (LD_DEBUG=files names each library loaded).
  TempDir dir;
  auto r = run_wick({"fit", tiny_config(dir)}, {"LD_DEBUG=files"});
  INFO(r.err.substr(0, 2000));
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.err, Contains("libtorch_cpu.so"));
  CHECK_THAT(r.err, !Contains("libtorch_cuda.so"));
  CHECK_THAT(r.err, !Contains("libwick_cuda.so"));
  // Nor for two ranks on the CPU: ddp takes NCCL from wick (nccl_group), not by linking it.
  TempDir two_dir;
  auto two = run_wick({"fit", tiny_config(two_dir), "--nproc", "2"}, {"LD_DEBUG=files"});
  REQUIRE(two.exit_code == 0);
  CHECK_THAT(two.err, Contains("wick_ddp.so"));
  CHECK_THAT(two.err, !Contains("libtorch_cuda.so"));
  // "auto" loads it before LibTorch is asked whether it has CUDA (its first answer stays).
  const auto d = wick::resolve_device(wick::Device{}, /*auto_device=*/true);
  CHECK(cuda_mapped());
  CHECK(wick::cuda::loaded());
  const auto sys = wick::system_report();
  CHECK(sys.cuda_missing.empty());
  CHECK(sys.cuda_runtime > 0);  // LibTorch's own CUDA hooks answer, not its stand-in
  CHECK(d.is_cuda() == sys.cuda_available);
}

// A busy machine (README: Threads): trainer.threads = "auto" takes the cores that are free,
// shared among this machine's ranks.
TEST_CASE("wick doctor says what trainer.threads = auto would take now") {
  auto r = run_wick({"doctor"}, {"OMP_NUM_THREADS=1"});
  INFO(r.err << r.out);
  CHECK_THAT(r.out, Contains("trainer.threads = \"auto\" takes 1 now (OMP_NUM_THREADS)"));
  auto free = run_wick({"doctor"}, {"OMP_NUM_THREADS="});
  CHECK_THAT(free.out, Contains("cores free)"));
  // A value that is no count is said to be ignored, not dropped silently. (Not a huge count:
  // Debian's libgomp would try to start that many threads and fail.)
  auto bad = run_wick({"doctor"}, {"OMP_NUM_THREADS=four"});
  INFO(bad.err);
  CHECK_THAT(bad.err, Contains("wick: warning: OMP_NUM_THREADS=four is not a thread count from "
                               "1 to 1024; ignored"));
  CHECK_THAT(bad.out, Contains("cores free (OMP_NUM_THREADS=four ignored))"));
}

TEST_CASE("trainer.threads = auto: the free cores, at least one, shared among local ranks") {
  using wick::choose_threads;
  CHECK(choose_threads({2, 1.02}, 1) == 1);  // a busy neighbour on the other core
  CHECK(choose_threads({2, 1.97}, 1) == 2);  // an idle machine: every core
  CHECK(choose_threads({2, 1.6}, 1) == 1);   // a core less than three quarters free
  CHECK(choose_threads({2, 1.8}, 1) == 2);
  CHECK(choose_threads({2, 0.05}, 1) == 1);   // never none
  CHECK(choose_threads({16, 15.9}, 2) == 8);  // two ranks split the cores
  CHECK(choose_threads({16, 4.1}, 2) == 2);   // and the free ones among them
  CHECK(choose_threads({16, 15.9}, 32) == 1);
  CHECK(choose_threads({3, 2.9}, 2) == 1);  // each rank's share of the cores is the most
}

TEST_CASE("a spinning thread's core is not counted free") {
  std::atomic<bool> stop{false};
  std::thread hog([&] {
    while (!stop.load(std::memory_order_relaxed)) {
    }
  });
  const auto s = wick::sample_free_cores(0.3);
  stop = true;
  hog.join();
  INFO("allowed " << s.allowed << ", free " << s.free);
  CHECK(s.allowed >= 1);
  CHECK(s.allowed <= static_cast<int>(std::thread::hardware_concurrency()));
  CHECK(s.free >= 0);
  // (A CPU quota below the cores in the affinity caps `allowed` while idle cores stay visible.)
  if (s.allowed == static_cast<int>(std::thread::hardware_concurrency()))
    CHECK(s.free <= s.allowed - 0.5);
}

TEST_CASE("a fit records the threads it took and why: auto, OMP_NUM_THREADS or trainer.threads") {
  TempDir dir;
  const auto cfg = tiny_config(dir);
  auto fit = [&](const std::vector<std::string>& env, const std::vector<std::string>& set) {
    std::vector<std::string> args = {"fit", cfg};
    for (const auto& s : set) args.insert(args.end(), {"--set", s});
    auto r = run_wick(args, env);
    INFO(r.err << r.out);
    REQUIRE(r.exit_code == 0);
    return read_json(dir / "run" / "summary.json");
  };
  const auto cores = static_cast<int>(std::thread::hardware_concurrency());
  auto a = fit({"OMP_NUM_THREADS="}, {});
  CHECK(a["threads"].get<int>() >= 1);
  CHECK(a["threads"].get<int>() <= cores);
  CHECK_THAT(a["threads_from"].get<std::string>(), Contains("auto: ") && Contains("cores free"));
  auto omp = fit({"OMP_NUM_THREADS=1"}, {"trainer.threads=\"auto\""});
  CHECK(omp["threads"] == 1);
  CHECK(omp["threads_from"] == "auto: OMP_NUM_THREADS");
  auto set = fit({}, {"trainer.threads=1"});
  CHECK(set["threads"] == 1);
  CHECK(set["threads_from"] == "trainer.threads");
  // A checkpoint records the count, and "auto" resumes on it (reductions split over threads
  // round differently with another count), unless OMP_NUM_THREADS names one.
  write_file(dir / "cfg.toml", read_file(cfg) + "[[hooks]]\nplugin = \"checkpoint\"\n");
  fit({"OMP_NUM_THREADS=1"}, {"trainer.max_steps=1"});
  int saved = 0;
  for (const auto& e : fs::directory_iterator(dir / "run" / "checkpoints"))
    if (e.path().filename().string().rfind("ckpt-", 0) == 0) {
      ++saved;
      CHECK(read_json(e.path() / "manifest.json")["run"]["threads"] == 1);
    }
  CHECK(saved >= 1);
  auto args = std::vector<std::string>{"fit", cfg, "--resume", "latest"};
  auto resumed = run_wick(args, {"OMP_NUM_THREADS="});
  INFO(resumed.err << resumed.out);
  REQUIRE(resumed.exit_code == 0);
  const auto after = read_json(dir / "run" / "summary.json");
  CHECK(after["threads"] == 1);
  CHECK_THAT(after["threads_from"].get<std::string>(),
             Contains("the checkpoint's count") || Contains("cores free"));
  auto bad = run_wick({"check", cfg, "--set", "trainer.threads=\"many\""});
  CHECK(bad.exit_code == 2);
  CHECK_THAT(bad.err, Contains("trainer.threads must be an integer or \"auto\""));
}
