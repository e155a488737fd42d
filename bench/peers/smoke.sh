#!/usr/bin/env bash
# Runs every peer on every workload it trains for a few steps (one thread, the CPU unless
# DEVICE=cuda) and prints their JSON lines; a peer that fails, or prints anything but one
# JSON line, fails the run. The numbers mean nothing: it checks that the peers work.
#
#   bench/peers/smoke.sh [EXTRA PEER ARGS...]     e.g. --precision bf16, --progress off
#
# Environment: PYTHON (default: the venv of scripts/install-peers.sh), STEPS (50), DEVICE.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-$here/../../.deps/peers-venv/bin/python}
[ -x "$python" ] || { echo "smoke: no $python; run scripts/install-peers.sh" >&2; exit 1; }
export OMP_NUM_THREADS=1

run() {
  local out
  out=$("$python" "$here/$1" --workload "$2" --epochs 1 --max-steps "${STEPS:-50}" --threads 1 \
          --device "${DEVICE:-cpu}" "${@:3}" 2>"$log") || {
    echo "smoke: $1 --workload $2 failed:" >&2
    tail -20 "$log" >&2
    exit 1
  }
  # Exactly one line, and it parses as JSON.
  [ "$(printf '%s\n' "$out" | wc -l)" = 1 ] &&
    printf '%s' "$out" | "$python" -c 'import json, sys; json.load(sys.stdin)' || {
    echo "smoke: $1 --workload $2 printed more than one JSON line:" >&2
    printf '%s\n' "$out" >&2
    exit 1
  }
  printf '%s\n' "$out"
}

log=$(mktemp)
trap 'rm -f "$log"' EXIT
for w in mlp cnn transformer gan; do
  run plain.py "$w" "$@"
  run lightning_peer.py "$w" "$@"
done
for w in mlp cnn transformer; do
  run hf_peer.py "$w" "$@"
done
run skorch_peer.py mlp "$@"

# The refusals: exit 3 and nothing on stdout.
for refused in "hf_peer.py gan" "skorch_peer.py cnn"; do
  set -- $refused
  rc=0
  out=$("$python" "$here/$1" --workload "$2" --max-steps 1 2>/dev/null) || rc=$?
  [ "$rc" = 3 ] && [ -z "$out" ] ||
    { echo "smoke: $1 --workload $2: rc $rc, expected 3 and no output" >&2; exit 1; }
done
