#!/usr/bin/env python3
"""Writes Fashion-MNIST as folders of PNG files: data/fashion_mnist_png/{train,test}/<class>/<n>.png.

One 8-bit grayscale PNG per image, in one subfolder per class named after it (`Coat`,
`Ankle boot`; `T-shirt/top` becomes `T-shirt_top`, a folder name cannot hold a slash),
as Keras' image_dataset_from_directory expects them, for specs/fashion_mnist_png.ron.
Only the standard library (zlib writes the PNG's IDAT); reads Debian's dataset-fashion-mnist.
Each split is written to a temporary folder and renamed into place when whole, so an
interrupted run leaves no half-written split behind and the next run starts it again.
Usage: scripts/make_fashion_pngs.py [SOURCE_DIR [OUT_DIR]]
"""
import os
import shutil
import struct
import sys
import zlib

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from make_fashion_table import CLASSES, read_idx  # noqa: E402  (the same IDX reader and class names)


def chunk(kind, body):
    return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body) & 0xFFFFFFFF)


def png(pixels, h, w):
    """A grayscale PNG: each row prefixed by filter type 0 (none)."""
    rows = b"".join(b"\x00" + pixels[y * w:(y + 1) * w] for y in range(h))
    header = struct.pack(">IIBBBBB", w, h, 8, 0, 0, 0, 0)  # 8 bits, grayscale
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows, 9)) + chunk(b"IEND", b"")


def write(split, source, out):
    (n, h, w), pixels = read_idx(os.path.join(source, f"{split}-images-idx3-ubyte.gz"))
    _, labels = read_idx(os.path.join(source, f"{split}-labels-idx1-ubyte.gz"))
    name = "train" if split == "train" else "test"
    final = os.path.join(out, name)
    if os.path.isdir(final):
        return
    tmp = os.path.join(out, f".{name}.tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    folders = [c.replace("/", "_") for c in CLASSES]
    for folder in folders:
        os.makedirs(os.path.join(tmp, folder))
    for k in range(n):
        with open(os.path.join(tmp, folders[labels[k]], f"{k:05}.png"), "wb") as f:
            f.write(png(pixels[k * h * w:(k + 1) * h * w], h, w))
    os.replace(tmp, final)


def main():
    source = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"
    out = sys.argv[2] if len(sys.argv) > 2 else "data/fashion_mnist_png"
    os.makedirs(out, exist_ok=True)
    for split in ("train", "t10k"):
        write(split, source, out)


if __name__ == "__main__":
    main()
