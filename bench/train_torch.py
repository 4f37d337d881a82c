"""The PyTorch side of the training benchmark (bench/train.ts): ResNet-18 (CIFAR stem, full width)
trained with plain torch: the torch.nn model of test/helpers/zoo_reference.py (the same
architecture as stitchlab's createModel("resnet18"), imported from there, not copied),
torch.optim.SGD and F.cross_entropy, each step drawing its batch from synthetic uint8 images in
memory.

The data pipeline is a DataLoader-free equivalent of torchvision's RandomCrop(32, padding=4) +
RandomHorizontalFlip() + Normalize() done with torch ops on the whole uint8 batch (a shuffled
index_select, a zero pad, one advanced-indexing gather for crop and flip, then float, /255,
-mean, /std): what a PyTorch user would write for an in-memory dataset, and what
data/loader.ts does. A DataLoader with per-image PIL transforms and worker processes would
measure something else (and compete for the same cores).

Answers one JSON command per stdin line: {"op": "step"} -> {"ms": ...}, after a greeting
{"threads": n, "torch": version}; bench/train.ts alternates its steps with ours.
"""

import argparse
import importlib.util
import json
import os
import sys
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
CIFAR10_MEAN = [0.4914, 0.4822, 0.4465]
CIFAR10_STD = [0.247, 0.2435, 0.2616]


def load_zoo_reference():
    path = os.path.join(HERE, "..", "test", "helpers", "zoo_reference.py")
    spec = importlib.util.spec_from_file_location("zoo_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Loader:
    """Shuffled, augmented, normalised batches from in-memory uint8 images, epoch after epoch."""

    def __init__(self, images, labels, batch, padding=4):
        self.images, self.labels, self.batch, self.padding = images, labels, batch, padding
        self.mean = torch.tensor(CIFAR10_MEAN).reshape(1, 3, 1, 1)
        self.std = torch.tensor(CIFAR10_STD).reshape(1, 3, 1, 1)
        self.order = torch.empty(0, dtype=torch.int64)
        self.pos = 0

    def next(self):
        n = self.images.shape[0]
        if self.pos + self.batch > n or self.order.numel() == 0:
            self.order, self.pos = torch.randperm(n), 0
        idx = self.order[self.pos : self.pos + self.batch]
        self.pos += self.batch
        x = self.images.index_select(0, idx)
        y = self.labels.index_select(0, idx)
        b, c, h, w = x.shape
        p = self.padding
        padded = F.pad(x, (p, p, p, p))
        # Per image: a crop offset uniform in 0..2p and a flip with probability 1/2, as one gather.
        dy = torch.randint(0, 2 * p + 1, (b, 1))
        dx = torch.randint(0, 2 * p + 1, (b, 1))
        flip = torch.rand(b, 1) < 0.5
        ar_h, ar_w = torch.arange(h), torch.arange(w)
        rows = dy + ar_h
        cols = dx + torch.where(flip, w - 1 - ar_w, ar_w)
        x = padded[
            torch.arange(b).reshape(b, 1, 1, 1),
            torch.arange(c).reshape(1, c, 1, 1),
            rows.reshape(b, 1, h, 1),
            cols.reshape(b, 1, 1, w),
        ]
        x = x.float().div(255).sub(self.mean).div(self.std)
        return x, y


def use_device(name):
    """The torch.device for --device, and the wait that ends a timed iteration on it (none on the
    CPU; torch.cuda.synchronize on a GPU, whose kernels run asynchronously). Exits with one
    clear line when this PyTorch cannot use the GPU."""
    device = torch.device(name)
    if device.type == "cpu":
        return device, lambda: None
    if not torch.cuda.is_available():
        why = "a CPU build" if torch.version.cuda is None else "a CUDA build that sees no GPU"
        sys.exit(f"--device {name}: this Python's PyTorch {torch.__version__} is {why} ({sys.executable})")
    if device.index is not None and device.index >= torch.cuda.device_count():
        sys.exit(f"--device {name}: PyTorch sees {torch.cuda.device_count()} GPU(s), numbered from 0")
    return device, lambda: torch.cuda.synchronize(device)


def device_info(device):
    """What the greeting says of the device: its name, and the GPU's (torch.cuda.get_device_name)."""
    info = {"device": str(device)}
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
    return info


def serve(step, sync=lambda: None):
    """Answers each {"op": "step"} line on stdin with one timed step: {"ms": ...}. sync (the
    device's wait, from use_device) runs before the clock starts and after the step, before it
    stops."""
    for line in sys.stdin:
        cmd = json.loads(line)
        if cmd["op"] != "step":
            raise ValueError(f"unknown command {cmd}")
        sync()
        t0 = time.perf_counter()
        step()
        sync()
        print(json.dumps({"ms": (time.perf_counter() - t0) * 1000}), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--steps", type=int, default=23, help="images in memory: batch * steps")
    ap.add_argument("--threads", type=int, required=True, help="the TypeScript side's torch.getNumThreads()")
    ap.add_argument("--width", type=float, default=1.0, help="the ResNet's width multiplier")
    ap.add_argument("--channels-last", action="store_true", help="model and batches in torch.channels_last")
    a = ap.parse_args()
    # Debian's PyTorch starts with one thread; match the other side exactly.
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    n = a.batch * a.steps
    images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8)
    labels = torch.randint(0, 10, (n,))
    loader = Loader(images, labels, a.batch)
    model = load_zoo_reference().ResNet18(num_classes=10, width=a.width)
    model.train()
    layout = torch.channels_last if a.channels_last else torch.contiguous_format
    model.to(memory_format=layout)
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)

    def step():
        # As train/trainer.ts's inner loop, and bench/train.ts.
        x, y = loader.next()
        x = x.contiguous(memory_format=layout)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        value = loss.item()
        if value != value or abs(value) == float("inf"):
            raise RuntimeError(f"loss is {value}")
        loss.backward()
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            logits.argmax(1).eq(y).sum().item()

    print(json.dumps({"threads": torch.get_num_threads(), "torch": torch.__version__}), flush=True)
    serve(step)


if __name__ == "__main__":
    main()
