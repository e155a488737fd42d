#!/usr/bin/env bash
# The GPU run as one command, on a machine with an NVIDIA GPU whose python3 has a CUDA torch
# (the GPU machines lent to this project: torch 2.11.0+cu130, CMake, ninja, nvcc; nothing can
# be fetched there):
#
#   scripts/gpu-check.sh --prepare   here, with Debian's apt: downloads the Debian packages the
#                                    build needs and a GPU machine lacks into .gpu/debs/
#                                    (git-ignored; carry it to the GPU machine with the tree)
#   scripts/gpu-check.sh [OUT]       on the GPU machine: builds wick against python3's torch
#                                    in build-gpu/, runs every test (the CUDA ones included) and
#                                    the GPU bench, and writes OUT/ (default gpu-results/),
#                                    at most 8 files and no folder, as a lent GPU machine
#                                    hands back: gpucheck.log (this script's lines),
#                                    configure.log, build.log, ctest.log, counts.txt (the
#                                    counts, and each failing test with its first error
#                                    lines), bench.log, bench.json, bench.md; exit 1 when a
#                                    test or a bench row failed
#
# Without a GPU it builds, then stops (exit 0) saying what it would have run. WICK_GPU_PYTHON
# names another python3; WICK_GPU_JOBS the build's parallel jobs (default: every core);
# WICK_GPU_BUDGET_S the seconds the whole run may take (default 540: the bench stops adding
# rows 30 s before). For a
# second, shorter run after fixes: WICK_GPU_TARGETS builds only those targets (and what they
# need), WICK_GPU_TESTS runs only the tests whose names match that ctest -R regex, and
# WICK_GPU_BENCH adds arguments to bench/gpu_bench.py ("--gpt off", "--rounds 1"; "skip" skips
# the bench).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
gpu_dir=.gpu
build=build-gpu
python=${WICK_GPU_PYTHON:-python3}
jobs=${WICK_GPU_JOBS:-$(nproc)}
budget=${WICK_GPU_BUDGET_S:-540}  # seconds for the whole run; the bench takes what is left

# What the build needs beside LibTorch, as Debian bookworm packages (their libraries, headers,
# CMake files), and the Fashion-MNIST data the tests and the bench train on.
DEBS=(libboost1.74-dev libboost-filesystem1.74-dev libboost-filesystem1.74.0
      libtomlplusplus-dev libtomlplusplus3 catch2 libcli11-dev nlohmann-json3-dev
      nettle-dev libnettle8 libhogweed6 libgloo-dev zlib1g-dev zlib1g dataset-fashion-mnist)

if [ "${1:-}" = "--prepare" ]; then
  mkdir -p "$gpu_dir/debs"
  (cd "$gpu_dir/debs" && apt-get download "${DEBS[@]}")
  echo "gpu-check: $(ls "$gpu_dir/debs" | wc -l) packages in $gpu_dir/debs" \
       "($(du -sh "$gpu_dir/debs" | cut -f1)); carry $gpu_dir with the tree"
  exit 0
fi
out=$(mkdir -p "${1:-gpu-results}" && cd "${1:-gpu-results}" && pwd)
exec > >(tee "$out/gpucheck.log") 2>&1
start=$(date +%s)
say() { echo "gpu-check [$(($(date +%s) - start)) s]: $*"; }

# The torch to build against: python3's, with its CUDA.
read -r torch_version torch_cuda torch_prefix gpus < <("$python" -c '
import torch
print(torch.__version__, torch.version.cuda or "none", torch.utils.cmake_prefix_path,
      torch.cuda.device_count() if torch.cuda.is_available() else 0)')
say "torch $torch_version (CUDA $torch_cuda) from $("$python" -c 'import sys; print(sys.executable)');" \
    "$gpus GPU(s)"
if [ "$torch_cuda" = "none" ]; then
  echo "gpu-check: $python's torch is built without CUDA; use a CUDA torch" \
       "(WICK_GPU_PYTHON names another python)" >&2
  exit 1
fi

# The Debian packages, unpacked into a prefix once (dpkg-deb, or ar and tar without it).
cmake_extra=()
if [ -d "$gpu_dir/debs" ]; then
  prefix=$root/$gpu_dir/prefix
  if [ ! -f "$prefix/.complete" ]; then
    rm -rf "$prefix" && mkdir -p "$prefix"
    for deb in "$gpu_dir"/debs/*.deb; do
      if command -v dpkg-deb >/dev/null; then
        dpkg-deb -x "$deb" "$prefix"
      else
        tmp=$(mktemp -d) && (cd "$tmp" && ar x "$root/$deb" && tar -xf data.tar.* -C "$prefix")
        rm -rf "$tmp"
      fi
    done
    # A -dev package's absolute symlink (libz.so -> /lib/.../libz.so.1) points outside the
    # prefix, where this machine may have nothing: CMake then takes the static libz.a, which
    # cannot go into a shared library. Point each such link into the prefix, and drop the
    # static archives that have a shared twin: the build links the shared libraries.
    find "$prefix" -type l -lname '/*' | while read -r link; do
      target=$(readlink "$link")
      if [ -e "$prefix$target" ]; then ln -sfn "$prefix$target" "$link"; fi
    done
    for a in $(find "$prefix" -name 'lib*.a'); do
      if [ -e "${a%.a}.so" ]; then rm -f "$a"; fi   # Catch2 ships static only: keep it
    done
    touch "$prefix/.complete"
  fi
  arch=x86_64-linux-gnu
  export PKG_CONFIG_PATH=$prefix/usr/lib/$arch/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}
  export PKG_CONFIG_SYSROOT_DIR=$prefix
  export LD_LIBRARY_PATH=$prefix/usr/lib/$arch${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  # Headers found by path only (Gloo's, for c10d's Gloo process group).
  cmake_extra+=(-DCMAKE_PREFIX_PATH="$prefix/usr" -DCMAKE_CXX_FLAGS="-isystem $prefix/usr/include")
  # The tests and the bench read Fashion-MNIST from Debian's folder.
  data=/usr/share/datasets/fashion-mnist
  if [ ! -e "$data" ] && mkdir -p "$(dirname "$data")" 2>/dev/null; then
    ln -s "$prefix$data" "$data"
  fi
  [ -e "$data" ] || say "note: $data is missing (not root?): the Fashion-MNIST tests will fail"
fi

# Code for this machine's GPU (and PTX), not LibTorch's ten architectures.
arch_list=$("$python" -c '
import torch
caps = sorted({torch.cuda.get_device_capability(i) for i in range(torch.cuda.device_count())})
print(";".join(f"{a}.{b}" for a, b in caps) + "+PTX" if caps else "8.0;9.0+PTX")')
say "configuring $build (TORCH_CUDA_ARCH_LIST=$arch_list)"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DWICK_TORCH="$torch_prefix" \
  -DTORCH_CUDA_ARCH_LIST="$arch_list" -DWICK_TEST_PYTHON="$(command -v "$python")" \
  "${cmake_extra[@]}" >"$out/configure.log" 2>&1 ||
  { tail -30 "$out/configure.log"; exit 1; }
say "building with $jobs jobs${WICK_GPU_TARGETS:+ (targets: $WICK_GPU_TARGETS)}"
targets=()
for t in ${WICK_GPU_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$build" -j "$jobs" "${targets[@]}" >"$out/build.log" 2>&1 ||
  { tail -40 "$out/build.log"; exit 1; }
say "built: $(grep -c 'Building CUDA object' "$out/build.log" || true) CUDA object(s) by nvcc," \
    "$(ls "$build"/lib/wick/plugins | wc -l) plugins"

# What the GPU runs' crashes came from (bench/results-gpu.md): std::filesystem must bind to the
# shared libstdc++, listed first, not to the copies PyPI's LibTorch exports. So: each test
# program's libraries in order, its link line, the compiler's shared libstdc++ (the H100
# machine's GCC had none), and where wick's and test_cuda's std::filesystem symbols bind.
needed() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' '; }
say "test_loader's libraries, in order: $(needed "$build/bin/test_loader")"
say "test_cuda's libraries, in order: $(needed "$build/bin/test_cuda")"
say "test_loader's link: $(ninja -C "$build" -t commands bin/test_loader 2>/dev/null | tail -1 |
  cut -c1-700)"
cxx=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$build/CMakeCache.txt")
libstdcxx=$("$cxx" -print-file-name=libstdc++.so 2>/dev/null || true)
case $libstdcxx in
  /*) libstdcxx="$libstdcxx -> $(readlink -f "$libstdcxx")" ;;
  *) libstdcxx="not found by the compiler (a static libstdc++ only; wick links the system's)" ;;
esac
say "compiler $cxx ($("$cxx" --version | head -1)); its shared libstdc++: $libstdcxx"
for program in wick test_cuda; do
  [ -x "$build/bin/$program" ] || continue
  say "$program's std::filesystem bound to: $(LD_DEBUG=bindings LD_BIND_NOW=1 \
    "$build/bin/$program" --version 2>&1 | grep '`_ZNSt10filesystem' |
    sed -n 's/.* to \([^ ]*\) .*/\1/p' | sort | uniq -c | tr '\n' ' ')"
done

select=()
if [ -n "${WICK_GPU_TESTS:-}" ]; then select=(-R "$WICK_GPU_TESTS"); fi
tests=$(cd "$build" && ctest -N "${select[@]}" | sed -n 's/^Total Tests: //p')
if [ "$gpus" = "0" ]; then
  echo "gpu-check: no GPU here (torch.cuda.is_available() is false): wick is built against" \
       "torch $torch_version (CUDA $torch_cuda) in $build/. On a machine with an NVIDIA GPU" \
       "this would now run the $tests tests (the CUDA ones included) and the GPU bench" \
       "(bench/gpu_bench.py: the Fashion-MNIST MLP and CNN with wick, wick + cuda_graph, a plain" \
       "PyTorch loop and PyTorch Lightning; GPT-2 124M with wick, wick + cuda_graph, wick with" \
       "LibTorch's kernels (WICK_CUDA_DISABLE=all) and PyTorch eager and compiled), writing" \
       "$out/counts.txt and $out/bench.md."
  exit 0
fi

# Every test stopped by a time of day that leaves the bench 180 s of the budget (at least 60
# s from now): a test's own TIMEOUT (up to an hour) overrides --timeout, so only --stop-time
# bounds a test that hangs on the GPU. ctest reads it in local time, moved to the next day
# when it is past.
tests_end=$((start + budget - 180))
if [ "$tests_end" -lt "$(($(date +%s) + 60))" ]; then tests_end=$(($(date +%s) + 60)); fi
say "running the $tests tests (each stopped by $(date -d "@$tests_end" +%H:%M:%S))"
(cd "$build" && ctest -j "$(((3 * jobs + 3) / 4))" --timeout 300 \
  --stop-time "$(date -d "@$tests_end" +%H:%M:%S)" --output-on-failure "${select[@]}") \
  >"$out/ctest.log" 2>&1 || true
# The counts, then each test that did not pass with the first lines of its output (ctest
# prints a failing test's output after its result line).
"$python" - "$out/ctest.log" "$tests" >"$out/counts.txt" <<'PY'
import re, sys
lines = open(sys.argv[1], errors="replace").read().splitlines()
result = re.compile(r"^\s*\d+/\d+ Test\s+#\d+: (.*) \.+\s*(Passed|\*\*\*\S.*?|Not Run.*?)\s+[\d.]+ sec$")
passed = skipped = 0
failures = []
for i, line in enumerate(lines):
    m = result.match(line)
    if not m:
        continue
    status = m.group(2)
    if status == "Passed":
        passed += 1
    elif "Skipped" in status:
        skipped += 1
    else:
        first = []
        for nxt in lines[i + 1:]:
            if result.match(nxt) or re.match(r"^\s*Start\s+\d+:", nxt):
                break
            if re.search(r"FAILED|failed|error|Error|signal|SIG|wick test:|REQUIRE|CHECK|\+0x", nxt):
                first.append("    " + nxt.strip()[:300])
            if len(first) >= 8:
                break
        failures.append(f"{status}: {m.group(1)}\n" + "\n".join(first))
total = int(sys.argv[2] or 0)
print(f"tests {total}\npassed {passed}\nskipped {skipped}\nfailed {total - passed - skipped}")
print("\n".join(failures))
PY
failed=$(sed -n 's/^failed //p' "$out/counts.txt")
say "tests: $(sed -n 's/^passed //p' "$out/counts.txt") passed," \
    "$(sed -n 's/^skipped //p' "$out/counts.txt") skipped, $failed failed ($out/counts.txt)"

bench_ok=1
bench_s=$((budget - 30 - ($(date +%s) - start)))
if [ "${WICK_GPU_BENCH:-}" = "skip" ]; then
  say "the GPU bench skipped (WICK_GPU_BENCH=skip)"
elif [ "$bench_s" -lt 60 ]; then
  bench_ok=0
  say "the GPU bench skipped: $bench_s s of the budget left (WICK_GPU_BUDGET_S=$budget)"
else
  say "running the GPU bench ${WICK_GPU_BENCH:-}"
  # shellcheck disable=SC2086  # WICK_GPU_BENCH holds several arguments
  "$python" bench/gpu_bench.py --wick "$build/bin/wick" --python "$python" --out "$out" \
    --work "$root/$build/bench-runs" --budget-s "$bench_s" \
    ${WICK_GPU_BENCH:-} >"$out/bench.log" 2>&1 ||
    { bench_ok=0; say "the GPU bench had a failed row (bench.md, bench.log)"; }
fi
say "done: $out/counts.txt, $out/bench.md"
[ "$failed" = "0" ] && [ "$bench_ok" = "1" ]
