"""Two ResNet-18s trained in plain PyTorch, as a researcher's own models would be: torchvision's
resnet18(num_classes=10) with the CIFAR stem (3x3 conv1 of stride 1, no max-pool), trained on
Fashion-MNIST padded to 32 px and replicated to 3 channels, normalised with the Fashion-MNIST
statistics stitchlab names (--normalization fashion-mnist), with NO augmentation (a common recipe
for Fashion-MNIST, and the one that trips batch norm's adapt under the standard recipe). SGD with
Nesterov momentum, cosine learning rate. Saves torch state dicts seed0.pt and seed1.pt in --out,
and seed{n}.json with the test accuracy. Used by bench/compare-full.ts --models torch.

    python3 bench/foreign_pair.py --out DIR [--images 8192] [--epochs 3] [--threads 1]
"""

import argparse
import gzip
import json
import os
import struct
import sys
import time

import torch
import torch.nn.functional as F
import torchvision

ROOT = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.286, 0.353


def idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    magic, n = struct.unpack(">II", data[:8])
    if magic == 2051:
        rows, cols = struct.unpack(">II", data[8:16])
        return torch.frombuffer(bytearray(data[16:]), dtype=torch.uint8).reshape(n, 1, rows, cols)
    return torch.frombuffer(bytearray(data[8:]), dtype=torch.uint8).long()


def prepare(x):
    x = F.pad(x.float() / 255, (2, 2, 2, 2)).repeat(1, 3, 1, 1)
    return (x - MEAN) / STD


def model(seed):
    torch.manual_seed(seed)
    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = torch.nn.Identity()
    return m


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True)
    p.add_argument("--images", type=int, default=8192)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--lr", type=float, default=0.05)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--seeds", default="0,1")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    xs = idx(f"{ROOT}/train-images-idx3-ubyte.gz")[: a.images]
    ys = idx(f"{ROOT}/train-labels-idx1-ubyte.gz")[: a.images]
    xt = prepare(idx(f"{ROOT}/t10k-images-idx3-ubyte.gz")[:2000])
    yt = idx(f"{ROOT}/t10k-labels-idx1-ubyte.gz")[:2000]
    for seed in [int(s) for s in a.seeds.split(",")]:
        path = os.path.join(a.out, f"seed{seed}.pt")
        if os.path.exists(path):
            continue
        m = model(seed)
        steps = a.epochs * (a.images // a.batch)
        opt = torch.optim.SGD(m.parameters(), lr=a.lr, momentum=0.9, nesterov=True, weight_decay=5e-4)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, steps)
        g = torch.Generator().manual_seed(seed)
        t0 = time.time()
        m.train()
        for epoch in range(a.epochs):
            order = torch.randperm(a.images, generator=g)
            for b in range(a.images // a.batch):
                i = order[b * a.batch : (b + 1) * a.batch]
                loss = F.cross_entropy(m(prepare(xs[i])), ys[i])
                opt.zero_grad()
                loss.backward()
                opt.step()
                sched.step()
            print(f"seed {seed} epoch {epoch + 1}: loss {loss.item():.3f} ({time.time() - t0:.0f} s)", file=sys.stderr)
        m.eval()
        with torch.no_grad():
            acc = sum((m(xt[i : i + 500]).argmax(1) == yt[i : i + 500]).sum().item() for i in range(0, 2000, 500)) / 2000
        torch.save(m.state_dict(), path + ".part")
        os.replace(path + ".part", path)
        with open(os.path.join(a.out, f"seed{seed}.json"), "w") as f:
            json.dump({"seed": seed, "accuracy": acc, "seconds": round(time.time() - t0, 1), "images": a.images, "epochs": a.epochs, "augment": False}, f)
        print(f"seed {seed}: test accuracy {acc:.3f}", file=sys.stderr)


if __name__ == "__main__":
    main()
