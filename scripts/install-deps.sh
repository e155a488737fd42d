#!/usr/bin/env bash
# Installs what wick needs to build, test and run: Debian's packages (only the missing ones,
# through apt-get as root or with sudo), then LibTorch 2.x for the second build
# (scripts/install-libtorch.sh: PyPI's pinned torch wheel in .deps/). Idempotent.
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build pkg-config
  libtorch-dev libgloo-dev
  libboost-dev libboost-filesystem-dev
  libtomlplusplus-dev catch2 libcli11-dev nlohmann-json3-dev libfmt-dev
  libopenblas0-openmp
  dataset-fashion-mnist
  zlib1g-dev gnuplot-nox
  nettle-dev
  clang libclang-rt-14-dev llvm  # make fuzz: clang, libFuzzer and the sanitizer runtimes,
                                 # llvm-symbolizer for readable reports
  python3-sklearn                # reference values for the metric plugins' tests
  python3-torch                  # tests: TorchScript models and data made as users make them,
                                 # torchrun
  iproute2                       # tests: two nodes in network namespaces (ip netns)
  python3-pip python3-venv       # LibTorch 2.x from PyPI's wheel; make bench's Python peers
  binutils                       # tests: objcopy (a plugin without its build record)
  locales                        # tests: a host program's decimal-comma locale (de_DE.UTF-8)
)

# The locale the tests run a host program under, made from the locales package's sources.
ensure_locale() {
  if locale -a 2>/dev/null | grep -qix 'de_DE.utf8'; then return; fi
  echo "install-deps: making the de_DE.UTF-8 locale"
  $SUDO localedef -i de_DE -f UTF-8 de_DE.UTF-8 ||
    echo "install-deps: could not make it; the test that needs it reports itself skipped" >&2
}

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

here=$(dirname "$0")
SUDO=""
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then SUDO="sudo"; fi
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  ensure_locale
  exec "$here/install-libtorch.sh"
fi

if [ "$(id -u)" -ne 0 ] && [ -z "$SUDO" ]; then
  echo "install-deps: missing packages: ${missing[*]}" >&2
  echo "install-deps: run this script as root, or install sudo" >&2
  exit 1
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
ensure_locale
exec "$here/install-libtorch.sh"
