"""A fixed PyTorch workload that measures how fast a machine is, so that demo times taken on
different machines can be compared (bench/demo.ts): one epoch of the demo's base model (the
torch.nn twin of stitchlab's ResNet-18 at the given width, test/helpers/zoo_reference.py),
trained by plain PyTorch with SGD (Nesterov, lr 0.1, weight decay 1e-4) on synthetic uint8
images, random crop (pad 4) and flip, batch 128, on --threads threads. The loader is
bench/train_torch.py's (imported, not copied).

Prints one JSON line: {"seconds": s, "steps": n, "threads": t, "torch": version}.
"""

import argparse
import importlib.util
import json
import os
import time

import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--width", type=float, required=True)
    ap.add_argument("--images", type=int, required=True)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--threads", type=int, default=2)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    train_torch = load("train_torch", os.path.join(HERE, "train_torch.py"))
    zoo = train_torch.load_zoo_reference()
    images = torch.randint(0, 256, (a.images, 3, 32, 32), dtype=torch.uint8)
    labels = torch.randint(0, 10, (a.images,))
    loader = train_torch.Loader(images, labels, a.batch)
    model = zoo.ResNet18(num_classes=10, width=a.width)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-4)
    steps = a.images // a.batch
    t0 = time.perf_counter()
    for _ in range(steps):
        x, y = loader.next()
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - t0
    print(json.dumps({"seconds": seconds, "steps": steps, "threads": a.threads, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
