"""Peer "gpt2": GPT-2 trained in PyTorch with nanoGPT's recipe, the twin of wick's
samples/gpt (the same parameters, tensor for tensor). Prints one JSON line on stdout.

    python bench/peers/gpt2.py --data tokens.bin --steps 30 --warmup 10 [--compile]
    python bench/peers/gpt2.py --data tiny.bin --device cpu --layers 2 --heads 2 --width 64 \
        --context 64 --vocab 256 --batch-size 4 --steps 5 --warmup 1     # a CPU smoke run

The model (nanoGPT's names): transformer.wte [vocab, width] and transformer.wpe [context,
width]; per block ln_1 (LayerNorm with bias), attn.c_attn Linear(width, 3 width) -> q, k, v
in heads -> F.scaled_dot_product_attention(is_causal=True) -> attn.c_proj Linear(width,
width), ln_2, mlp.c_fc Linear(width, 4 width), GELU (tanh approximation), mlp.c_proj
Linear(4 width, width), all Linear layers with bias; transformer.ln_f; logits = x @ wte^T
(tied: no lm_head parameter). Dropout 0. Weights normal(0, 0.02), the two c_proj weights of
each block normal(0, 0.02 / sqrt(2 layers)), biases 0, LayerNorms 1 and 0.

The recipe: cross entropy; bf16 autocast on CUDA (--precision auto: bf16 on CUDA, fp32 on
the CPU); TF32 matmuls allowed on CUDA, as nanoGPT's train.py sets them (under autocast they
touch almost nothing); AdamW lr 6e-4 constant (no warm-up or decay schedule), betas (0.9,
0.95), eps 1e-8, weight decay 0.1 on the 2-D parameters (embeddings and Linear weights), 0 on
biases and LayerNorms, fused=True on CUDA (torch's default implementation on the CPU);
gradients clipped to norm 1.0 (clip_grad_norm_, as nanoGPT; the result says grad_clip);
zero_grad(set_to_none=True); --compile wraps the model in torch.compile (default mode).

Data: a flat uint16 token file (nanoGPT's train.bin layout), memory-mapped (torch.from_file,
a private read-only mapping; no numpy needed); each sample is a random window of context + 1
tokens, its start drawn from a torch.Generator seeded by --seed; inputs are the first context
tokens, targets the last. Batches are built on the CPU as int64, pinned and copied with
non_blocking=True on CUDA; the next batch is fetched while the GPU runs the current step's
forward, as nanoGPT does.

Timing: --warmup steps (torch.compile's compilation, cuBLAS and allocator warm-up) are not
timed; torch.cuda.synchronize() before and after the --steps timed steps, nothing syncs
inside them (the loss is read once, after). tokens_per_s = steps x batch x context / seconds.

The result line (common.py's convention: one JSON object on the real stdout, everything else
on stderr; this file does not import common.py, which needs numpy and the Fashion-MNIST
files): framework, version, torch, workload "gpt2", the shape and recipe, steps, timed_steps,
timed_s, tokens_per_s, samples_per_s, params (nanoGPT's count: every parameter but wpe; wte
counted once), flops_per_token = 6 params + 12 layers heads head_dim context (nanoGPT's
estimate_mfu: the attention's matmuls with the full context), peak_flops (989e12 for an
H100 / H200 SXM, bf16 dense; 756e12 H100 PCIe, 835e12 NVL; null elsewhere), mfu =
tokens_per_s x flops_per_token / peak_flops (null without a known peak, the CPU included),
loss (the last step's), first_loss, time_to_first_step_s, peak_rss_mb, peak_gpu_mb, wall_s.
Exit codes: 0 done, 2 usage (argparse, --device cuda without CUDA, a data file too short),
anything else a failure (a traceback on stderr).
"""
import argparse
import contextlib
import json
import math
import os
import resource
import sys
import time

# The result line's own handle on the real stdout; fd 1 (and print) now go to stderr, so that
# torch.compile's and anything else's output never mixes with the result.
sys.stdout.flush()
_RESULT = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from torch import nn  # noqa: E402

EXIT_USAGE = 2


# ---- the model ----------------------------------------------------------------------------

class CausalSelfAttention(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.c_attn = nn.Linear(width, 3 * width)
        self.c_proj = nn.Linear(width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Mlp(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.c_fc = nn.Linear(width, 4 * width)
        self.c_proj = nn.Linear(4 * width, width)

    def forward(self, x):
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads)
        self.ln_2 = nn.LayerNorm(width)
        self.mlp = Mlp(width)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, layers: int, heads: int, width: int, context: int, vocab: int):
        super().__init__()
        self.context = context
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(vocab, width),
            wpe=nn.Embedding(context, width),
            h=nn.ModuleList(Block(width, heads) for _ in range(layers)),
            ln_f=nn.LayerNorm(width)))
        for m in self.modules():
            if isinstance(m, nn.Linear):
                nn.init.normal_(m.weight, 0.0, 0.02)
                nn.init.zeros_(m.bias)
            elif isinstance(m, nn.Embedding):
                nn.init.normal_(m.weight, 0.0, 0.02)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, 0.0, 0.02 / math.sqrt(2 * layers))

    def logits(self, idx):
        t = idx.size(1)
        tr = self.transformer
        pos = torch.arange(t, device=idx.device)
        x = tr.wte(idx) + tr.wpe(pos)
        for block in tr.h:
            x = block(x)
        return F.linear(tr.ln_f(x), tr.wte.weight)  # tied to the token embedding

    def forward(self, idx, targets):
        logits = self.logits(idx)
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.reshape(-1))


def count_params(model: nn.Module) -> int:
    """nanoGPT's get_num_params(): every parameter (the tied wte once) but wpe."""
    return (sum(p.numel() for p in model.parameters())
            - model.transformer.wpe.weight.numel())


def formula_params(layers: int, width: int, vocab: int) -> int:
    """The same count by hand: wte V C; per block two LayerNorms (4 C), c_attn (3 C^2 + 3 C),
    attn.c_proj (C^2 + C), c_fc (4 C^2 + 4 C), mlp.c_proj (4 C^2 + C): 12 C^2 + 13 C; ln_f
    2 C."""
    return vocab * width + layers * (12 * width * width + 13 * width) + 2 * width


def flops_per_token(params: int, layers: int, heads: int, width: int, context: int) -> int:
    """nanoGPT's estimate_mfu: 6 N for the matmuls' forward and backward, plus the attention's
    12 L H Q T (Q = width / heads)."""
    return 6 * params + 12 * layers * heads * (width // heads) * context


def peak_flops(device_name: str) -> float | None:
    """Dense bf16 tensor-core peak, FLOP/s: H100 / H200 SXM 989e12 (PCIe 756e12, NVL 835e12);
    None for any other GPU and the CPU."""
    if "H100" not in device_name and "H200" not in device_name:
        return None
    if "PCIe" in device_name:
        return 756e12
    if "NVL" in device_name:
        return 835e12
    return 989e12


# ---- data ---------------------------------------------------------------------------------

class Tokens:
    """Random context + 1 windows of a memory-mapped uint16 token file."""

    def __init__(self, path: str, context: int, vocab: int, batch: int, seed: int,
                 device: torch.device):
        n = os.path.getsize(path) // 2
        if n < context + 2:
            print(f"gpt2: {path} holds {n} tokens; a window needs {context + 1} and one more",
                  file=sys.stderr)
            sys.exit(EXIT_USAGE)
        self.data = torch.from_file(path, shared=False, size=n, dtype=torch.uint16)
        if n <= 1 << 27:  # a token past the vocabulary would be a device-side assert later
            top = int(self.data.to(torch.int32).max())
            if top >= vocab:
                print(f"gpt2: {path} holds token {top}, outside --vocab {vocab}", file=sys.stderr)
                sys.exit(EXIT_USAGE)
        self.n, self.context, self.batch, self.device = n, context, batch, device
        self.gen = torch.Generator().manual_seed(seed)
        self.pin = device.type == "cuda"

    def batch_xy(self):
        starts = torch.randint(self.n - self.context, (self.batch,), generator=self.gen).tolist()
        t = self.context
        x = torch.stack([self.data[i:i + t] for i in starts]).to(torch.int64)
        y = torch.stack([self.data[i + 1:i + 1 + t] for i in starts]).to(torch.int64)
        if self.pin:
            x, y = x.pin_memory(), y.pin_memory()
        return (x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True))


# ---- time and memory ----------------------------------------------------------------------

def process_start() -> float:
    """The process's start in seconds since boot (/proc/self/stat's starttime), as common.py."""
    with open("/proc/self/stat") as f:
        stat = f.read()
    return int(stat[stat.rindex(")") + 2:].split()[19]) / os.sysconf("SC_CLK_TCK")


def since_boot() -> float:
    return time.clock_gettime(time.CLOCK_BOOTTIME)


# ---- where the GPU time goes ----------------------------------------------------------------

def print_kernels(train_step, steps, top):
    """Traces `steps` training steps' CUDA kernels (and copies) and prints the `top` by GPU time
    per step on stderr, with the GPU's busy share of the window's wall time: the format of
    wick's profiler (plugins/profiler/kernel_trace.cpp), for a side-by-side reading."""
    from torch.profiler import ProfilerActivity, profile
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            train_step()
        torch.cuda.synchronize()
    wall_ms = (time.perf_counter() - t0) * 1e3
    kernels = {}
    for e in prof.profiler.kineto_results.events():
        if e.device_type() == torch.autograd.DeviceType.CUDA:
            k = kernels.setdefault(e.name(), [0, 0])
            k[0] += e.duration_ns()
            k[1] += 1
    busy_ms = sum(k[0] for k in kernels.values()) / 1e6
    print(f"gpt2: GPU kernels of {steps} steps after the timed ones\n"
          f"  {steps} steps: {wall_ms / steps:.3f} ms of wall time per step, the GPU busy "
          f"{busy_ms / steps:.3f} ms of it ({100 * busy_ms / wall_ms:.1f}%) in {len(kernels)} "
          "kernels and copies\n  ms/step   share  calls/step  kernel", file=sys.stderr)
    for name, (ns, calls) in sorted(kernels.items(), key=lambda kv: -kv[1][0])[:top]:
        print(f"  {ns / 1e6 / steps:8.3f}  {100 * ns / 1e6 / busy_ms:5.1f}%  "
              f"{calls / steps:10.1f}  {name[:110]}", file=sys.stderr)


# ---- the run ------------------------------------------------------------------------------

def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", required=True, help="flat uint16 token file (nanoGPT's .bin)")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--context", type=int, default=1024)
    ap.add_argument("--vocab", type=int, default=50304)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--steps", type=int, default=30, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps before them")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    ap.add_argument("--precision", choices=("auto", "bf16", "fp32"), default="auto",
                    help="auto: bf16 autocast on CUDA, fp32 on the CPU")
    ap.add_argument("--compile", action="store_true", help="torch.compile(model)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--profile-kernels", type=int, default=0, metavar="N",
                    help="after the timed steps, trace --kernel-steps more on CUDA and print "
                    "the N kernels with the most GPU time on stderr, as wick's profiler "
                    "(hooks.profiler.kernels) does")
    ap.add_argument("--kernel-steps", type=int, default=5)
    a = ap.parse_args()
    if min(a.layers, a.heads, a.width, a.context, a.vocab, a.batch_size, a.steps) < 1:
        ap.error("--layers, --heads, --width, --context, --vocab, --batch-size and --steps "
                 "must be >= 1")
    if a.warmup < 0 or a.width % a.heads:
        ap.error("--warmup must be >= 0 and --width a multiple of --heads")
    if a.vocab > 65536:
        ap.error("--vocab: a uint16 token file holds at most 65536 token ids")
    if a.precision == "auto":
        a.precision = "bf16" if a.device == "cuda" else "fp32"
    return a


def main():
    a = parse_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        print("gpt2: --device cuda: torch sees no CUDA device", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    device = torch.device(a.device)
    cuda = device.type == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(a.seed)
    model = Gpt(a.layers, a.heads, a.width, a.context, a.vocab).to(device)
    params = count_params(model)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8,
                            **({"fused": True} if cuda else {}))
    step_model = torch.compile(model) if a.compile else model
    amp = (torch.autocast(a.device, dtype=torch.bfloat16) if a.precision == "bf16"
           else contextlib.nullcontext())
    data = Tokens(a.data, a.context, a.vocab, a.batch_size, a.seed, device)

    def sync():
        if cuda:
            torch.cuda.synchronize()

    model.train()
    first_step = since_boot()
    x, y = data.batch_xy()
    first_loss = loss = None

    def train_step():
        nonlocal x, y
        with amp:
            loss = step_model(x, y)
        x, y = data.batch_xy()  # the next batch, while the GPU runs this forward
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    t0 = time.perf_counter()
    for step in range(a.warmup + a.steps):
        if step == a.warmup:
            sync()
            t0 = time.perf_counter()
        loss = train_step()
        if step == 0:
            first_loss = loss.detach()
    sync()
    timed_s = time.perf_counter() - t0
    if a.profile_kernels > 0 and cuda:
        print_kernels(train_step, a.kernel_steps, a.profile_kernels)

    tokens_per_s = a.steps * a.batch_size * a.context / timed_s
    fpt = flops_per_token(params, a.layers, a.heads, a.width, a.context)
    name = torch.cuda.get_device_name(device) if cuda else "cpu"
    peak = peak_flops(name) if cuda else None
    start = process_start()
    result = {
        "framework": "pytorch",
        "version": torch.__version__,
        "torch": torch.__version__,
        "workload": "gpt2",
        "device": a.device,
        "device_name": name,
        "precision": a.precision,
        "compile": a.compile,
        "tf32": cuda,
        "layers": a.layers, "heads": a.heads, "width": a.width, "context": a.context,
        "vocab": a.vocab,
        "batch_size": a.batch_size,
        "lr": 6e-4, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1,
        "grad_clip": 1.0,
        "optimizer": "torch.optim.AdamW(fused=True)" if cuda else "torch.optim.AdamW",
        "seed": a.seed,
        "threads": torch.get_num_threads(),
        "steps": a.warmup + a.steps,
        "warmup_steps": a.warmup,
        "timed_steps": a.steps,
        "timed_s": round(timed_s, 4),
        "tokens_per_s": round(tokens_per_s, 1),
        "samples_per_s": round(a.steps * a.batch_size / timed_s, 3),
        "params": params,
        "flops_per_token": fpt,
        "peak_flops": peak,
        "mfu": None if peak is None else round(tokens_per_s * fpt / peak, 4),
        "loss": loss.item(),
        "first_loss": first_loss.item(),
        "time_to_first_step_s": round(first_step - start, 3),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        "peak_gpu_mb": round(torch.cuda.max_memory_allocated(device) / 2**20, 1) if cuda
        else None,
        "wall_s": round(since_boot() - start, 3),
    }
    _RESULT.write(json.dumps(result) + "\n")
    _RESULT.flush()


if __name__ == "__main__":
    main()
