"""The GPU bench of scripts/gpu-check.sh: the Fashion-MNIST MLP and CNN of
samples/fashion_mnist/{mlp,cnn}.toml (batch 64, Adam lr 1e-3) on one GPU, trained by

  wick fp32        the shipped config, mixed_precision off
  wick bf16        mixed_precision dtype = "bf16"
  wick cuda_graph  fp32, the step captured once and replayed (cuda_graph; drop_last = true)
  python loop      a plain PyTorch loop (bench/peers/plain.py), fp32
  lightning        PyTorch Lightning (bench/peers/lightning_peer.py), fp32, no progress bar

on the same data and batch, in rounds of alternating order. samples/s per row (median, min,
max over the rounds) and each row's ratio to the plain loop of the same round.

    python3 bench/gpu_bench.py --wick build-gpu/bin/wick --out gpu-results

Writes OUT/bench.json and OUT/bench.md, nothing else there (the runs' folders go to --work).
A row that fails is marked failed with its error's last lines, and the others go on. Stops
adding rounds when the next would not fit in --budget-s (after the first round, which always
runs).
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.path.join(ROOT, "bench", "peers")


def wick_row(args, model, variant, out):
    """Trains one wick variant; returns samples/s (summary.json's train_samples_per_s)."""
    shipped = os.path.join(ROOT, "samples", "fashion_mnist", f"{model}.toml")
    text = open(shipped).read()
    sets = ["trainer.device=\"cuda\"", f"trainer.epochs={args.epochs}",
            f"trainer.output_dir=\"{out}\""]
    has_amp = 'plugin = "mixed_precision"' in text
    if variant == "bf16":
        if not has_amp:
            text += '\n[[hooks]]\nplugin = "mixed_precision"\n'
        sets.append("hooks.mixed_precision.dtype=\"bf16\"")
    elif has_amp:
        sets.append("hooks.mixed_precision.enabled=false")
    if variant == "cuda_graph":
        text += '\n[[hooks]]\nplugin = "cuda_graph"\n'
        sets.append("trainer.drop_last=true")
    cfg = out + ".toml"
    with open(cfg, "w") as f:
        f.write(text)
    cmd = [args.wick, "fit", cfg]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"wick {model} {variant}: exit {r.returncode}\n{r.stderr[-2000:]}")
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    return s["train_samples_per_s"], s.get("valid/accuracy")


def peer_row(args, model, script, extra):
    cmd = [args.python, os.path.join(PEERS, script), "--workload", model, "--epochs",
           str(args.epochs), "--batch-size", "64", "--device", "cuda", "--precision", "fp32",
           "--threads", str(args.threads)] + extra
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{script} {model}: exit {r.returncode}\n{r.stderr[-2000:]}")
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return j["samples_per_s"], j.get("valid_accuracy")


ROWS = [("wick fp32", "wick", "fp32"), ("wick bf16", "wick", "bf16"),
        ("wick cuda_graph", "wick", "cuda_graph"), ("python loop", "plain.py", []),
        ("lightning", "lightning_peer.py", ["--progress", "off"])]


def gpu_name(python):
    r = subprocess.run([python, "-c", "import torch; print(torch.cuda.get_device_name(0), "
                        "torch.__version__, sep='|')"], capture_output=True, text=True)
    return r.stdout.strip().split("|") if r.returncode == 0 else ["?", "?"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wick", required=True)
    ap.add_argument("--python", default=sys.executable)
    ap.add_argument("--out", required=True)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=4)
    ap.add_argument("--budget-s", type=float, default=400)
    ap.add_argument("--work", help="folder for the runs (default: a temporary one)")
    args = ap.parse_args()
    work = args.work or tempfile.mkdtemp(prefix="wick-gpu-bench-")
    os.makedirs(work, exist_ok=True)
    t_start = time.time()
    rates = {(m, name): [] for m in ("mlp", "cnn") for name, _, _ in ROWS}
    ratios = {k: [] for k in rates}
    accuracy = {}
    failed = {}  # (model, row) -> the error's last lines
    rounds = 0
    for rnd in range(args.rounds):
        t_round = time.time()
        for model in ("mlp", "cnn"):
            order = ROWS if rnd % 2 == 0 else list(reversed(ROWS))
            got = {}
            for name, kind, extra in order:
                try:
                    if kind == "wick":
                        out = os.path.join(work, f"{model}-{extra}-{rnd}")
                        got[name] = wick_row(args, model, extra, out)
                    else:
                        got[name] = peer_row(args, model, kind, extra)
                except (RuntimeError, OSError, ValueError, KeyError, IndexError) as e:
                    failed[(model, name)] = " ".join(str(e).split()[-40:])
                    print(f"gpu_bench: {model} {name} failed: {e}", file=sys.stderr)
            base = got.get("python loop", (None, None))[0]
            for name, (rate, acc) in got.items():
                rates[(model, name)].append(rate)
                if base:
                    ratios[(model, name)].append(rate / base)
                accuracy[(model, name)] = acc
        rounds += 1
        spent, last = time.time() - t_start, time.time() - t_round
        if spent + last > args.budget_s:
            break
    gpu, torch_version = gpu_name(args.python)

    def stats(v):
        if not v:
            return None
        return {"median": statistics.median(v), "min": min(v), "max": max(v)}

    result = {"gpu": gpu, "torch": torch_version, "epochs": args.epochs, "rounds": rounds,
              "batch_size": 64, "rows": []}
    lines = [f"GPU bench: {gpu}, torch {torch_version}, batch 64, {args.epochs} epoch(s), "
             f"{rounds} round(s), alternating order.", "",
             "| model | row | samples/s (median) | min | max | x python loop (min-max) | "
             "valid accuracy |", "| --- | --- | --- | --- | --- | --- | --- |"]
    for model in ("mlp", "cnn"):
        for name, _, _ in ROWS:
            r, q = stats(rates[(model, name)]), stats(ratios[(model, name)])
            acc = accuracy.get((model, name))
            error = failed.get((model, name))
            result["rows"].append({"model": model, "row": name, "samples_per_s": r,
                                   "ratio_to_python_loop": q, "valid_accuracy": acc,
                                   "failed": error})
            if r is None:
                lines.append(f"| {model} | {name} | failed: {error} | | | | |")
                continue
            ratio = "" if q is None else f"{q['median']:.2f} ({q['min']:.2f}-{q['max']:.2f})"
            note = "" if error is None else " (failed in a round)"
            lines.append(f"| {model} | {name}{note} | {r['median']:,.0f} | {r['min']:,.0f} | "
                         f"{r['max']:,.0f} | {ratio} | {'' if acc is None else f'{acc:.4f}'} |")
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "bench.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
