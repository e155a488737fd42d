"""Peer "hf": the Hugging Face transformers.Trainer with TrainingArguments, training a torch
nn.Module whose forward returns a ModelOutput with its loss. Classification workloads only:
the Trainer trains one model under one loss, and the GAN's two alternating optimizers are not
something it does (refused, exit 3). Prints one JSON line (see common.py).

Set as a user sets it for a benchmark: report_to="none", save_strategy="no", no evaluation;
the workload's optimizer and schedule: the Trainer's default optimizer (fused AdamW) with
weight_decay 0, which is Adam's update, a constant learning rate (the default decays it
linearly) and no gradient clipping (the default clips at norm 1; the other peers do not).
--progress on: the Trainer's default progress bar and logging (every 500 steps);
--progress off: disable_tqdm=True, logging_strategy="no".
Its output_dir is a temporary folder, removed at the end.

    python bench/peers/hf_peer.py --workload transformer --epochs 1
"""
import common  # first: moves stdout aside for the result line

import tempfile

import torch
import torch.nn.functional as F
import transformers
from torch import nn
from torch.utils.data import Dataset
from transformers.modeling_outputs import SequenceClassifierOutput


class WithLoss(nn.Module):
    """The workload's network as a Trainer model: named inputs, its loss in the output."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, input, labels=None):
        logits = self.net(input)
        loss = None if labels is None else F.cross_entropy(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits)


class Samples(Dataset):
    """The training tensors as the Trainer's data collator expects them: a dict per sample."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input": self.x[i], "labels": self.y[i]}


class Clock(transformers.TrainerCallback):
    """Feeds the step meter from inside the Trainer's loop."""

    def __init__(self, meter):
        self.meter = meter

    def on_step_begin(self, args, state, control, **kwargs):
        self.meter.begin()

    def on_step_end(self, args, state, control, **kwargs):
        self.meter.end()


def arguments(a, out_dir, steps):
    on = a.progress == "on"
    return transformers.TrainingArguments(
        output_dir=out_dir,
        per_device_train_batch_size=a.batch_size,
        num_train_epochs=a.epochs,
        # The step budget in all, as the other peers count it: the Trainer's own max_steps
        # would otherwise run past --epochs when it is the larger.
        max_steps=steps,
        learning_rate=a.lr,
        weight_decay=0.0,
        lr_scheduler_type="constant",
        max_grad_norm=0.0,
        seed=a.seed,
        bf16=a.precision == "bf16",
        use_cpu=a.device == "cpu",
        report_to="none",
        save_strategy="no",
        eval_strategy="no",
        disable_tqdm=not on,
        logging_strategy="steps" if on else "no",
    )


def main():
    a = common.parse_args(__doc__)
    if a.workload == "gan":
        common.refuse("hf_peer", "the Hugging Face Trainer trains one model under one loss; "
                      "the GAN's two models and alternating optimizers are not something it "
                      "does, so there is no hf row for the gan workload")
    common.setup(a)
    w = common.workload(a)
    meter = common.StepMeter(a, len(w.train[0]))
    with tempfile.TemporaryDirectory(prefix="wick-peer-hf-") as out_dir:
        args = arguments(a, out_dir, meter.total)
        trainer = transformers.Trainer(model=WithLoss(w.model), args=args,
                                       train_dataset=Samples(*w.train), callbacks=[Clock(meter)])
        trainer.train()
        optim = getattr(args.optim, "value", args.optim)  # an enum in TrainingArguments
        inner = getattr(trainer.optimizer, "optimizer", trainer.optimizer)  # accelerate's wrapper
        optimizer = f"torch.optim.{type(inner).__name__} ({optim}, weight_decay 0)"
    common.emit(a, "transformers", transformers.__version__, meter, optimizer,
                valid_accuracy=common.evaluate(w.model, w.valid, a))


if __name__ == "__main__":
    main()
