"""What every Python peer of wick's benchmark shares: the command line, the data, the models
(built to match wick's), the step clock, the evaluation and the one JSON result line.

Each peer (plain.py, lightning_peer.py, hf_peer.py, skorch_peer.py) imports this module first:
importing it moves the process's stdout to stderr, so that whatever a framework prints
(progress bars, logs, tables) never mixes with the result line, which goes to the real stdout.
"""
import argparse
import contextlib
import gzip
import importlib.util
import json
import math
import os
import resource
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# The result line's own handle on the real stdout; fd 1 itself now points at stderr, which
# catches C-level writes too.
sys.stdout.flush()
_RESULT = os.fdopen(os.dup(1), "w")
os.dup2(2, 1)

import numpy as np  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
FASHION_DIR = Path("/usr/share/datasets/fashion-mnist")
# The fashion_mnist task's normalisation: the training images' mean and std.
MEAN, STD = 0.2860, 0.3530
LATENT, FEATURES = 64, 32  # samples/gan/gan.cpp's defaults
WORKLOADS = ("mlp", "cnn", "transformer", "gan", "gpt")
# The gpt workload: samples/gpt/gpt.toml's model, on byte windows of a text every Debian has.
GPT_TOML = ROOT / "samples" / "gpt" / "gpt.toml"
GPT_TEXT = Path("/usr/share/common-licenses/GPL-3")
GPT_WINDOWS = 3840  # 60 batches of 64: gpt.toml's steps_per_epoch
EXIT_USAGE, EXIT_UNSUPPORTED = 2, 3


# ---- command line -----------------------------------------------------------------------

def parse_args(description: str) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=description)
    ap.add_argument("--workload", choices=WORKLOADS, required=True)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--lr", type=float, default=None,
                    help="Adam's learning rate (default 1e-3; the GAN 2e-4)")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    ap.add_argument("--max-steps", type=int, default=0,
                    help="stop after N optimizer steps in all (0: whole epochs)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--progress", choices=("on", "off"), default="on",
                    help="the framework's progress bar and logging as left by default (on) "
                         "or all off; no effect on plain.py")
    a = ap.parse_args()
    if a.epochs < 1 or a.batch_size < 1 or a.threads < 1 or a.max_steps < 0:
        ap.error("--epochs, --batch-size and --threads must be >= 1, --max-steps >= 0")
    if a.lr is None:
        a.lr = 2e-4 if a.workload == "gan" else 1e-3
    return a


def refuse(peer: str, why: str) -> None:
    """A workload this peer does not train: a message and exit 3, no result line."""
    print(f"{peer}: {why}", file=sys.stderr)
    sys.exit(EXIT_UNSUPPORTED)


def setup(a: argparse.Namespace) -> torch.device:
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    if a.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch sees no CUDA device", file=sys.stderr)
        sys.exit(EXIT_USAGE)
    return torch.device(a.device)


def autocast(a: argparse.Namespace):
    """bf16 autocast on the run's device, or nothing for fp32."""
    if a.precision == "bf16":
        return torch.autocast(a.device, dtype=torch.bfloat16)
    return contextlib.nullcontext()


# ---- data ---------------------------------------------------------------------------------

def _idx(name: str, offset: int) -> np.ndarray:
    path = FASHION_DIR / name
    if not path.is_file():
        sys.exit(f"missing {path}: install Debian's dataset-fashion-mnist")
    with open(path, "rb") as f:
        return np.frombuffer(gzip.decompress(f.read())[offset:], dtype=np.uint8)


def _fashion_images(prefix: str) -> np.ndarray:
    return _idx(f"{prefix}-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)


def fashion(prefix: str) -> tuple[torch.Tensor, torch.Tensor]:
    """One split ("train": 60,000, "t10k": 10,000), normalised as wick's fashion_mnist task."""
    # In place: the temporaries of (x / 255 - MEAN) / STD would add ~0.5 GB to every peer's
    # peak RSS, which the result reports.
    x = _fashion_images(prefix).astype(np.float32)
    x /= 255
    x -= MEAN
    x /= STD
    y = _idx(f"{prefix}-labels-idx1-ubyte.gz", 8).astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def fashion_gan() -> torch.Tensor:
    """The training images in [-1, 1], as samples/gan/gan.cpp scales them."""
    x = _fashion_images("train").astype(np.float32)
    x /= 127.5
    x -= 1.0
    return torch.from_numpy(x)


def _make_py():
    """samples/torchscript/make.py as a module: its Net and data() are the workload."""
    return _load("wick_torchscript_make", ROOT / "samples" / "torchscript" / "make.py")


def gpt_windows(context: int) -> tuple[torch.Tensor, torch.Tensor]:
    """GPT_WINDOWS windows of context + 1 bytes of GPT_TEXT at seeded random starts: inputs and
    next-byte targets [N, context], int64 (wick's gpt task draws its windows per batch from the
    same kind of text)."""
    tokens = torch.frombuffer(bytearray(GPT_TEXT.read_bytes()), dtype=torch.uint8).long()
    g = torch.Generator().manual_seed(0)
    starts = torch.randint(len(tokens) - context - 1, (GPT_WINDOWS,), generator=g)
    w = tokens[starts.unsqueeze(1) + torch.arange(context + 1)]
    return w[:, :-1].contiguous(), w[:, 1:].contiguous()


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


# ---- models -------------------------------------------------------------------------------

def mlp() -> nn.Module:
    """samples/fashion_mnist/mlp.toml: 784-256-128-10."""
    return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                         nn.ReLU(), nn.Linear(128, 10))


def cnn() -> nn.Module:
    """samples/fashion_mnist/cnn.toml: two conv (no bias) + BN + ReLU + max-pool blocks
    (32, 64), a 128-unit hidden layer, dropout 0.3."""
    layers, c = [], 1
    for out in (32, 64):
        layers += [nn.Conv2d(c, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(),
                   nn.MaxPool2d(2)]
        c = out
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                         nn.Dropout(0.3), nn.Linear(128, 10))


class Gan(nn.Module):
    """samples/gan/gan.cpp's DCGAN, layer for layer (latent 64, features 32)."""

    def __init__(self, latent: int = LATENT, f: int = FEATURES):
        super().__init__()
        # 7x7 -> 14x14 -> 28x28, values in [-1, 1].
        self.generator = nn.Sequential(
            nn.ConvTranspose2d(latent, f * 4, 7, bias=False), nn.BatchNorm2d(f * 4), nn.ReLU(),
            nn.ConvTranspose2d(f * 4, f * 2, 4, stride=2, padding=1, bias=False),
            nn.BatchNorm2d(f * 2), nn.ReLU(),
            nn.ConvTranspose2d(f * 2, 1, 4, stride=2, padding=1), nn.Tanh())
        # A logit per image.
        self.discriminator = nn.Sequential(
            nn.Conv2d(1, f * 2, 4, stride=2, padding=1), nn.LeakyReLU(0.2),
            nn.Conv2d(f * 2, f * 4, 4, stride=2, padding=1, bias=False), nn.BatchNorm2d(f * 4),
            nn.LeakyReLU(0.2), nn.Conv2d(f * 4, 1, 7), nn.Flatten())


def gan_optimizers(gan: Gan, lr: float):
    """Adam for each network with DCGAN's betas: (discriminator, generator)."""
    betas = (0.5, 0.999)
    return (torch.optim.Adam(gan.discriminator.parameters(), lr=lr, betas=betas),
            torch.optim.Adam(gan.generator.parameters(), lr=lr, betas=betas))


def gan_step(gan: Gan, real: torch.Tensor, opt_d, opt_g, backward, amp):
    """One step of gan.cpp's train_step: the discriminator on real (-> 1) and generated
    (detached, -> 0) images, then the generator (make the discriminator say 1). `backward`
    and `amp` are the framework's (Lightning: manual_backward, its own autocast)."""
    n = real.size(0)
    real_t = torch.ones(n, 1, device=real.device)
    fake_t = torch.zeros_like(real_t)
    with amp:
        images = gan.generator(torch.randn(n, LATENT, 1, 1, device=real.device))
        d_loss = (F.binary_cross_entropy_with_logits(gan.discriminator(real), real_t)
                  + F.binary_cross_entropy_with_logits(gan.discriminator(images.detach()), fake_t))
    opt_d.zero_grad()
    backward(d_loss)
    opt_d.step()
    # The generator's backward reaches the discriminator's weights too; their gradients are
    # cleared before the discriminator's next step.
    with amp:
        g_loss = F.binary_cross_entropy_with_logits(gan.discriminator(images), real_t)
    opt_g.zero_grad()
    backward(g_loss)
    opt_g.step()
    return d_loss.detach(), g_loss.detach()


class GptLogits(nn.Module):
    """samples/gpt/gpt.toml's model as bench/peers/gpt2.py builds it (the twin of wick's gpt
    task), giving logits [N, vocab, T]: what F.cross_entropy takes against targets [N, T], so
    the classifier loops of every peer train it unchanged."""

    def __init__(self):
        super().__init__()
        import tomllib  # Python 3.11+ (Debian bookworm's)
        task = tomllib.loads(GPT_TOML.read_text())["task"]
        gpt2 = _load("wick_peer_gpt2", ROOT / "bench" / "peers" / "gpt2.py")
        self.context = task["context"]
        self.gpt = gpt2.Gpt(task["layers"], task["heads"], task["width"], self.context,
                            task["vocab"])

    def forward(self, idx):
        return self.gpt.logits(idx).transpose(1, 2)


@dataclass
class Workload:
    name: str
    model: nn.Module
    train: tuple  # tensors: (inputs, targets), or (images,) for the GAN
    valid: tuple | None  # (inputs, targets) of the classification workloads


def workload(a: argparse.Namespace) -> Workload:
    """The model (built right after the seed is set: the same initial weights in every peer)
    and its data, all on the CPU."""
    if a.workload == "transformer":
        make = _make_py()
        net = make.Net()
        g = torch.Generator().manual_seed(0)  # make.py's order: 4000 train, then 1000 valid
        tr, va = make.data(4000, g), make.data(1000, g)
        return Workload("transformer", net, (tr["input"], tr["target"]),
                        (va["input"], va["target"]))
    if a.workload == "gan":
        return Workload("gan", Gan(), (fashion_gan(),), None)
    if a.workload == "gpt":
        net = GptLogits()
        return Workload("gpt", net, gpt_windows(net.context), None)
    net = mlp() if a.workload == "mlp" else cnn()
    return Workload(a.workload, net, fashion("train"), fashion("t10k"))


@torch.no_grad()
def evaluate(net: nn.Module, valid: tuple, a: argparse.Namespace) -> float:
    """valid_accuracy, the same in every peer: eval mode, batches of 1000, the training's
    precision, the share of samples whose highest logit is the target. None for a workload
    without validation data (gpt)."""
    if valid is None:
        return None
    device = torch.device(a.device)
    net.to(device).eval()
    x, y = valid
    correct = 0
    for i in range(0, len(x), 1000):
        with autocast(a):
            logits = net(x[i:i + 1000].to(device))
        correct += (logits.argmax(1).cpu() == y[i:i + 1000]).sum().item()
    return correct / len(x)


# ---- time and memory ----------------------------------------------------------------------

def since_boot() -> float:
    """Seconds since boot: the clock /proc/self/stat's starttime counts in."""
    return time.clock_gettime(time.CLOCK_BOOTTIME)


def process_start() -> float:
    """The process's start in seconds since boot, from /proc/self/stat's starttime (field 22,
    clock ticks since boot): the Python start-up and every import count as set-up."""
    with open("/proc/self/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()  # from field 3 (state) on
    return int(fields[19]) / os.sysconf("SC_CLK_TCK")


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


class StepMeter:
    """The training-step clock every peer calls from inside its loop (or a framework's
    callbacks): begin() at a step's start, end() after its optimizer step.

    samples_per_s covers every step after the first (its warm-up and lazy set-up excluded):
    from the end of step 1 to the end of the last step, so each timed step's batch fetch,
    transfer and framework bookkeeping are inside the window and the framework's set-up and
    tear-down are not. On CUDA the two ends synchronise the device; nothing else does."""

    def __init__(self, a: argparse.Namespace, samples: int):
        self.device, self.bs, self.n = a.device, a.batch_size, samples
        self.per_epoch = math.ceil(samples / a.batch_size)  # the last short batch is kept
        self.total = a.epochs * self.per_epoch
        if a.max_steps:
            self.total = min(self.total, a.max_steps)
        self.steps = self.timed_samples = 0
        self.first_begin = self.t0 = self.t1 = None

    def batch_size(self, step: int) -> int:
        """Samples in step `step` (0-based) of the shuffled epochs."""
        i = step % self.per_epoch
        return self.bs if i < self.per_epoch - 1 else self.n - i * self.bs

    def begin(self) -> None:
        if self.first_begin is None:
            self.first_begin = since_boot()

    def end(self) -> None:
        size = self.batch_size(self.steps)
        self.steps += 1
        if self.steps == 1 or self.steps == self.total:
            self._sync()
        now = time.perf_counter()
        if self.steps == 1:
            self.t0 = now
        else:
            self.timed_samples += size
            self.t1 = now

    @property
    def done(self) -> bool:
        return self.steps >= self.total

    def samples_per_s(self) -> float | None:
        if self.t1 is None:
            return None  # one step: nothing timed
        return self.timed_samples / (self.t1 - self.t0)

    def _sync(self) -> None:
        if self.device == "cuda":
            torch.cuda.synchronize()


# ---- the result ---------------------------------------------------------------------------

def emit(a: argparse.Namespace, framework: str, version: str, meter: StepMeter,
         optimizer: str, valid_accuracy: float | None = None,
         d_loss: float | None = None, g_loss: float | None = None) -> None:
    """The peer's one JSON line on the real stdout."""
    start = process_start()
    rate = meter.samples_per_s()
    result = {
        "framework": framework,
        "version": version,
        "torch": torch.__version__,
        "workload": a.workload,
        "device": a.device,
        "precision": a.precision,
        "threads": torch.get_num_threads(),  # as found at the end: a framework may change it
        "epochs": a.epochs,
        "max_steps": a.max_steps,
        "batch_size": a.batch_size,
        "lr": a.lr,
        "optimizer": optimizer,
        "progress": a.progress,
        "steps": meter.steps,
        "timed_steps": max(meter.steps - 1, 0),
        "samples_per_s": None if rate is None else round(rate, 2),
        "valid_accuracy": valid_accuracy,
        "d_loss": d_loss,
        "g_loss": g_loss,
        "time_to_first_step_s": (None if meter.first_begin is None
                                 else round(meter.first_begin - start, 3)),
        "peak_rss_mb": round(peak_rss_mb(), 1),
        "wall_s": round(since_boot() - start, 3),
    }
    if meter.steps != meter.total:
        print(f"{framework}: trained {meter.steps} steps, expected {meter.total}",
              file=sys.stderr)
    _RESULT.write(json.dumps(result) + "\n")
    _RESULT.flush()
