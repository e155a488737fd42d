#!/usr/bin/env bash
# Installs LibTorch 2.x for wick's second build: PyPI's torch wheel (pinned), which carries a
# complete LibTorch (headers, libraries, TorchConfig.cmake), unpacked into a project-local
# folder with pip --target. Idempotent: a complete install of the pinned version is left alone.
#
#   scripts/install-libtorch.sh            install into .deps/torch-$WICK_TORCH2_VERSION
#   scripts/install-libtorch.sh --print    print that folder (the CMake prefix) and exit
#
# The wheel is built for CUDA. Its CUDA libraries come from the CUDA toolkit found by the
# dynamic linker (cudart, cuBLAS, cuDNN, NCCL, ...); the three the toolkit does not ship
# (cuSPARSELt, NVSHMEM, cuFile) are installed beside torch from PyPI, where the wheel's RUNPATH
# looks for them. torch's own small Python dependencies go there too, so that the folder is
# also a Python torch (PYTHONPATH=<folder>): the tests run its torchrun against the 2.x build.
set -euo pipefail

WICK_TORCH2_VERSION=${WICK_TORCH2_VERSION:-2.11.0}
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${WICK_TORCH2_DIR:-$root/.deps/torch-$WICK_TORCH2_VERSION}

if [ "${1:-}" = "--print" ]; then
  echo "$dest/torch"
  exit 0
fi

# The libraries torch $WICK_TORCH2_VERSION's CUDA build needs and the toolkit lacks, pinned to
# the versions that torch's own wheel metadata requires.
EXTRA=(nvidia-cusparselt-cu13==0.8.0 nvidia-nvshmem-cu13==3.4.5 nvidia-cufile==1.15.1.6
       filelock==4.2.12 fsspec==2026.9.0 jinja2==3.1.6 markupsafe==3.0.4 mpmath==1.3.0
       networkx==3.6.1 sympy==1.14.0 typing-extensions==4.16.0)

# What a complete install holds; another list (a new pin) installs afresh.
want="torch==$WICK_TORCH2_VERSION ${EXTRA[*]}"
if [ -f "$dest/.complete" ] && [ "$(cat "$dest/.complete")" = "$want" ]; then
  echo "install-libtorch: LibTorch $WICK_TORCH2_VERSION present in $dest"
  exit 0
fi

pip=()
if python3 -m pip --version >/dev/null 2>&1; then
  pip=(python3 -m pip)
elif /usr/bin/python3 -m pip --version >/dev/null 2>&1; then
  pip=(/usr/bin/python3 -m pip)
else
  echo "install-libtorch: no pip for python3; install Debian's python3-pip" \
       "(scripts/install-deps.sh does)" >&2
  exit 1
fi

echo "install-libtorch: installing torch==$WICK_TORCH2_VERSION from PyPI into $dest"
start=$(date +%s)
rm -rf "$dest.partial"
mkdir -p "$dest.partial"
# --target with --no-deps: nothing outside the folder changes, and Debian's own Python (PEP 668)
# is not touched either. One pip call: a second would skip folders the first created.
PIP_BREAK_SYSTEM_PACKAGES=1 "${pip[@]}" install --quiet --disable-pip-version-check \
  --no-deps --no-compile --only-binary=:all: --target "$dest.partial" \
  "torch==$WICK_TORCH2_VERSION" "${EXTRA[@]}"

# Every library LibTorch needs must resolve now, not at the first test.
missing=$(ldd "$dest.partial/torch/lib/libtorch.so" "$dest.partial/torch/lib/libtorch_cuda.so" \
            2>/dev/null | awk '/not found/ {print $1}' | sort -u | tr '\n' ' ')
if [ -n "$missing" ]; then
  echo "install-libtorch: LibTorch's CUDA build needs libraries this machine lacks: $missing" >&2
  echo "install-libtorch: install the CUDA toolkit 13 (its lib folder known to ldconfig)," \
       "or the matching nvidia-* wheels from PyPI into $dest" >&2
  exit 1
fi

echo "$want" >"$dest.partial/.complete"
rm -rf "$dest"
mv "$dest.partial" "$dest"
echo "install-libtorch: LibTorch $WICK_TORCH2_VERSION installed in $(($(date +%s) - start)) s;" \
     "CMake prefix: $dest/torch"
