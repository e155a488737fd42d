#!/usr/bin/env bash
# Which LibTorch `make run` builds against first (README: Choosing a LibTorch): the shipped
# Fashion-MNIST configs trained by two wick builds in one run, one thread, rounds in
# alternating order; train samples/s (summary.json) and each round's ratio B / A.
#
#   bench/libtorch_builds.sh BUILD_A BUILD_B [ROUNDS]      e.g. build-debian build
#
# mlp.toml: one epoch (938 steps); cnn.toml: 300 steps. Each run goes to a temporary folder.
set -euo pipefail
a=${1:?usage: bench/libtorch_builds.sh BUILD_A BUILD_B [ROUNDS]}
b=${2:?usage: bench/libtorch_builds.sh BUILD_A BUILD_B [ROUNDS]}
rounds=${3:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# samples/s and validation accuracy of one fit: "RATE ACCURACY"
fit() {
  local build=$1 cfg=$2 out=$3
  shift 3
  OMP_NUM_THREADS=1 "$build/bin/wick" fit "$root/samples/fashion_mnist/$cfg.toml" \
    --set trainer.threads=1 --set "trainer.output_dir=\"$out\"" "$@" >/dev/null 2>"$out.err" ||
    { cat "$out.err" >&2; exit 1; }
  python3 -c 'import json, sys; s = json.load(open(sys.argv[1]))
print(round(s["train_samples_per_s"]), s.get("valid/accuracy", 0))' "$out/summary.json"
}

echo "| config | round | $a samples/s | $b samples/s | $b / $a | accuracy $a | accuracy $b |"
echo "| --- | --- | --- | --- | --- | --- | --- |"
for cfg in mlp cnn; do
  if [ "$cfg" = mlp ]; then args=(--set trainer.epochs=1); else
    args=(--set trainer.epochs=1 --set trainer.max_steps=300); fi
  for r in $(seq 1 "$rounds"); do
    # Alternate which build goes first: the machine's state drifts over a run.
    if [ $((r % 2)) = 1 ]; then
      ra=$(fit "$a" "$cfg" "$work/a$cfg$r" "${args[@]}"); rb=$(fit "$b" "$cfg" "$work/b$cfg$r" "${args[@]}")
    else
      rb=$(fit "$b" "$cfg" "$work/b$cfg$r" "${args[@]}"); ra=$(fit "$a" "$cfg" "$work/a$cfg$r" "${args[@]}")
    fi
    read -r sa acca <<<"$ra"
    read -r sb accb <<<"$rb"
    echo "| $cfg.toml | $r | $sa | $sb | $(python3 -c "print(f'{$sb / $sa:.2f}')") | $acca | $accb |"
  done
done
