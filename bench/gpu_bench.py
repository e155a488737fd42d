"""The GPU bench of scripts/gpu-check.sh: the Fashion-MNIST MLP and CNN of
samples/fashion_mnist/{mlp,cnn}.toml (batch 64, Adam lr 1e-3) on one GPU, trained by

  wick fp32        the shipped config, mixed_precision off, and channels_last off where the
                   config has it (the CNN), as cnn.toml says for a GPU in fp32 (run 4: cuDNN's
                   default layout is faster for these small convolutions); the other fp32 rows
                   likewise
  wick bf16        mixed_precision dtype = "bf16" (channels_last as shipped)
  wick cuda_graph  fp32, the step captured once and replayed (cuda_graph; drop_last = true)
  wick on device   fp32, trainer.data_on_device = true: the training set copied to the GPU once,
                   each batch gathered there (no host gather, pinning and copy per step)
  wick cuda_graph  both: the replayed step with the batches gathered on the GPU
    on device
  libtorch loop    bench/hand_loop.cpp --device cuda (wick_hand_loop beside --wick): the same
                   model, data and Adam in a hand-written LibTorch loop, the training set on the
                   GPU, nothing read back in the epoch; LibTorch's own floor on this machine.
                   Its host milliseconds per step (forward + loss, backward, optimizer) go to
                   the log, and what one call costs the host (an op, a small backward pass by
                   LibTorch's autograd thread and on the calling thread, as wick runs it)
  python loop      a plain PyTorch loop (bench/peers/plain.py), fp32
  lightning        PyTorch Lightning (bench/peers/lightning_peer.py), fp32, no progress bar

on the same data and batch, in rounds of alternating order. samples/s per row (median, min,
max over the rounds) and each row's ratio to the plain loop of the same round. Every row is
timed past its set-up: the peers and the hand loop from the end of their first step to the
end of their last; wick's rows from their first step record after step 1 (metrics.jsonl,
log_every = 100 as shipped: steps 101 to 900 of the 938) to their last, so the CUDA context's
lazy set-up, cuBLAS's and cuDNN's first calls and cuda_graph's warm-up and capture stay
outside, as the peers' first step does. wick's rate over the whole epoch (summary.json's
train_samples_per_s, the set-up included) is reported beside it ("whole epoch").

    python3 bench/gpu_bench.py --wick build-gpu/bin/wick --out gpu-results

Writes OUT/bench.json and OUT/bench.md, nothing else there (the runs' folders go to --work),
after each round and after the GPT rows, so that a run cut short leaves what it measured.
A row that fails is marked failed with its error's last lines, and the others go on; a wick
MLP/CNN row that fails is run again with WICK_CUDA_DISABLE=all (LibTorch's operators in place
of wick's own CUDA kernels), its number marked so, and its later rounds run that way. Every
row gets at most what is left of --budget-s (killed past it and marked failed, not run
again), and is skipped with under 20 s left. Stops adding rounds when the next would not fit.

GPT-2 124M (nanoGPT's shape: 12 layers, 12 heads, width 768, context 1024, vocab 50304, tied
embeddings; 123,689,472 parameters without wpe), batch 16 x 1024 tokens, bf16, trained by

  wick             wick fit samples/gpt/gpt2-124m.toml (its recipe as shipped)
  wick cuda_graph  the same with [[hooks]] plugin = "cuda_graph" (and drop_last = true)
  wick, LibTorch's the same as "wick" with WICK_CUDA_DISABLE=all: LibTorch's operators in place
    kernels        of wick's own CUDA kernels (README: CUDA paths), so that the pair says what
                   those kernels win, and a fault of one of them still leaves a wick number
  pytorch          bench/peers/gpt2.py, eager: nanoGPT's recipe (bf16 autocast, fused AdamW,
                   grad clip 1.0)
  pytorch compile  bench/peers/gpt2.py --compile: torch.compile(model)

on one file of random tokens written once into --work (seeded, uniform over the vocabulary,
2^22 tokens, nanoGPT's uint16 .bin layout), each for --gpt-warmup untimed then --gpt-steps
timed optimizer steps (default 10 + 30). Per row: tokens/s over the timed steps, MFU
(tokens/s x flops_per_token / the GPU's dense bf16 peak, 989e12 on an H100 / H200 SXM;
flops_per_token = 6 N + 12 L H Q T, nanoGPT's estimate_mfu) and the ratio to "pytorch
compile". gpt2.py times its own window (synchronised at both ends). wick's window comes from
the run's metrics.jsonl: with trainer.steps_per_epoch = W + N, epochs = 1 and log_every =
gcd(W, N), a step record ("step": optimizer steps done, "samples_seen", "time_s": seconds since
the fit started, written after that step once its loss is read back, so the GPU has finished
it) lands at step W and at W + N; tokens/s = (samples_seen(last) - samples_seen(first)) x
context / (time_s(last) - time_s(first)), first = the first step record at or after step W
(the end of the warm-up: the FLOP count, the peak probe and the graph capture all fall
before it), last = the last step record. Reading the logged losses back is a device sync
every gcd(W, N) steps that gpt2.py does not do: the GPU then waits for the next step's first
launches, well under 1% of ten ~50-100 ms steps.
The command line also sets trainer.batch_size = 16 (--gpt-batch) and save_model = false; the
config is assumed to hold the same shape (a context / block_size key other than 1024 fails
the row) and no gradient accumulation (the records' "step" counts optimizer steps, log_every
batches).

The GPT rows run once, in round 1, after its MLP and CNN rows: one window of 30 steps of
16k tokens is long and GPU-bound enough to be steady, while a second round would cost the
process start-ups and torch.compile's compilation again (tens of seconds, on a machine
whose Triton cache starts empty) for little. Compilation is outside the timed window
(it happens in the first warm-up step) but inside the budget: each GPT row gets at most what
is left of --budget-s (the command is killed past it, the row marked failed, the others go
on), a row with under 20 s left is skipped, and "pytorch compile", the baseline of the
targets, runs last, so that a slow compile costs only its own row. Before it, "wick,
LibTorch's kernels" and the profiles below run only while they leave the compile row 90 s
(--compile-reserve-s; each taken to last as long as the wick row did), the LibTorch-kernel row
always when the wick row failed (it is then wick's number). The extra MLP/CNN rounds then go
on while they fit.

Before the compile row (--gpt-profile on), where the time goes, into the log (stderr): wick's
GPT run with the profiler (phases timed with CUDA events, and `kernels`: the GPU kernels of
5 steps with the GPU's busy share of their wall time), gpt2.py --profile-kernels (the same
table from torch.profiler), and wick's profiler on the Fashion-MNIST MLP (50 steps), eager and
replayed by cuda_graph, its phases on the host's clock (where its host time goes).
"""
import argparse
import array
import json
import math
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

try:
    import tomllib  # 3.11+: only for a check of the GPT config's context
except ImportError:
    tomllib = None

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PEERS = os.path.join(ROOT, "bench", "peers")


def wick_command(args, text, sets, variant, out):
    """Writes the config `text` (with cuda_graph for that variant) beside `out`; returns the
    wick fit command with its --set values."""
    if variant.startswith("cuda_graph"):
        text += '\n[[hooks]]\nplugin = "cuda_graph"\n'
        sets = sets + ["trainer.drop_last=true"]
    cfg = out + ".toml"
    with open(cfg, "w") as f:
        f.write(text)
    cmd = [args.wick, "fit", cfg]
    for s in sets:
        cmd += ["--set", s]
    return cmd


def stderr_summary(err):
    """A failed command's stderr for a report: its own error lines first (wick's, Python's
    exception), then the tail; LibTorch's errors carry long C++ stacks that would push the
    message itself out of a plain tail."""
    lines = err.splitlines()
    named = [l for l in lines if l.startswith(("wick", "Traceback")) or
             re.match(r"^\w+(Error|Exception)\b", l)]
    return "\n".join(named[:6] + ["..."] + lines[-12:])[-3000:]


def has_hook(text, plugin):
    """Whether a config has a [[hooks]] entry of `plugin` (its line, not a comment that names
    the plugin: mlp.toml names mixed_precision in one)."""
    return re.search(r'^\s*plugin\s*=\s*"' + plugin + '"', text, re.M) is not None


# wick's own CUDA kernels left unused, LibTorch's operators in their place (README: CUDA paths),
# or every one of them used, whatever this environment says.
LIBTORCH_KERNELS = {"WICK_CUDA_DISABLE": "all"}
OWN_KERNELS = {"WICK_CUDA_DISABLE": ""}


def environment(extra):
    """This process's environment with `extra` set."""
    return {**os.environ, **extra}


def wick_row(args, model, variant, out, timeout, env=OWN_KERNELS):
    """Trains one wick variant (killed past `timeout` s); returns (samples/s, valid accuracy,
    samples/s over the whole epoch). The first is timed as the peers time themselves, past
    the first step: from the first step record after it (metrics.jsonl, log_every = 100 as
    shipped: step 100) to the last, so the CUDA context's lazy set-up, cuBLAS's and cuDNN's
    first calls and cuda_graph's warm-up and capture stay outside it. The last is
    summary.json's train_samples_per_s, which counts them."""
    shipped = os.path.join(ROOT, "samples", "fashion_mnist", f"{model}.toml")
    text = open(shipped).read()
    sets = ["trainer.device=\"cuda\"", f"trainer.epochs={args.epochs}",
            f"trainer.output_dir=\"{out}\""]
    has_amp = has_hook(text, "mixed_precision")
    if variant == "bf16":
        if not has_amp:
            text += '\n[[hooks]]\nplugin = "mixed_precision"\n'
        sets.append("hooks.mixed_precision.dtype=\"bf16\"")
    else:
        if has_amp:
            sets.append("hooks.mixed_precision.enabled=false")
        if has_hook(text, "channels_last"):  # cnn.toml: "On a GPU in fp32, leave it out"
            sets.append("hooks.channels_last.enabled=false")
    if variant.endswith("on_device"):
        sets.append("trainer.data_on_device=true")
    shutil.rmtree(out, ignore_errors=True)  # a retry's summary is its own
    r = run_limited(wick_command(args, text, sets, variant, out), timeout, env)
    if r.returncode != 0:
        raise RuntimeError(f"wick {model} {variant}: exit {r.returncode}\n{stderr_summary(r.stderr)}")
    with open(os.path.join(out, "summary.json")) as f:
        s = json.load(f)
    rate, _, _ = wick_window(os.path.join(out, "metrics.jsonl"), 2)
    return rate, s.get("valid/accuracy"), s["train_samples_per_s"]


def peer_row(args, model, script, extra, timeout):
    cmd = [args.python, os.path.join(PEERS, script), "--workload", model, "--epochs",
           str(args.epochs), "--batch-size", "64", "--device", "cuda", "--precision", "fp32",
           "--threads", str(args.threads)] + extra
    r = run_limited(cmd, timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{script} {model}: exit {r.returncode}\n{stderr_summary(r.stderr)}")
    j = json.loads(r.stdout.strip().splitlines()[-1])
    return j["samples_per_s"], j.get("valid_accuracy")


def hand_row(args, model, timeout):
    """The hand-written LibTorch loop on the GPU; its host times per phase go to the log."""
    cmd = [os.path.join(os.path.dirname(args.wick), "wick_hand_loop"), "--workload", model,
           "--epochs", str(args.epochs), "--batch-size", "64", "--threads", str(args.threads),
           "--device", "cuda"]
    r = run_limited(cmd, timeout)
    if r.returncode != 0:
        raise RuntimeError(f"wick_hand_loop {model}: exit {r.returncode}\n"
                           f"{stderr_summary(r.stderr)}")
    j = json.loads(r.stdout.strip().splitlines()[-1])
    host = ", ".join(f"{k} {v:.3f}" for k, v in j.get("host_ms", {}).items())
    print(f"gpu_bench: {model} libtorch loop: host ms per step: {host}", file=sys.stderr)
    if "per_call_us" in j:
        calls = ", ".join(f"{k} {v:.1f}" for k, v in j["per_call_us"].items())
        print(f"gpu_bench: {model} libtorch loop: host us per call: {calls}", file=sys.stderr)
    return j["samples_per_s"], j.get("valid_accuracy")


MIN_ROW_S = 20  # a row (or profile) is skipped with less of the budget left
ROWS = [("wick fp32", "wick", "fp32"), ("wick bf16", "wick", "bf16"),
        ("wick cuda_graph", "wick", "cuda_graph"), ("wick on device", "wick", "on_device"),
        ("wick cuda_graph on device", "wick", "cuda_graph_on_device"),
        ("libtorch loop", "hand", None), ("python loop", "plain.py", []),
        ("lightning", "lightning_peer.py", ["--progress", "off"])]


# ---- GPT-2 124M -----------------------------------------------------------------------------

GPT = {"layers": 12, "heads": 12, "width": 768, "context": 1024, "vocab": 50304}
GPT_CONFIG = os.path.join(ROOT, "samples", "gpt", "gpt2-124m.toml")
GPT_TOKENS = 1 << 22
GPT_ROWS = [("pytorch", "peer", False), ("wick", "wick", ""),
            ("wick cuda_graph", "wick", "cuda_graph"),
            ("wick, LibTorch's kernels", "wick", "libtorch_kernels"),
            ("pytorch compile", "peer", True)]


def gpt_params(layers, width, vocab, **_):
    """nanoGPT's count (every parameter but wpe; wte, tied to the logits, once), by hand:
    wte V C; per block ln_1 and ln_2 (4 C), c_attn (3 C^2 + 3 C), attn.c_proj (C^2 + C), c_fc
    (4 C^2 + 4 C), mlp.c_proj (4 C^2 + C); ln_f (2 C). gpt2.py counts its module's tensors."""
    return vocab * width + layers * (12 * width * width + 13 * width) + 2 * width


def gpt_flops_per_token(layers, heads, width, context, vocab):
    """nanoGPT's estimate_mfu: 6 N + 12 L H Q T, Q = width / heads."""
    return (6 * gpt_params(layers, width, vocab)
            + 12 * layers * heads * (width // heads) * context)


def peak_flops(device_name):
    """Dense bf16 peak in FLOP/s, as bench/peers/gpt2.py: H100 / H200 SXM 989e12, PCIe 756e12,
    NVL 835e12; None for another GPU."""
    if "H100" not in device_name and "H200" not in device_name:
        return None
    return 756e12 if "PCIe" in device_name else 835e12 if "NVL" in device_name else 989e12


def write_tokens(path, n, vocab, seed):
    """n random tokens, uniform over the vocabulary, as nanoGPT's flat uint16 .bin; kept when
    a file of that size is already there (its name carries n, vocab and seed)."""
    if os.path.exists(path) and os.path.getsize(path) == 2 * n:
        return path
    tokens = array.array("H", random.Random(seed).choices(range(vocab), k=n))
    if sys.byteorder != "little":
        tokens.byteswap()
    with open(path + ".tmp", "wb") as f:
        tokens.tofile(f)
    os.replace(path + ".tmp", path)
    return path


class OutOfBudget(RuntimeError):
    """A command killed at the end of the budget: the budget's doing, not the command's."""


def run_limited(cmd, timeout, env=OWN_KERNELS):
    """subprocess.run(cmd) in its own session, killed with its children (torch.compile's
    workers) past `timeout` seconds: OutOfBudget then. `env`: variables added to ours."""
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True, env=environment(env))
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, err = p.communicate()
        raise OutOfBudget(f"killed after {timeout:.0f} s (the budget's rest)\n"
                          f"{stderr_summary(err)}")
    return subprocess.CompletedProcess(cmd, p.returncode, out, err)


def wick_window(metrics_path, warmup):
    """The timed window of a wick run from its metrics.jsonl step records: from the first
    record at or after step `warmup` to the last one. Returns (samples/s, timed steps, the
    last record's train/loss)."""
    steps = []
    with open(metrics_path) as f:
        for line in f:
            if line.strip():
                r = json.loads(line)
                if r.get("kind") == "step":
                    steps.append(r)
    first = next((r for r in steps if r["step"] >= warmup), None)
    if first is None:
        raise ValueError(f"{metrics_path}: no step record at or after step {warmup}")
    last = steps[-1]
    samples = last["samples_seen"] - first["samples_seen"]
    seconds = last["time_s"] - first["time_s"]
    if last["step"] <= first["step"] or samples <= 0 or seconds <= 0:
        raise ValueError(f"{metrics_path}: no timed window after step {first['step']} "
                         f"(last record: step {last['step']})")
    return samples / seconds, last["step"] - first["step"], last.get("train/loss")


def config_context(text):
    """A context length the GPT config sets (a key named context, block_size, ...), or None."""
    if tomllib is None:
        return None
    found = []

    def walk(v):
        if isinstance(v, dict):
            for k, x in v.items():
                if k in ("context", "block_size", "context_length", "seq_len") and \
                        isinstance(x, int):
                    found.append(x)
                walk(x)
        elif isinstance(v, list):
            for x in v:
                walk(x)
    walk(tomllib.loads(text))
    return found[0] if found else None


def gpt_wick_row(args, variant, out, data, timeout):
    """wick fit of the GPT config for W + N steps; tokens/s over the steps after W."""
    text = open(args.gpt_config).read()
    context = config_context(text)
    if context is not None and context != GPT["context"]:
        raise ValueError(f"{args.gpt_config} sets context {context}, the bench's rows "
                         f"{GPT['context']}")
    w, n = args.gpt_warmup, args.gpt_steps
    sets = ['trainer.device="cuda"', f'task.data="{data}"', f'trainer.output_dir="{out}"',
            f"trainer.steps_per_epoch={w + n}", "trainer.epochs=1",
            f"trainer.log_every={math.gcd(w, n)}", f"trainer.batch_size={args.gpt_batch}",
            "trainer.save_model=false"]
    shutil.rmtree(out, ignore_errors=True)  # never read an earlier run's metrics
    r = run_limited(wick_command(args, text, sets, variant, out), timeout,
                    LIBTORCH_KERNELS if variant == "libtorch_kernels" else OWN_KERNELS)
    if r.returncode != 0:
        raise RuntimeError(f"wick gpt2 {variant or 'as shipped'}: exit {r.returncode}\n"
                           f"{stderr_summary(r.stderr)}")
    rate, timed, loss = wick_window(os.path.join(out, "metrics.jsonl"), w)
    return {"tokens_per_s": rate * GPT["context"], "timed_steps": timed, "loss": loss}


def gpt_peer_row(args, compiled, data, timeout):
    cmd = [args.python, os.path.join(PEERS, "gpt2.py"), "--data", data, "--device", "cuda",
           "--batch-size", str(args.gpt_batch), "--steps", str(args.gpt_steps),
           "--warmup", str(args.gpt_warmup)] + ["--compile"] * compiled
    for k, v in GPT.items():
        cmd += [f"--{k}", str(v)]
    r = run_limited(cmd, timeout)
    if r.returncode != 0:
        raise RuntimeError(f"gpt2.py{' --compile' if compiled else ''}: exit {r.returncode}\n"
                           f"{stderr_summary(r.stderr)}")
    j = json.loads(r.stdout.strip().splitlines()[-1])
    if j["params"] != gpt_params(**GPT):
        raise ValueError(f"gpt2.py counts {j['params']} parameters, the bench "
                         f"{gpt_params(**GPT)}")
    return {"tokens_per_s": j["tokens_per_s"], "timed_steps": j["timed_steps"],
            "loss": j["loss"]}


def wick_tables(stderr):
    """A profiled wick run's tables: from its kernel table (or, failing that, the last 80
    lines) to the end, at most 150 lines."""
    lines = stderr.splitlines()
    start = next((i for i, l in enumerate(lines) if l.startswith("wick: GPU kernels")),
                 max(len(lines) - 80, 0))
    return "\n".join(lines[start:start + 150])


def profiled_wick(args, config, sets, out, after, steps, rows, timeout, variant="",
                  clock="device"):
    """One epoch of `config` on CUDA, fp32 unless it is the GPT's, with the profiler (its
    steps and phases on `clock`) and its kernel table (`rows` kernels of batches after + 1 to
    after + steps); `variant` as wick_command takes it."""
    text = open(config).read() + (f'\n[[hooks]]\nplugin = "profiler"\nkernels = {rows}\n'
                                  f"kernel_after = {after}\nkernel_steps = {steps}\n"
                                  f'clock = "{clock}"\n')
    shutil.rmtree(out, ignore_errors=True)
    sets = ['trainer.device="cuda"', "trainer.epochs=1", f'trainer.output_dir="{out}"'] + sets
    if config != args.gpt_config and has_hook(text, "mixed_precision"):
        sets.append("hooks.mixed_precision.enabled=false")
    return run_limited(wick_command(args, text, sets, variant, out), timeout)


def gpt_profiles(args, work, data, t_start, took, reserve):
    """Where the time goes, printed into the log (stderr): wick's GPT run with the profiler
    (its phases, timed with CUDA events, and a table of the GPU kernels of 5 steps),
    gpt2.py's kernel table of 5 steps in the same format, and wick's on the Fashion-MNIST MLP
    (50 steps), eager and replayed by cuda_graph, whose GPU busy share says how much of its
    step is the host's (run 5: the replayed step took about five times its GPU work); the
    MLP's phases on the host's clock (the profiler's clock = "host"), which is what bounds
    that step, without two CUDA events a phase. Each is
    skipped when it would leave the compile row less than `reserve` s (each taken to last as
    long as the row `took` names for it), or under 20 s of the budget are left; a failure is
    reported and the bench goes on."""
    kernel_rows = 25
    for name in ("wick", "pytorch", "wick mlp", "wick mlp cuda_graph"):
        left = args.budget_s - (time.time() - t_start)
        why = budget_refusal(left, took.get("pytorch" if name == "pytorch" else "wick"), reserve)
        if why:
            print(f"gpu_bench: profile of {name} skipped: {why}", file=sys.stderr)
            continue
        try:
            if name == "wick":
                sets = [f'task.data="{data}"', f"trainer.steps_per_epoch={args.gpt_warmup + 10}",
                        f"trainer.batch_size={args.gpt_batch}", "trainer.save_model=false"]
                r = profiled_wick(args, args.gpt_config, sets, os.path.join(work, "gpt2-profile"),
                                  args.gpt_warmup, 5, kernel_rows, left)
                text_out = wick_tables(r.stderr)
            elif name.startswith("wick mlp"):  # the Fashion-MNIST MLP, fp32: a small step
                variant = "cuda_graph" if name.endswith("cuda_graph") else ""
                out = os.path.join(work, "mlp-profile" + (f"-{variant}" if variant else ""))
                r = profiled_wick(args, os.path.join(ROOT, "samples", "fashion_mnist", "mlp.toml"),
                                  [], out, 100, 50, kernel_rows, left, variant, clock="host")
                text_out = wick_tables(r.stderr)
            else:
                cmd = [args.python, os.path.join(PEERS, "gpt2.py"), "--data", data,
                       "--device", "cuda", "--batch-size", str(args.gpt_batch), "--steps", "5",
                       "--warmup", str(args.gpt_warmup), "--profile-kernels", str(kernel_rows)]
                r = run_limited(cmd, left)
                lines = r.stderr.splitlines()
                start = next((i for i, l in enumerate(lines) if l.startswith("gpt2: GPU kernels")),
                             max(len(lines) - 30, 0))
                text_out = "\n".join(lines[start:start + kernel_rows + 3])
            print(f"gpu_bench: profile of {name} (exit {r.returncode}):\n{text_out}",
                  file=sys.stderr, flush=True)
        except (RuntimeError, OSError) as e:
            print(f"gpu_bench: profile of {name} failed: {e}", file=sys.stderr)


def budget_refusal(left, expected, reserve):
    """Why a step that may take `expected` s (None: not known) is skipped with `left` s of
    the budget, keeping `reserve` s for the compile row; "" to run it."""
    if left < MIN_ROW_S:
        return f"{max(left, 0):.0f} s of the budget left"
    if expected is not None and left - expected < reserve:
        return (f"{left:.0f} s of the budget left, and after it (about {expected:.0f} s) the "
                f"compile row would have under {reserve} s")
    return ""


def gpt_rows(args, work, t_start):
    """The GPT rows, once: row name -> result dict, or {"failed": ...} / {"skipped": ...}.
    "pytorch compile" comes last: a cold compile may take the rest. Before it, the LibTorch-
    kernel row and the profiles run only while they keep --compile-reserve-s for it (taken to
    last as long as the wick row did), the row always when the wick row failed: then it is
    wick's number."""
    got, took = {}, {}
    why = budget_refusal(args.budget_s - (time.time() - t_start), None, 0)
    if why:
        return {name: {"skipped": why} for name, _, _ in GPT_ROWS}
    try:
        data = write_tokens(os.path.join(work, f"gpt2-tokens-{GPT['vocab']}-{GPT_TOKENS}-0.bin"),
                            GPT_TOKENS, GPT["vocab"], 0)
    except OSError as e:
        return {name: {"failed": f"writing the tokens: {e}"} for name, _, _ in GPT_ROWS}
    reserve = 0 if args.gpt_compile == "off" else args.compile_reserve_s
    for name, kind, variant in GPT_ROWS:
        if name == "pytorch compile":
            if args.gpt_profile == "on":
                gpt_profiles(args, work, data, t_start, took, reserve)
            if args.gpt_compile == "off":
                got[name] = {"skipped": "--gpt-compile off"}
                continue
        left = args.budget_s - (time.time() - t_start)
        # Only the LibTorch-kernel row keeps the compile row's reserve, and not as wick's number.
        keeps = variant == "libtorch_kernels" and "failed" not in got.get("wick", {})
        why = budget_refusal(left, took.get("wick") if keeps else None, reserve)
        if why:
            got[name] = {"skipped": why}
            print(f"gpu_bench: gpt2 {name} skipped: {why}", file=sys.stderr)
            continue
        t_row = time.time()
        try:
            if kind == "wick":
                out = os.path.join(work, f"gpt2-{variant or 'wick'}")
                got[name] = gpt_wick_row(args, variant, out, data, left)
            else:
                got[name] = gpt_peer_row(args, variant, data, left)
        except (RuntimeError, OSError, ValueError, KeyError, IndexError, TypeError) as e:
            got[name] = {"failed": " ".join(str(e).split()[:40])}
            print(f"gpu_bench: gpt2 {name} failed: {e}", file=sys.stderr)
        took[name] = time.time() - t_row
    return got


def gpt_report(got, args, gpu):
    """bench.json's "gpt2" object and bench.md's lines for the GPT rows."""
    fpt, peak = gpt_flops_per_token(**GPT), peak_flops(gpu)
    base = got.get("pytorch compile", {}).get("tokens_per_s")
    rows = []
    lines = ["", f"GPT-2 124M ({GPT['layers']} layers, {GPT['heads']} heads, width "
             f"{GPT['width']}, context {GPT['context']}, vocab {GPT['vocab']}; "
             f"{gpt_params(**GPT):,} parameters without wpe; {fpt / 1e6:.1f} MFLOP per token), "
             f"batch {args.gpt_batch} x {GPT['context']} tokens of random data, bf16, "
             f"{args.gpt_warmup} untimed + {args.gpt_steps} timed steps, once (round 1). MFU "
             + (f"against {peak / 1e12:.0f} TFLOP/s (dense bf16)." if peak else
                "null: no known peak for this GPU.")
             + " torch.compile's compilation is outside the timed window.", "",
             "| row | tokens/s | MFU | x pytorch compile | timed steps | loss (end) |",
             "| --- | --- | --- | --- | --- | --- |"]
    for name, _, _ in GPT_ROWS:
        g = got.get(name, {"skipped": "not run"})
        rate = g.get("tokens_per_s")
        row = {"row": name, "tokens_per_s": rate,
               "mfu": None if rate is None or peak is None else rate * fpt / peak,
               "ratio_to_pytorch_compile": None if rate is None or not base else rate / base,
               "timed_steps": g.get("timed_steps"), "loss": g.get("loss"),
               "failed": g.get("failed"), "skipped": g.get("skipped")}
        rows.append(row)
        if rate is None:
            why = f"failed: {row['failed']}" if row["failed"] else f"skipped: {row['skipped']}"
            lines.append(f"| {name} | {why} | | | | |")
            continue
        mfu = "" if row["mfu"] is None else f"{row['mfu']:.1%}"
        ratio = "" if row["ratio_to_pytorch_compile"] is None else \
            f"{row['ratio_to_pytorch_compile']:.2f}"
        loss = "" if row["loss"] is None else f"{row['loss']:.3f}"
        lines.append(f"| {name} | {rate:,.0f} | {mfu} | {ratio} | {row['timed_steps']} | {loss} |")
    own = got.get("wick", {}).get("tokens_per_s")
    lib = got.get("wick, LibTorch's kernels", {}).get("tokens_per_s")
    if own and lib:
        lines += ["", f"wick's own CUDA kernels (layer norm with the residual add, cross-entropy, "
                  f"gelu_mlp's cuBLASLt epilogue, wick::linear's float gradients, the biases' "
                  f"column sums, the batched AdamW) make wick {own / lib:.2f}x itself with them "
                  f"hidden (WICK_CUDA_DISABLE=all: LibTorch's operators in their place)."]
    lines += ["", "loss (end): gpt2.py's last step; wick's last step record's train/loss (the "
              f"mean over its last {math.gcd(args.gpt_warmup, args.gpt_steps)} steps). On "
              f"uniform random tokens it stays near ln({GPT['vocab']}) = "
              f"{math.log(GPT['vocab']):.2f}."]
    result = {**GPT, "batch_size": args.gpt_batch, "warmup_steps": args.gpt_warmup,
              "timed_steps": args.gpt_steps, "tokens": GPT_TOKENS, "params": gpt_params(**GPT),
              "flops_per_token": fpt, "peak_flops": peak, "config": args.gpt_config,
              "rows": rows}
    return result, lines


def gpu_name(python):
    r = subprocess.run([python, "-c", "import torch; print(torch.cuda.get_device_name(0), "
                        "torch.__version__, sep='|')"], capture_output=True, text=True)
    return r.stdout.strip().split("|") if r.returncode == 0 else ["?", "?"]


def write_report(args, gpu, torch_version, models, rounds, rates, ratios, whole_epoch, accuracy,
                 failed, skipped, libtorch_kernels, gpt):
    """Writes OUT/bench.json and OUT/bench.md from what is measured so far; returns bench.md's
    lines."""

    def stats(v):
        if not v:
            return None
        return {"median": statistics.median(v), "min": min(v), "max": max(v)}

    result = {"gpu": gpu, "torch": torch_version, "epochs": args.epochs, "rounds": rounds,
              "batch_size": 64, "rows": []}
    lines = [f"GPU bench: {gpu}, torch {torch_version}, batch 64, {args.epochs} epoch(s), "
             f"{rounds} round(s), alternating order.", "",
             "| model | row | samples/s (median) | min | max | x python loop (min-max) | "
             "whole epoch (median) | valid accuracy |",
             "| --- | --- | --- | --- | --- | --- | --- | --- |"]
    for model in models:
        for name, _, _ in ROWS:
            r, q = stats(rates[(model, name)]), stats(ratios[(model, name)])
            w = stats(whole_epoch[(model, name)])
            acc = accuracy.get((model, name))
            error = failed.get((model, name))
            result["rows"].append({"model": model, "row": name, "samples_per_s": r,
                                   "ratio_to_python_loop": q, "whole_epoch_samples_per_s": w,
                                   "valid_accuracy": acc,
                                   "failed": error, "skipped": skipped.get((model, name)),
                                   "libtorch_kernels": (model, name) in libtorch_kernels})
            if r is None:
                why = f"failed: {error}" if error else f"skipped: {skipped.get((model, name))}"
                lines.append(f"| {model} | {name} | {why} | | | | | |")
                continue
            ratio = "" if q is None else f"{q['median']:.2f} ({q['min']:.2f}-{q['max']:.2f})"
            note = "" if error is None else " (failed in a round)"
            if (model, name) in libtorch_kernels:
                note = " (failed; every round's number with WICK_CUDA_DISABLE=all)"
            whole = "" if w is None else f"{w['median']:,.0f}"
            lines.append(f"| {model} | {name}{note} | {r['median']:,.0f} | {r['min']:,.0f} | "
                         f"{r['max']:,.0f} | {ratio} | {whole} | "
                         f"{'' if acc is None else f'{acc:.4f}'} |")
    if args.gpt == "on" and gpt:
        result["gpt2"], gpt_lines = gpt_report(gpt, args, gpu)
        lines += gpt_lines
    with open(os.path.join(args.out, "bench.json"), "w") as f:
        json.dump(result, f, indent=1)
    with open(os.path.join(args.out, "bench.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    return lines


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
    ap.add_argument("--models", default="mlp,cnn", help="the Fashion-MNIST models to run")
    ap.add_argument("--gpt", choices=("on", "off"), default="on", help="the GPT-2 124M rows")
    ap.add_argument("--gpt-config", default=GPT_CONFIG)
    ap.add_argument("--gpt-warmup", type=int, default=10, help="untimed steps (>= 1)")
    ap.add_argument("--gpt-steps", type=int, default=30, help="timed steps")
    ap.add_argument("--gpt-batch", type=int, default=16)
    ap.add_argument("--gpt-compile", choices=("on", "off"), default="on",
                    help="the pytorch compile row (off: a shorter run)")
    ap.add_argument("--gpt-profile", choices=("on", "off"), default="on",
                    help="print where the GPT step's time goes into the log (wick's profiler "
                    "with its kernel table, gpt2.py's kernel table)")
    # Run 5 (H200, a cold Triton cache): the compile row, compilation included, took about 45 s.
    ap.add_argument("--compile-reserve-s", type=float, default=90,
                    help="seconds the rows and profiles before the pytorch compile row leave it "
                    "(a cold Triton cache)")
    args = ap.parse_args()
    if args.gpt_warmup < 1 or args.gpt_steps < 1 or args.gpt_batch < 1:
        ap.error("--gpt-warmup, --gpt-steps and --gpt-batch must be >= 1")
    # Absolute: the runs' --set paths must not depend on how wick resolves a relative one.
    work = os.path.abspath(args.work or tempfile.mkdtemp(prefix="wick-gpu-bench-"))
    os.makedirs(work, exist_ok=True)
    t_start = time.time()
    gpu, torch_version = gpu_name(args.python)
    models = [m for m in ("mlp", "cnn") if m in args.models.split(",")]
    rates = {(m, name): [] for m in models for name, _, _ in ROWS}
    ratios = {k: [] for k in rates}
    whole_epoch = {k: [] for k in rates}  # wick rows: summary.json's rate, set-up included
    accuracy = {}
    failed = {}  # (model, row) -> the error's last lines
    skipped = {}  # (model, row) -> why a round ran it not (the budget)
    libtorch_kernels = set()  # (model, row) measured again with WICK_CUDA_DISABLE=all
    gpt = {}  # GPT row -> its result, or failed / skipped
    rounds = 0

    def report():
        """bench.json and bench.md as they stand: written after each round and after the GPT
        rows, so that a run cut short still leaves what it measured."""
        return write_report(args, gpu, torch_version, models, rounds, rates, ratios, whole_epoch,
                            accuracy, failed, skipped, libtorch_kernels, gpt)

    for rnd in range(args.rounds):
        t_round = time.time()
        for model in models:
            order = ROWS if rnd % 2 == 0 else list(reversed(ROWS))
            got = {}
            for name, kind, extra in order:
                left = args.budget_s - (time.time() - t_start)
                why = budget_refusal(left, None, 0)
                if why:
                    skipped[(model, name)] = why
                    print(f"gpu_bench: {model} {name} skipped: {why}", file=sys.stderr)
                    continue
                try:
                    if kind == "wick":
                        out = os.path.join(work, f"{model}-{extra}-{rnd}")
                        try:
                            # Once failed, a row's later rounds take LibTorch's kernels.
                            got[name] = wick_row(args, model, extra, out, left,
                                                 LIBTORCH_KERNELS if (model, name) in
                                                 libtorch_kernels else OWN_KERNELS)
                        except (RuntimeError, OSError, ValueError, KeyError) as e:
                            # Once more with LibTorch's kernels in place of wick's own: a
                            # number for the row, and whether one of wick's kernels failed.
                            if (model, name) in libtorch_kernels or isinstance(e, OutOfBudget):
                                raise
                            failed[(model, name)] = " ".join(str(e).split()[:40])
                            print(f"gpu_bench: {model} {name} failed: {e}; again with "
                                  "WICK_CUDA_DISABLE=all", file=sys.stderr)
                            # The row's numbers are all of one kind: earlier rounds' go.
                            libtorch_kernels.add((model, name))
                            for kept in (rates, ratios, whole_epoch):
                                kept[(model, name)].clear()
                            left = args.budget_s - (time.time() - t_start)
                            got[name] = wick_row(args, model, extra, out, max(left, 1),
                                                 LIBTORCH_KERNELS)
                    elif kind == "hand":
                        got[name] = hand_row(args, model, left)
                    else:
                        got[name] = peer_row(args, model, kind, extra, left)
                    # As it comes: a run cut short still shows the rows it finished.
                    kernels = " (LibTorch's kernels)" if (model, name) in libtorch_kernels \
                        else ""
                    whole = (f" ({got[name][2]:,.0f} over the whole epoch)"
                             if len(got[name]) > 2 else "")
                    print(f"gpu_bench: {model} {name}{kernels}: {got[name][0]:,.0f} samples/s"
                          f"{whole}", file=sys.stderr, flush=True)
                except (RuntimeError, OSError, ValueError, KeyError, IndexError) as e:
                    why = " ".join(str(e).split()[:40])
                    failed[(model, name)] = (failed[(model, name)] + "; then " + why
                                             if (model, name) in failed else why)
                    print(f"gpu_bench: {model} {name} failed: {e}", file=sys.stderr)
            base = got.get("python loop", (None, None))[0]
            for name, (rate, acc, *whole) in got.items():
                rates[(model, name)].append(rate)
                whole_epoch[(model, name)] += whole
                if base:
                    ratios[(model, name)].append(rate / base)
                accuracy[(model, name)] = acc
        rounds += 1
        report()
        last = time.time() - t_round  # the MLP/CNN round alone: what another round costs
        if rnd == 0 and args.gpt == "on":
            gpt = gpt_rows(args, work, t_start)
            report()
        spent = time.time() - t_start
        if spent + last > args.budget_s:
            break
    print("\n".join(report()))
    return 1 if failed or any("failed" in g for g in gpt.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
