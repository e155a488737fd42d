#!/usr/bin/env python3
"""Byte-level tokenizer for the gpt sample: text files -> train.bin and valid.bin.

Every byte of the input is one token (its value, 0-255), written as a little-endian uint16:
nanoGPT's token-file layout, which the gpt task reads (vocab = 256 suffices). The files are
joined in the order given; the last --valid-fraction of the bytes (default 0.1) go to
valid.bin, the rest to train.bin.

Usage:
    python3 samples/gpt/tokenize.py /usr/share/common-licenses/GPL-3
    python3 samples/gpt/tokenize.py a.txt b.txt --out /tmp/data --valid-fraction 0.05

--out defaults to samples/gpt/data (beside this script), where gpt.toml looks for the files.
Python 3 standard library only.
"""

import argparse
import os


def write_tokens(path, data):
    # A byte b is the uint16 b little-endian: b, then a zero byte.
    out = bytearray(2 * len(data))
    out[0::2] = data
    with open(path, "wb") as f:
        f.write(out)
    return len(data)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description="Byte-level token files (uint16) from text files.")
    ap.add_argument("inputs", nargs="+", help="text files, joined in this order")
    ap.add_argument("--out", default=os.path.join(here, "data"),
                    help="folder for train.bin and valid.bin (default: %(default)s)")
    ap.add_argument("--valid-fraction", type=float, default=0.1,
                    help="the last fraction of the bytes that go to valid.bin (default: 0.1)")
    args = ap.parse_args()
    if not 0 <= args.valid_fraction < 1:
        ap.error("--valid-fraction must be in [0, 1)")

    data = bytearray()
    for name in args.inputs:
        with open(name, "rb") as f:
            data += f.read()
    if not data:
        ap.error("the inputs hold no bytes")
    n_valid = int(len(data) * args.valid_fraction)
    split = len(data) - n_valid

    os.makedirs(args.out, exist_ok=True)
    train = write_tokens(os.path.join(args.out, "train.bin"), data[:split])
    valid = write_tokens(os.path.join(args.out, "valid.bin"), data[split:])
    print(f"{len(args.inputs)} file(s), {len(data)} bytes: train.bin {train} tokens, "
          f"valid.bin {valid} tokens, vocabulary 256 (bytes), in {args.out}")


if __name__ == "__main__":
    main()
