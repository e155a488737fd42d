"""Peer "lightning": PyTorch Lightning 2.x, a LightningModule trained by lightning.Trainer.
The GAN uses Lightning's manual optimization (two optimizers). Prints one JSON line (see
common.py).

--progress on: the Trainer as a user leaves it (progress bar, the default logger, the model
summary, a checkpoint per epoch), the loss logged with self.log as a user writes it.
--progress off: enable_progress_bar=False, logger=False, enable_model_summary=False,
enable_checkpointing=False, and no self.log (nothing would read it).
The Trainer's run files (logs, checkpoints) go to a temporary folder, removed at the end.

    python bench/peers/lightning_peer.py --workload cnn --epochs 1 --progress off
"""
import common  # first: moves stdout aside for the result line

import tempfile

import lightning as L
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Classifier(L.LightningModule):
    def __init__(self, net, lr, log_loss):
        super().__init__()
        self.net, self.lr, self.log_loss = net, lr, log_loss

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        if self.log_loss:
            self.log("train_loss", loss, prog_bar=True)
        return loss

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=self.lr)


class GanModule(L.LightningModule):
    def __init__(self, gan, lr, log_loss):
        super().__init__()
        self.gan, self.lr, self.log_loss = gan, lr, log_loss
        self.automatic_optimization = False  # two optimizers, stepped by hand
        self.losses = None

    def training_step(self, batch, batch_idx):
        (real,) = batch
        opt_d, opt_g = self.optimizers()
        # Lightning's precision plugin already autocasts the whole training_step.
        self.losses = common.gan_step(self.gan, real, opt_d, opt_g, self.manual_backward,
                                      common.contextlib.nullcontext())
        if self.log_loss:
            self.log_dict({"d_loss": self.losses[0], "g_loss": self.losses[1]}, prog_bar=True)

    def configure_optimizers(self):
        return list(common.gan_optimizers(self.gan, self.lr))


class Clock(L.Callback):
    """Feeds the step meter from inside Lightning's loop; stops the fit at the step budget
    (Lightning's max_steps counts every optimizer's steps: two per GAN batch)."""

    def __init__(self, meter):
        self.meter = meter

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        self.meter.begin()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        self.meter.end()
        if self.meter.done:
            trainer.should_stop = True


def main():
    a = common.parse_args(__doc__)
    device = common.setup(a)
    w = common.workload(a)
    meter = common.StepMeter(a, len(w.train[0]))
    on = a.progress == "on"
    module = (GanModule(w.model, a.lr, on) if a.workload == "gan"
              else Classifier(w.model, a.lr, on))
    batches = DataLoader(TensorDataset(*w.train), batch_size=a.batch_size, shuffle=True,
                         pin_memory=device.type == "cuda")
    with tempfile.TemporaryDirectory(prefix="wick-peer-lightning-") as runs:
        quiet = {} if on else dict(enable_progress_bar=False, logger=False,
                                   enable_model_summary=False, enable_checkpointing=False)
        trainer = L.Trainer(accelerator=a.device, devices=1, max_epochs=a.epochs,
                            precision="bf16-mixed" if a.precision == "bf16" else "32-true",
                            default_root_dir=runs, callbacks=[Clock(meter)], **quiet)
        trainer.fit(module, train_dataloaders=batches)
    if a.workload == "gan":
        d_loss, g_loss = module.losses
        common.emit(a, "lightning", L.__version__, meter, "torch.optim.Adam",
                    d_loss=d_loss.item(), g_loss=g_loss.item())
    else:
        common.emit(a, "lightning", L.__version__, meter, "torch.optim.Adam",
                    valid_accuracy=common.evaluate(w.model, w.valid, a))


if __name__ == "__main__":
    main()
