"""The accuracy of a TorchScript model (e.g. one `wick export` wrote) on a data file:

    python3 samples/torchscript/accuracy.py MODEL.pt DATA.pt
"""
import json
import sys

import torch

from train import accuracy

if __name__ == "__main__":
    print(json.dumps({"accuracy": accuracy(torch.jit.load(sys.argv[1]), torch.load(sys.argv[2]))}))
