"""Makes what torchscript.toml trains, as a PyTorch user would: a small transformer written in
Python, scripted and saved (model.pt), and its data saved with torch.save (train.pt, valid.pt).

    python3 samples/torchscript/make.py OUT_DIR

The task: sequences of 12 tokens out of 8; the label says whether token 1 occurs less often
than token 2 (0), as often (1) or more often (2).
"""
import sys

import torch
from torch import nn

LENGTH, VOCAB, CLASSES = 12, 8, 3


class Net(nn.Module):
    def __init__(self, dim: int = 32, heads: int = 4, layers: int = 2):
        super().__init__()
        self.embed = nn.Embedding(VOCAB, dim)
        self.position = nn.Parameter(torch.randn(LENGTH, dim) * 0.02)
        layer = nn.TransformerEncoderLayer(dim, heads, dim_feedforward=64, dropout=0.0,
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, layers)
        self.head = nn.Linear(dim, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.encoder(self.embed(x) + self.position)
        return self.head(h.mean(1))


def data(n: int, generator: torch.Generator):
    x = torch.randint(0, VOCAB, (n, LENGTH), generator=generator)
    y = (x[:, :6].sum(1) > x[:, 6:].sum(1)).long() + (x[:, :6].sum(1) > x[:, 6:].sum(1) + 4).long()
    return {"input": x, "target": y}


def main(out: str, seed: int = 0):
    torch.manual_seed(seed)
    torch.jit.script(Net()).save(f"{out}/model.pt")
    g = torch.Generator().manual_seed(seed)
    torch.save(data(4000, g), f"{out}/train.pt")
    torch.save(data(1000, g), f"{out}/valid.pt")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
