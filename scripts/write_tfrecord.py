"""Writes TFRecord files of tf.train.Example with the `tfrecord` package, for the input
pipeline's tests: the Rust reader is checked against a real writer, not against itself.

Usage: write_tfrecord.py OUT_DIR

Writes into OUT_DIR:
  train-0.tfrecord, train-1.tfrecord, train-2.tfrecord   examples 0..9, 10..19, 20..24
  expected.json   every example's values, in file order (what the reader must return)
  truncated.tfrecord   train-0 with its last 3 bytes cut off (the last record is truncated)
  badcrc.tfrecord      train-0 with one byte of record 4's data flipped
"""

import json
import os
import sys

import numpy as np
from tfrecord import TFRecordWriter

COLORS = ["red", "green", "blue"]


def example(i):
    x = [float(i), float(i) / 2.0, -float(i), 0.25]
    img = bytes([(i * 7 + k) % 256 for k in range(6)])
    return {
        "x": (np.array(x, dtype=np.float32), "float"),
        "y": (i % 3, "int"),
        "big": (np.array([-(2**40) - i, 2**40 + i], dtype=np.int64), "int"),
        "color": (COLORS[i % 3].encode(), "byte"),
        "img": (img, "byte"),
    }, {
        "x": x,
        "y": i % 3,
        "big": [-(2**40) - i, 2**40 + i],
        "color": i % 3,
        "img": list(img),
    }


def write(path, ids):
    writer = TFRecordWriter(path)
    expected = []
    for i in ids:
        datum, values = example(i)
        writer.write(datum)
        expected.append(values)
    writer.close()
    return expected


def record_offsets(data):
    offsets, pos = [], 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 8], "little")
        offsets.append((pos, length))
        pos += 12 + length + 4
    return offsets


def main():
    out = sys.argv[1]
    os.makedirs(out, exist_ok=True)
    expected = []
    for name, ids in [("train-0", range(0, 10)), ("train-1", range(10, 20)), ("train-2", range(20, 25))]:
        expected += write(os.path.join(out, name + ".tfrecord"), ids)
    with open(os.path.join(out, "expected.json"), "w") as f:
        json.dump(expected, f)

    with open(os.path.join(out, "train-0.tfrecord"), "rb") as f:
        data = f.read()
    with open(os.path.join(out, "truncated.tfrecord"), "wb") as f:
        f.write(data[:-3])
    offset, _ = record_offsets(data)[4]
    corrupt = bytearray(data)
    corrupt[offset + 12 + 2] ^= 0x40
    with open(os.path.join(out, "badcrc.tfrecord"), "wb") as f:
        f.write(bytes(corrupt))


if __name__ == "__main__":
    main()
