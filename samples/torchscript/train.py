"""The training of torchscript.toml as a plain PyTorch loop, for comparison with wick:

    python3 samples/torchscript/train.py DIR [EPOCHS]

trains DIR/model.pt on DIR/train.pt (Adam 1e-3, batch 64, shuffled) and prints the accuracy
on DIR/valid.pt as JSON. `accuracy.py` is its evaluation alone, for an exported model.
"""
import json
import sys

import torch
import torch.nn.functional as F


def accuracy(model, data) -> float:
    model.eval()
    with torch.no_grad():
        return (model(data["input"]).argmax(1) == data["target"]).float().mean().item()


def main(d: str, epochs: int, batch: int = 64, lr: float = 1e-3, seed: int = 0):
    torch.manual_seed(seed)
    model = torch.jit.load(f"{d}/model.pt")
    train, valid = torch.load(f"{d}/train.pt"), torch.load(f"{d}/valid.pt")
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(epochs):
        model.train()
        for idx in torch.randperm(len(train["target"])).split(batch):
            loss = F.cross_entropy(model(train["input"][idx]), train["target"][idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
    print(json.dumps({"valid_accuracy": accuracy(model, valid)}))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 12)
