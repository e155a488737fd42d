"""The Python peer of `make bench` (section python): a plain PyTorch training loop, as a
Python user writes it, over the same Fashion-MNIST data and the same models as
samples/fashion_mnist/{mlp,cnn}.toml (fp32, Adam lr 1e-3, batch 64, shuffled), on one thread.

    python3 bench/python_loop.py --model cnn --steps 200
    python3 bench/python_loop.py --model mlp --epochs 3

Prints one JSON line: samples/s over the timed steps (the first step, warm-up, is not timed).
With --epochs, whole epochs over the 60,000 training images (the last short batch kept, as
wick does), reshuffled each epoch; else --steps batches of one epoch.
"""
import argparse
import gzip
import json
import time

import numpy as np
import torch
from torch import nn
import torch.nn.functional as F

SRC = "/usr/share/datasets/fashion-mnist"


def idx(name, offset):
    with open(f"{SRC}/{name}", "rb") as f:
        return np.frombuffer(gzip.decompress(f.read())[offset:], dtype=np.uint8)


def data(limit):
    # The fashion_mnist task's normalisation: the training set's mean and std.
    x = idx("train-images-idx3-ubyte.gz", 16).reshape(-1, 1, 28, 28)[:limit]
    x = (x.astype(np.float32) / 255 - 0.2860) / 0.3530
    y = idx("train-labels-idx1-ubyte.gz", 8)[:limit].astype(np.int64)
    return torch.from_numpy(x), torch.from_numpy(y)


def model(kind):
    if kind == "mlp":
        return nn.Sequential(nn.Flatten(), nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 128),
                             nn.ReLU(), nn.Linear(128, 10))
    layers, c = [], 1
    for out in (32, 64):
        layers += [nn.Conv2d(c, out, 3, padding=1, bias=False), nn.BatchNorm2d(out), nn.ReLU(),
                   nn.MaxPool2d(2)]
        c = out
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(64 * 7 * 7, 128), nn.ReLU(),
                         nn.Dropout(0.3), nn.Linear(128, 10))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", choices=["mlp", "cnn"], required=True)
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--epochs", type=int, default=0)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=1, help="0: PyTorch's default")
    a = ap.parse_args()
    if a.threads > 0:  # 0: PyTorch's default (the busy-neighbour bench)
        torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    x, y = data(60000 if a.epochs else a.steps * a.batch_size)
    net = model(a.model)
    opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    net.train()
    t0, steps, samples = None, 0, 0
    for epoch in range(max(a.epochs, 1)):
        perm = torch.randperm(len(x))
        batches = (len(x) + a.batch_size - 1) // a.batch_size if a.epochs else a.steps
        for b in range(batches):
            if steps == 1:
                t0 = time.perf_counter()
            i = perm[b * a.batch_size:(b + 1) * a.batch_size]
            opt.zero_grad()
            loss = F.cross_entropy(net(x[i]), y[i])
            loss.backward()
            opt.step()
            if steps >= 1:
                samples += len(i)
            steps += 1
    dt = time.perf_counter() - t0
    print(json.dumps({"model": a.model, "steps": steps, "threads": torch.get_num_threads(),
                      "torch": torch.__version__,
                      "samples_per_s": samples / dt,
                      "final_loss": loss.item()}))


if __name__ == "__main__":
    main()
