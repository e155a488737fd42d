#!/bin/sh
# Data-parallel scaling: train samples/s of 2 ranks x 1 thread against 1 rank x 1 thread, same
# per-rank batch, alternating runs, with the load average and the ddp plugin's per-step
# breakdown (compute / comm / wait). Not a test: timings depend on the machine and its load.
#   bench/ddp_scaling.sh bench/ddp_cnn.toml [ROUNDS] [--set k=v ...]   (or ddp_mlp.toml)
# CONFIG must enable [[hooks]] plugin = "ddp" (it does nothing in a single process).
set -eu
cfg=$1; shift
rounds=${1:-2}; [ $# -gt 0 ] && shift
wick=${WICK:-build/bin/wick}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
rate() { sed -n 's/.*"train_samples_per_s": *\([0-9.e+-]*\).*/\1/p' "$1/summary.json"; }
i=0
while [ $i -lt "$rounds" ]; do
  i=$((i + 1))
  load=$(cut -d' ' -f1 /proc/loadavg)
  "$wick" fit "$cfg" --set trainer.threads=1 --set "trainer.output_dir=\"$out/one\"" "$@" \
    >/dev/null 2>&1
  r1=$(rate "$out/one")
  "$wick" fit "$cfg" --nproc 2 --set trainer.threads=1 --set "trainer.output_dir=\"$out/two\"" \
    "$@" >"$out/two.log" 2>&1
  r2=$(rate "$out/two")
  ratio=$(awk -v a="$r1" -v b="$r2" 'BEGIN { printf "%.2f", b / a }')
  echo "round $i: load $load; 1 rank $r1 samples/s; 2 ranks $r2 samples/s; ratio $ratio"
  grep 'ddp:' "$out/two.log" | sed 's/^/  /'
done
