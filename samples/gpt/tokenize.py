#!/usr/bin/env python3
"""Byte-level tokenizer for the gpt sample: text files -> train.bin and valid.bin.

Every byte of the input is one token (its value, 0-255), written as a little-endian uint16:
nanoGPT's token-file layout, which the gpt task reads (vocab = 256 suffices). The files are
joined in the order given; the last --valid-fraction of the bytes (default 0.1) go to
valid.bin (none with 0), the rest to train.bin. Each file is written anew and renamed into
place, so a fit that is reading the old one goes on reading it.

Usage:
    python3 samples/gpt/tokenize.py /usr/share/common-licenses/GPL-3
    python3 samples/gpt/tokenize.py a.txt b.txt --out /tmp/data --valid-fraction 0.05

--out defaults to samples/gpt/data (beside this script), where gpt.toml looks for the files.
Python 3 standard library only.
"""

import argparse
import os
import sys


def write_tokens(path, data):
    # A byte b is the uint16 b little-endian: b, then a zero byte.
    out = bytearray(2 * len(data))
    out[0::2] = data
    # A new file renamed over the old one: a fit that has the old one mapped keeps reading it,
    # where rewriting it in place would cut it short under the fit (a bus error).
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        with open(tmp, "wb") as f:
            f.write(out)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
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
        try:
            with open(name, "rb") as f:
                data += f.read()
        except OSError as e:
            sys.exit(f"tokenize.py: cannot read {name}: {e.strerror}")
    if not data:
        ap.error("the inputs hold no bytes")
    n_valid = int(len(data) * args.valid_fraction)
    split = len(data) - n_valid

    valid_path = os.path.join(args.out, "valid.bin")
    try:
        os.makedirs(args.out, exist_ok=True)
        train = write_tokens(os.path.join(args.out, "train.bin"), data[:split])
        stale = n_valid == 0 and os.path.exists(valid_path)
        if n_valid > 0:
            write_tokens(valid_path, data[split:])
        elif stale:
            os.remove(valid_path)  # another text's: validating on it would mislead
    except OSError as e:
        sys.exit(f"tokenize.py: cannot write in {args.out}: {e.strerror}")
    print(f"{len(args.inputs)} file(s), {len(data)} bytes: train.bin {train} tokens, "
          + (f"valid.bin {n_valid} tokens, " if n_valid > 0 else "no valid.bin, ")
          + f"vocabulary 256 (bytes), in {args.out}")
    if n_valid == 0:
        print(f"tokenize.py: no bytes for valid.bin (--valid-fraction {args.valid_fraction})"
              + ("; the old valid.bin was removed" if stale else "")
              + "; set [task] valid_data = \"\" to train without validation", file=sys.stderr)
    # The gpt task needs context + 1 tokens in a file.
    for name, n in (("train.bin", train), ("valid.bin", n_valid)):
        if 0 < n <= 64:
            print(f"tokenize.py: warning: {name} holds {n} tokens, too few for gpt.toml's "
                  "context of 64 (the gpt task needs context + 1)", file=sys.stderr)

if __name__ == "__main__":
    main()
