#!/usr/bin/env python3
"""Writes Fashion-MNIST as a table: data/fashion_mnist_table/{train,test}.csv.

Each 28x28 image becomes 49 columns p0..p48, the mean of each 4x4 block of pixels
(0..255), and a `label` column holding the class's name (`Coat`, `Sandal`, ...), so that
specs/fashion_mnist_table.ron trains a Sequential model on a CSV with string labels, as a
Keras user would. Only the standard library; reads Debian's dataset-fashion-mnist.
Usage: scripts/make_fashion_table.py [SOURCE_DIR [OUT_DIR]]
"""
import gzip
import os
import struct
import sys

CLASSES = ["T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
           "Sandal", "Shirt", "Sneaker", "Bag", "Ankle boot"]


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = struct.unpack(">" + "I" * dims, data[4:4 + 4 * dims])
    return shape, data[4 + 4 * dims:]


def write(split, source, out):
    (n, h, w), pixels = read_idx(os.path.join(source, f"{split}-images-idx3-ubyte.gz"))
    _, labels = read_idx(os.path.join(source, f"{split}-labels-idx1-ubyte.gz"))
    name = "train" if split == "train" else "test"
    tmp = os.path.join(out, f".{name}.csv.tmp")
    with open(tmp, "w") as f:
        f.write(",".join(f"p{i}" for i in range(49)) + ",label\n")
        for k in range(n):
            image = pixels[k * h * w:(k + 1) * h * w]
            cells = []
            for by in range(7):
                for bx in range(7):
                    total = sum(image[(by * 4 + y) * w + bx * 4 + x] for y in range(4) for x in range(4))
                    cells.append(f"{total / 16:g}")
            label = CLASSES[labels[k]]
            f.write(",".join(cells) + (f',"{label}"' if "," in label else f",{label}") + "\n")
    os.replace(tmp, os.path.join(out, f"{name}.csv"))


def main():
    source = sys.argv[1] if len(sys.argv) > 1 else "/usr/share/datasets/fashion-mnist"
    out = sys.argv[2] if len(sys.argv) > 2 else "data/fashion_mnist_table"
    os.makedirs(out, exist_ok=True)
    for split in ("train", "t10k"):
        write(split, source, out)


if __name__ == "__main__":
    main()
