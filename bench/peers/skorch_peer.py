"""Peer "skorch": skorch's NeuralNetClassifier (the scikit-learn interface to PyTorch) fit
on numpy arrays. The MLP only: skorch is what a scikit-learn user picks for a small
classifier on tabular-like data; the other workloads are refused (exit 3). Prints one JSON
line (see common.py).

Set for the workload: CrossEntropyLoss on the logits (skorch's default NLLLoss wants
probabilities), Adam, batch 64, shuffled training batches (skorch's default does not
shuffle), and train_split=None: all 60,000 images train (the default holds 20% out for
validation each epoch). --progress on: skorch's default per-epoch table (verbose=1);
off: verbose=0.

    python bench/peers/skorch_peer.py --workload mlp --epochs 1
"""
import common  # first: moves stdout aside for the result line

import skorch
import torch
from torch import nn


class Classifier(skorch.NeuralNetClassifier):
    """bf16: skorch has no autocast switch of its own, so the forward and the loss run
    under torch.autocast, as in a hand-written loop; the backward stays outside."""

    def __init__(self, *args, amp=None, **kwargs):
        super().__init__(*args, **kwargs)
        self.amp = amp

    def infer(self, x, **fit_params):
        with self.amp():
            return super().infer(x, **fit_params)

    def get_loss(self, y_pred, y_true, *args, **kwargs):
        with self.amp():
            return super().get_loss(y_pred, y_true, *args, **kwargs)


class Clock(skorch.callbacks.Callback):
    """Feeds the step meter from inside skorch's loop. skorch has no step budget; at
    --max-steps it raises KeyboardInterrupt, which fit() takes as the user's stop and ends
    training cleanly (on_train_end runs, the net stays fitted)."""

    def __init__(self, meter):
        self.meter = meter

    def on_batch_begin(self, net, batch=None, training=None, **kwargs):
        if training:
            self.meter.begin()

    def on_batch_end(self, net, batch=None, training=None, **kwargs):
        if training:
            self.meter.end()
            if self.meter.done:
                raise KeyboardInterrupt


def main():
    a = common.parse_args(__doc__)
    if a.workload != "mlp":
        common.refuse("skorch_peer", f"skorch's NeuralNetClassifier is measured on the MLP "
                      f"only; no skorch row for the {a.workload} workload")
    common.setup(a)
    w = common.workload(a)
    meter = common.StepMeter(a, len(w.train[0]))
    net = Classifier(
        w.model,
        amp=lambda: common.autocast(a),
        criterion=nn.CrossEntropyLoss,
        optimizer=torch.optim.Adam,
        lr=a.lr,
        max_epochs=a.epochs,
        batch_size=a.batch_size,
        iterator_train__shuffle=True,
        train_split=None,
        device=a.device,
        callbacks=[Clock(meter)],
        verbose=1 if a.progress == "on" else 0,
    )
    x, y = w.train
    net.fit(x.numpy(), y.numpy())
    common.emit(a, "skorch", skorch.__version__, meter, "torch.optim.Adam",
                valid_accuracy=common.evaluate(net.module_, w.valid, a))


if __name__ == "__main__":
    main()
