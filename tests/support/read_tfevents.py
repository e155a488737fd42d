#!/usr/bin/env python3
"""An event-file reader independent of wick's writer (tests of the tensorboard plugin).

Reads TFRecords (checking both masked CRC-32Cs, computed here bit by bit), decodes the Event,
Summary, Value, HistogramProto, SummaryMetadata and TensorProto fields TensorBoard reads, and
prints the events as JSON. When the tensorboard package is installed, its own reader
(EventFileLoader) reads the file too and must yield the same events.

usage: read_tfevents.py FILE
"""
import json
import struct
import sys


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data):
    c = crc32c(data)
    return (((c >> 15) | (c << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def records(blob):
    pos = 0
    while pos < len(blob):
        if len(blob) - pos < 12:
            raise ValueError(f"truncated record header at byte {pos}")
        header = blob[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (hcrc,) = struct.unpack("<I", blob[pos + 8:pos + 12])
        if hcrc != masked(header):
            raise ValueError(f"length CRC mismatch at byte {pos}")
        data = blob[pos + 12:pos + 12 + length]
        if len(data) != length or len(blob) < pos + 16 + length:
            raise ValueError(f"truncated record at byte {pos}")
        (dcrc,) = struct.unpack("<I", blob[pos + 12 + length:pos + 16 + length])
        if dcrc != masked(data):
            raise ValueError(f"data CRC mismatch at byte {pos}")
        yield data
        pos += 16 + length


def varint(buf, pos):
    result = shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7


def fields(buf):
    """(field number, wire type, value) of a message; length-delimited values as bytes."""
    pos = 0
    while pos < len(buf):
        key, pos = varint(buf, pos)
        num, wire = key >> 3, key & 7
        if wire == 0:
            val, pos = varint(buf, pos)
        elif wire == 1:
            val = buf[pos:pos + 8]
            pos += 8
        elif wire == 2:
            n, pos = varint(buf, pos)
            val = buf[pos:pos + n]
            pos += n
        elif wire == 5:
            val = buf[pos:pos + 4]
            pos += 4
        else:
            raise ValueError(f"wire type {wire}")
        yield num, wire, val


def doubles(raw):
    return list(struct.unpack(f"<{len(raw) // 8}d", raw))


def histogram(buf):
    h = {"bucket_limit": [], "bucket": []}
    names = {1: "min", 2: "max", 3: "num", 4: "sum", 5: "sum_squares"}
    for num, wire, val in fields(buf):
        if num in names:
            h[names[num]] = struct.unpack("<d", val)[0]
        elif num == 6:
            h["bucket_limit"] += doubles(val) if wire == 2 else [struct.unpack("<d", val)[0]]
        elif num == 7:
            h["bucket"] += doubles(val) if wire == 2 else [struct.unpack("<d", val)[0]]
    return h


def value(buf):
    v = {}
    for num, _, val in fields(buf):
        if num == 1:
            v["tag"] = val.decode()
        elif num == 2:
            v["simple_value"] = struct.unpack("<f", val)[0]
        elif num == 5:
            v["histo"] = histogram(val)
        elif num == 9:
            for n2, _, pd in fields(val):
                if n2 == 1:
                    for n3, _, name in fields(pd):
                        if n3 == 1:
                            v["plugin"] = name.decode()
        elif num == 8:
            strings = [s.decode() for n2, _, s in fields(val) if n2 == 8]
            dtype = [d for n2, _, d in fields(val) if n2 == 1]
            v["tensor_dtype"] = dtype[0] if dtype else None
            v["text"] = strings
    return v


def event(buf):
    e = {"values": []}
    for num, _, val in fields(buf):
        if num == 1:
            e["wall_time"] = struct.unpack("<d", val)[0]
        elif num == 2:
            e["step"] = val
        elif num == 3:
            e["file_version"] = val.decode()
        elif num == 5:
            e["values"] += [value(v) for n2, _, v in fields(val) if n2 == 1]
    return e


def main():
    with open(sys.argv[1], "rb") as f:
        events = [event(r) for r in records(f.read())]
    try:  # TensorBoard's own reader, where installed (not a Debian package)
        from tensorboard.backend.event_processing import event_file_loader
        theirs = list(event_file_loader.LegacyEventFileLoader(sys.argv[1]).Load())
        if len(theirs) != len(events):
            raise SystemExit(f"tensorboard read {len(theirs)} events, this reader {len(events)}")
        for a, b in zip(theirs, events):
            if a.step != b.get("step", 0):
                raise SystemExit("tensorboard disagrees on a step")
        print("tensorboard's reader agrees", file=sys.stderr)
    except ImportError:
        pass
    json.dump(events, sys.stdout)


if __name__ == "__main__":
    main()
