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
#                                    the GPU bench, and writes OUT/ (default gpu-results/):
#                                    ctest.log, counts.txt, bench.json, bench.md; exit 1
#                                    when a test failed
#
# Without a GPU it builds, then stops (exit 0) saying what it would have run. WICK_GPU_PYTHON
# names another python3; WICK_GPU_JOBS the build's parallel jobs (default: every core).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
gpu_dir=.gpu
build=build-gpu
python=${WICK_GPU_PYTHON:-python3}
jobs=${WICK_GPU_JOBS:-$(nproc)}

# What the build needs beside LibTorch, as Debian bookworm packages (their libraries, headers,
# CMake files), and the Fashion-MNIST data the tests and the bench train on.
DEBS=(libboost1.74-dev libboost-filesystem1.74-dev libboost-filesystem1.74.0
      libtomlplusplus-dev libtomlplusplus3 catch2 libcli11-dev nlohmann-json3-dev
      nettle-dev libnettle8 libhogweed6 libgloo-dev zlib1g-dev dataset-fashion-mnist)

if [ "${1:-}" = "--prepare" ]; then
  mkdir -p "$gpu_dir/debs"
  (cd "$gpu_dir/debs" && apt-get download "${DEBS[@]}")
  echo "gpu-check: $(ls "$gpu_dir/debs" | wc -l) packages in $gpu_dir/debs" \
       "($(du -sh "$gpu_dir/debs" | cut -f1)); carry $gpu_dir with the tree"
  exit 0
fi
out=$(mkdir -p "${1:-gpu-results}" && cd "${1:-gpu-results}" && pwd)
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
say "building with $jobs jobs"
cmake --build "$build" -j "$jobs" >"$out/build.log" 2>&1 || { tail -40 "$out/build.log"; exit 1; }
say "built: $(grep -c 'Building CUDA object' "$out/build.log" || true) CUDA object(s) by nvcc," \
    "$(ls "$build"/lib/wick/plugins | wc -l) plugins"

tests=$(cd "$build" && ctest -N | sed -n 's/^Total Tests: //p')
if [ "$gpus" = "0" ]; then
  echo "gpu-check: no GPU here (torch.cuda.is_available() is false): wick is built against" \
       "torch $torch_version (CUDA $torch_cuda) in $build/. On a machine with an NVIDIA GPU" \
       "this would now run the $tests tests (the CUDA ones included) and the GPU bench" \
       "(bench/gpu_bench.py: the Fashion-MNIST MLP and CNN with wick, wick + cuda_graph, a plain" \
       "PyTorch loop and PyTorch Lightning), writing $out/counts.txt and $out/bench.md."
  exit 0
fi

say "running the $tests tests"
(cd "$build" && ctest -j "$(((jobs + 1) / 2))" --timeout 300 --output-on-failure) \
  >"$out/ctest.log" 2>&1 || true
passed=$(grep -c ' Passed ' "$out/ctest.log" || true)
skipped=$(grep -c '\*\*\*Skipped' "$out/ctest.log" || true)
failed=$((tests - passed - skipped))
{
  echo "tests $tests"
  echo "passed $passed"
  echo "skipped $skipped"
  echo "failed $failed"
  grep -E '\*\*\*(Failed|Exception|Timeout)|\(Failed\)' "$out/ctest.log" || true
} >"$out/counts.txt"
say "tests: $passed passed, $skipped skipped, $failed failed ($out/counts.txt)"

say "running the GPU bench"
"$python" bench/gpu_bench.py --wick "$build/bin/wick" --python "$python" --out "$out" \
  --budget-s $((9 * 60 - 30 - ($(date +%s) - start))) || say "the GPU bench failed"
say "done: $out/counts.txt, $out/bench.md"
[ "$failed" = "0" ]
