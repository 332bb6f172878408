"""Peer benchmark on a GPU: PyTorch eager and torch.compile training a benchmark model.

The same workload as `engine run specs/fashion_mnist_<model>.ron --device ...`: the
model (`--model cnn|residual|vgg|resnet`, written out below layer for layer as in the spec), its
loss, optimizer and batch size (`--batch-size`, default the spec's), on the Fashion-MNIST
training images read from the IDX files, shuffled on the host; each step copies its
batch to the device, as the engine's input pipeline does. Prints one JSON object with
examples/s over the timed steps and the time from process start to the end of the first
training step (for torch.compile, that includes compilation).

How it measures: the loss is read back (`.item()`, a device synchronization) every
`--log-every` steps, as the engine logs it; the window opens after the `--warmup`th step's
read and closes after the `warmup + steps`th, so both frameworks' windows end on a
synchronization.

    python3 bench/torch_gpu.py --model cnn --mode eager --batch-size 512
    python3 bench/torch_gpu.py --model residual --mode compile --batch-size 256
"""

import argparse
import gzip
import json
import os
import struct
import sys
import time

T0 = time.perf_counter()

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import _models  # noqa: E402


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, = struct.unpack(">I", data[:4])
    ndim = magic & 0xFF
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


class Cnn(nn.Module):
    """specs/fashion_mnist_cnn.ron: conv 32 3x3 valid + ReLU, max pool 2, dense 64 ReLU, dense 10."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 32, 3)
        self.hidden = nn.Linear(32 * 13 * 13, 64)
        self.logits = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        return self.logits(F.relu(self.hidden(x.flatten(1))))

    def penalty(self):
        return 0.0


class Residual(nn.Module):
    """specs/fashion_mnist_residual.ron: stem, a two-conv residual block, pool, dense 64
    (L2 1e-4 on its kernel), dropout 0.2, dense 10."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Conv2d(1, 16, 3, padding=1)
        self.conv1 = nn.Conv2d(16, 16, 3, padding=1)
        self.conv2 = nn.Conv2d(16, 16, 3, padding=1)
        self.hidden = nn.Linear(16 * 14 * 14, 64)
        self.dropout = nn.Dropout(0.2)
        self.logits = nn.Linear(64, 10)

    def forward(self, x):
        stem = F.relu(self.stem(x))
        block = self.conv2(F.relu(self.conv1(stem)))
        x = F.max_pool2d(F.relu(stem + block), 2)
        return self.logits(self.dropout(F.relu(self.hidden(x.flatten(1)))))

    def penalty(self):
        # Keras' L2(l) adds l * sum(w^2) to the loss.
        return 1e-4 * self.hidden.weight.square().sum()


class Vgg(nn.Module):
    """specs/fashion_mnist_vgg.ron: two blocks of two 3x3 SAME convolutions (64, then 128)
    with ReLU, each followed by 2x2 max pooling; dense 256 ReLU, dense 10."""

    def __init__(self):
        super().__init__()
        self.convs = nn.ModuleList([nn.Conv2d(1, 64, 3, padding=1), nn.Conv2d(64, 64, 3, padding=1),
                                    nn.Conv2d(64, 128, 3, padding=1), nn.Conv2d(128, 128, 3, padding=1)])
        self.hidden = nn.Linear(128 * 7 * 7, 256)
        self.logits = nn.Linear(256, 10)

    def forward(self, x):
        for i, conv in enumerate(self.convs):
            x = F.relu(conv(x))
            if i % 2 == 1:
                x = F.max_pool2d(x, 2)
        return self.logits(F.relu(self.hidden(x.flatten(1))))

    def penalty(self):
        return 0.0


def conv_bn(cin, cout, stride=1, kernel=3):
    # Keras' BatchNormalization: momentum 0.99 (PyTorch's 0.01), epsilon 1e-3. Keras' SAME
    # padding of a stride-2 convolution on an even size pads only after; padding=1 pads
    # both sides: the same shapes and work, shifted by one pixel.
    return nn.Sequential(nn.Conv2d(cin, cout, kernel, stride=stride, padding=kernel // 2, bias=False),
                         nn.BatchNorm2d(cout, eps=1e-3, momentum=0.01))


class ResNet(nn.Module):
    """specs/fashion_mnist_resnet.ron: bias-free convolutions with batch normalization, a
    stem, a strided stage with one residual block, a strided block with a 1x1 projection
    shortcut, global average pooling, dense 10."""

    def __init__(self):
        super().__init__()
        self.stem = conv_bn(1, 32)
        self.down1 = conv_bn(32, 32, stride=2)
        self.block1 = nn.ModuleList([conv_bn(32, 32), conv_bn(32, 32)])
        self.block2 = nn.ModuleList([conv_bn(32, 64, stride=2), conv_bn(64, 64)])
        self.shortcut = conv_bn(32, 64, stride=2, kernel=1)
        self.logits = nn.Linear(64, 10)

    def forward(self, x):
        x = F.relu(self.down1(F.relu(self.stem(x))))
        x = F.relu(x + self.block1[1](F.relu(self.block1[0](x))))
        x = F.relu(self.shortcut(x) + self.block2[1](F.relu(self.block2[0](x))))
        return self.logits(x.mean(dim=(2, 3)))

    def penalty(self):
        return 0.0


def cosine_adam(params):
    # The spec's CosineDecay(0.003, 4690) changes the rate per step; a step's rate is one
    # scalar on the host either way, so a constant rate times the same work.
    return torch.optim.Adam(params, lr=3e-3)


MODELS = {"cnn": (Cnn, lambda p: torch.optim.SGD(p, lr=0.05)),
          "residual": (Residual, lambda p: torch.optim.Adam(p, lr=1e-3)),
          "vgg": (Vgg, lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)),
          "resnet": (ResNet, cosine_adam)}


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", choices=sorted(MODELS), default="cnn")
    p.add_argument("--mode", choices=["eager", "compile"], default="eager")
    p.add_argument("--batch-size", type=int, default=None, help="default: the spec's")
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--warmup", type=int, default=100)
    p.add_argument("--log-every", type=int, default=100)
    p.add_argument("--device", default="cuda")
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    a = p.parse_args()
    if a.warmup % a.log_every or a.steps % a.log_every:
        p.error("--warmup and --steps must be multiples of --log-every")
    batch = a.batch_size or _models.spec_facts(_models.spec_path(a.model))["batch_size"]

    torch.manual_seed(42)
    dev = torch.device(a.device)
    images = torch.from_numpy(read_idx(os.path.join(a.data, "train-images-idx3-ubyte.gz")).copy())
    labels = torch.from_numpy(read_idx(os.path.join(a.data, "train-labels-idx1-ubyte.gz")).astype(np.int64))
    images = (images.float() / 255.0).unsqueeze(1).pin_memory()
    labels = labels.pin_memory()
    make, optimizer = MODELS[a.model]
    model = make().to(dev)
    opt = optimizer(model.parameters())

    def step(x, y):
        opt.zero_grad(set_to_none=True)
        loss = F.cross_entropy(model(x), y) + model.penalty()
        loss.backward()
        opt.step()
        return loss

    if a.mode == "compile":
        step = torch.compile(step)
    n = images.shape[0]
    order = torch.randperm(n)
    cursor = 0
    total = a.warmup + a.steps
    first_step_s = window_start = None
    for i in range(total + 1):
        if cursor + batch > n:
            order, cursor = torch.randperm(n), 0
        idx = order[cursor:cursor + batch]
        cursor += batch
        x = images[idx].to(dev, non_blocking=True)
        y = labels[idx].to(dev, non_blocking=True)
        loss = step(x, y)
        if i == 0:
            loss.item()
            first_step_s = time.perf_counter() - T0
        if i % a.log_every == 0:
            value = loss.item()
            if i == a.warmup:
                window_start = time.perf_counter()
            elif i == total:
                elapsed = time.perf_counter() - window_start
    print(json.dumps({
        "framework": f"PyTorch {torch.__version__} {a.mode}",
        "model": a.model, "batch_size": batch, "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else a.device,
        "steps": a.steps, "warmup": a.warmup,
        "examples_per_s": a.steps * batch / elapsed,
        "wall_ms_per_step": 1e3 * elapsed / a.steps,
        "process_start_to_first_step_s": first_step_s,
        "final_loss": value,
    }))


if __name__ == "__main__":
    main()
