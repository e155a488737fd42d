"""Peer "plain": a plain PyTorch 2.x training loop, as a Python user writes it: a DataLoader
over the tensors (shuffled each epoch, the last short batch kept), Adam, forward, backward,
step. Prints one JSON line (see common.py).

    python bench/peers/plain.py --workload mlp --epochs 1
"""
import common  # first: moves stdout aside for the result line

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def loader(a, w, device):
    return DataLoader(TensorDataset(*w.train), batch_size=a.batch_size, shuffle=True,
                      pin_memory=device.type == "cuda")


def train_classifier(a, w, device, meter):
    net = w.model.to(device)
    opt = torch.optim.Adam(net.parameters(), lr=a.lr)
    batches = loader(a, w, device)
    for _ in range(a.epochs):
        net.train()
        for x, y in batches:
            meter.begin()
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            with common.autocast(a):
                loss = F.cross_entropy(net(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            meter.end()
            if meter.done:
                return


def train_gan(a, w, device, meter):
    gan = w.model.to(device)
    opt_d, opt_g = common.gan_optimizers(gan, a.lr)
    batches = loader(a, w, device)
    losses = None
    for _ in range(a.epochs):
        gan.train()
        for (real,) in batches:
            meter.begin()
            real = real.to(device, non_blocking=True)
            losses = common.gan_step(gan, real, opt_d, opt_g, lambda loss: loss.backward(),
                                     common.autocast(a))
            meter.end()
            if meter.done:
                return losses
    return losses


def main():
    a = common.parse_args(__doc__)
    device = common.setup(a)
    w = common.workload(a)
    meter = common.StepMeter(a, len(w.train[0]))
    if a.workload == "gan":
        d_loss, g_loss = train_gan(a, w, device, meter)
        common.emit(a, "pytorch", torch.__version__, meter, "torch.optim.Adam",
                    d_loss=d_loss.item(), g_loss=g_loss.item())
    else:
        train_classifier(a, w, device, meter)
        common.emit(a, "pytorch", torch.__version__, meter, "torch.optim.Adam",
                    valid_accuracy=common.evaluate(w.model, w.valid, a))


if __name__ == "__main__":
    main()
