#!/usr/bin/env bash
# Installs the Python peers of `make bench` (bench/peers/): a project-local virtual
# environment with PyTorch 2.11.0, Lightning, Hugging Face transformers + accelerate, skorch
# and numpy, every package pinned in scripts/peers-requirements.txt, from PyPI only.
# Idempotent: a complete venv of the same pinned set is left alone.
#
#   scripts/install-peers.sh            install into .deps/peers-venv
#   scripts/install-peers.sh --print    print the venv's python and exit
#
# PyPI's torch wheel is the CUDA build and declares ~3 GB of nvidia-* wheels. They are not
# installed: every package goes in with --no-deps from the complete pinned list, so pip never
# resolves torch's dependencies. torch finds cudart, cuBLAS, cuDNN, NCCL, ... in the system's
# CUDA 13 toolkit through the dynamic linker; the three libraries the toolkit lacks
# (cuSPARSELt, NVSHMEM, cuFile) are in the list, as in scripts/install-libtorch.sh.
#
# Environment: WICK_PEERS_VENV (the venv's folder), PYTHON (the interpreter to base it on,
# python3 by default; 3.11 or newer).
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
venv=${WICK_PEERS_VENV:-$root/.deps/peers-venv}
requirements=$root/scripts/peers-requirements.txt
python=${PYTHON:-python3}

if [ "${1:-}" = "--print" ]; then
  echo "$venv/bin/python"
  exit 0
fi

# Every failure names the step it happened in.
step="starting"
trap 'echo "install-peers: FAILED while $step (venv: $venv)" >&2' ERR

fail() {
  echo "install-peers: $*" >&2
  exit 1
}

step="checking $python"
command -v "$python" >/dev/null 2>&1 ||
  fail "no '$python' on PATH; install Python 3.11+ or set PYTHON"
"$python" -c 'import sys; sys.exit(sys.version_info < (3, 11))' ||
  fail "$python is $("$python" -V 2>&1); the peers' pins need Python 3.11 or newer (set PYTHON)"
[ -f "$requirements" ] || fail "missing $requirements"

# The marker holds the interpreter's version and the pinned set: another Python or another
# pin means a fresh venv.
pins=$(grep -E '^[A-Za-z0-9]' "$requirements")
want=$( { "$python" -V 2>&1; echo "$pins"; } )
if [ -f "$venv/.complete" ] && [ "$(cat "$venv/.complete")" = "$want" ]; then
  echo "install-peers: the pinned peers are present in $venv"
  exit 0
fi

echo "install-peers: installing the Python peers ($(echo "$pins" | wc -l) pinned packages)" \
     "into $venv"
start=$(date +%s)

step="creating the venv with $python -m venv"
# Only a venv (or nothing) is replaced: WICK_PEERS_VENV pointing at another folder is an error.
if [ -e "$venv" ] && [ ! -f "$venv/pyvenv.cfg" ]; then
  fail "$venv exists and is not a venv; remove it or set WICK_PEERS_VENV to another folder"
fi
rm -rf "$venv"
mkdir -p "$(dirname "$venv")"
"$python" -m venv "$venv" ||
  fail "$python -m venv failed; on Debian install python3-venv (apt-get install python3-venv)"
py=$venv/bin/python

# One pip call, every package pinned, --no-deps: see the header. Wheels only, so nothing is
# compiled on the machine.
step="pip install -r scripts/peers-requirements.txt (PyPI)"
"$py" -m pip install --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
  -r "$requirements"

# The list must be complete for everything but torch's CUDA wheels (which the toolkit
# replaces): pip check names any other missing or mismatched requirement.
step="pip check (every requirement but torch's CUDA wheels met)"
cuda_wheels='(triton|cuda-bindings|cuda-toolkit|nvidia-[a-z0-9-]+)'
problems=$("$py" -m pip check 2>&1 |
           grep -vE "^torch [0-9.]+ requires $cuda_wheels, which is not installed\.\$" |
           grep -v '^No broken requirements found\.$' || true)
if [ -n "$problems" ]; then
  echo "$problems" >&2
  fail "scripts/peers-requirements.txt misses or mismatches the requirements above;" \
       "resolve it again"
fi

step="checking that no other nvidia-* wheel came in"
nvidia=$("$py" -m pip list --disable-pip-version-check 2>/dev/null |
         awk 'tolower($1) ~ /^nvidia/ {print tolower($1)}' | sort | tr '\n' ' ')
[ "$nvidia" = "nvidia-cufile nvidia-cusparselt-cu13 nvidia-nvshmem-cu13 " ] ||
  fail "unexpected nvidia-* wheels in the venv: $nvidia"

# torch's CUDA libraries must resolve now, not at the first benchmark.
step="checking torch's CUDA libraries (ldd)"
torch_lib=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/torch/lib
missing=$(ldd "$torch_lib/libtorch_cuda.so" 2>/dev/null | awk '/not found/ {print $1}' |
          sort -u | tr '\n' ' ')
if [ -n "$missing" ]; then
  fail "torch's CUDA build needs libraries this machine lacks: $missing;" \
       "install the CUDA 13 toolkit (its lib folder known to ldconfig)"
fi

step="importing torch, lightning, transformers, accelerate, skorch, numpy in the venv"
"$py" -c 'import torch, lightning, transformers, accelerate, skorch, numpy
print("install-peers: torch", torch.__version__, "lightning", lightning.__version__,
      "transformers", transformers.__version__, "accelerate", accelerate.__version__,
      "skorch", skorch.__version__, "numpy", numpy.__version__)'

echo "$want" >"$venv/.complete"
echo "install-peers: installed in $(($(date +%s) - start)) s; python: $py"
