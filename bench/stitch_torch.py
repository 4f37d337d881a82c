"""The PyTorch side of the IRI and stitching benchmarks (bench/iris.ts, bench/stitch.ts): the same
workloads written with plain torch on the torch.nn ResNet-18 (CIFAR stem, full width) of
test/helpers/zoo_reference.py, the same architecture as stitchlab's createModel("resnet18"),
imported from there (through train_torch.py), not copied.

  --workload=iris    one generateIriBatch call (stitch/iris.ts) of --steps signed-gradient steps
                     for a fixed uint8 batch: target features once, then per step a forward to
                     the point from the pixel-space iterate, the relative Frobenius residual,
                     .item(), backward to the input, p -= step * sign(grad), clamp to [0, 1];
                     then the 8-bit quantisation and one forward for the residuals.
                     The front model is frozen and in eval mode.
  --workload=stitch  one training step of the stitching layer T (1x1 conv with bias) with FuLA,
                     as stitch/train.ts's trainStitch loop body: a batch drawn from in-memory
                     uint8 images (shuffled, normalised, no augmentation), B's own features at
                     every point from the stitch point on (no grad), A to the point (no grad),
                     T, B's tail with the features at the same points, FuLA, backward,
                     torch.optim.Adam (lr 1e-3, weight decay 1e-4), zero_grad, .item().
  --workload=stitch-iris  one whole invariance-aware stitching run of --epochs epochs with SLM,
                     A and B frozen in eval mode, as the reference loops it: every step runs A to
                     the point and B on its batch again (bench/stitch.ts --mode iris).

--device cuda (or cuda:N; iris only): the model and the batch are built on the CPU from the same
seeds, then moved to the GPU, and each timed call ends with torch.cuda.synchronize() before the
clock stops.

Answers one JSON command per stdin line: {"op": "step"} -> {"ms": ...}, after a greeting
{"threads": n, "torch": version, "points": the points whose features are compared, "device": d,
"gpu": name (on a GPU)}; the TypeScript side alternates its iterations with ours.
"""

import argparse
import json
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

# The script's folder is on sys.path, so the training benchmark's helpers import as a module.
from train_torch import CIFAR10_MEAN, CIFAR10_STD, device_info, load_zoo_reference, serve, use_device

# The method's IRI defaults (docs/method.md, "IRI generation"; stitch/iri-options.ts's IRI_DEFAULTS):
# signed steps of one grey level.
IRI_STEP_SIZE = 1 / 255


class Staged:
    """A zoo_reference ResNet18 as stitchlab's StitchableModel sees it: stages that end at the
    stitch points stem, layer1.0, ..., layer4.1, then the head (pool, flatten, fc)."""

    def __init__(self, model):
        self.model = model
        self.stages = [("stem", lambda x: F.relu(model.bn1(model.conv1(x))))]
        for i in range(1, 5):
            layer = getattr(model, f"layer{i}")
            self.stages += [(f"layer{i}.{b}", layer[b]) for b in range(len(layer))]
        self.names = [name for name, _ in self.stages]

    def head(self, h):
        return self.model.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))

    def forward_to(self, x, point):
        """A_{<=point}(x), as forwardTo."""
        for name, run in self.stages:
            x = run(x)
            if name == point:
                return x
        raise ValueError(f"no stitch point {point}")

    def features_from(self, h, start, points):
        """From h at stage index `start`, the features at `points` and the logits (collect)."""
        features = {}
        for name, run in self.stages[start:]:
            h = run(h)
            if name in points:
                features[name] = h
        return features, self.head(h)

    def forward_features(self, x, points):
        """forwardFeatures: every stage from the input, keeping the features at `points`."""
        return self.features_from(x, 0, points)

    def forward_features_from(self, h, point, points):
        """forwardFeaturesFrom: B's tail from features h at `point`; `point` itself is given h."""
        features, logits = self.features_from(h, self.names.index(point) + 1, [p for p in points if p != point])
        if point in points:
            features[point] = h
        return features, logits


def resnet18(seed):
    torch.manual_seed(seed)
    return load_zoo_reference().ResNet18(num_classes=10)


def channel(values, device="cpu"):
    return torch.tensor(values, device=device).reshape(1, len(values), 1, 1)


def iris_workload(a, device):
    torch.manual_seed(0)
    # Built on the CPU (the seeded draws of a CPU run), then moved.
    x = torch.randint(0, 256, (a.batch, 3, 32, 32), dtype=torch.uint8).to(device)
    front = Staged(resnet18(0).to(device))
    # generateIriBatch: frozen weights, eval mode.
    front.model.requires_grad_(False)
    front.model.eval()
    point = a.point

    def per_image_residual(f, target):
        return (f - target).flatten(1).norm(2, 1) / (target.flatten(1).norm(2, 1) + 1e-12)

    def generate(seed):
        # As stitch/iris.ts's generateIriBatch with IRI_DEFAULTS (uniform start, sign steps, no
        # ball, last iterate), line by line.
        mean, std = channel(CIFAR10_MEAN, x.device), channel(CIFAR10_STD, x.device)

        def features(p01):
            return front.forward_to((p01 - mean) / std, point)

        x01 = x.float() / 255
        with torch.no_grad():
            target = features(x01)
        target_norm = target.norm().item()
        if not target_norm > 0:
            raise RuntimeError(f"features at {point} are {target_norm}")
        torch.manual_seed(seed)
        p = torch.rand_like(x01).clone().requires_grad_(True)
        for t in range(a.steps):
            f = features(p)
            loss = (f - target).norm() / target_norm
            value = loss.item()
            if not math.isfinite(value):
                raise RuntimeError(f"IRI generation diverged at step {t + 1}: residual {value}")
            loss.backward()
            with torch.no_grad():
                p.sub_(p.grad.sign() * IRI_STEP_SIZE)
                p.clamp_(0, 1)
            p.grad = None
        images = (p.detach() * 255).round().clamp(0, 255).to(torch.uint8)
        with torch.no_grad():
            stored = features(images.float() / 255)
        residuals = per_image_residual(stored, target).cpu().numpy()
        return images, residuals, (stored - target).norm().item() / target_norm

    calls = iter(range(1 << 30))
    return lambda: generate(next(calls)), [point]


def stitch_workload(a):
    torch.manual_seed(0)
    n = a.batch * a.batches
    images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8)
    labels = torch.randint(0, 10, (n,))
    front, back = Staged(resnet18(0)), Staged(resnet18(1))
    for m in (front.model, back.model):
        # setFrozenBnMode(model, "batch"): frozen weights, train mode, and batch norm with batch
        # statistics that leaves the running statistics alone. In train mode with
        # track_running_stats False, nn.BatchNorm2d passes no running statistics to
        # F.batch_norm, exactly as stitchlab's BatchNorm2d with updateStats false does
        # (momentum 0 would also keep them, but would still compute the update).
        m.requires_grad_(False)
        m.train()
        for bn in m.modules():
            if isinstance(bn, nn.BatchNorm2d):
                bn.track_running_stats = False
    point = a.point
    # fulaPoints: B's points from the stitch point to its last.
    points = back.names[back.names.index(point) :]
    channels = front.forward_to(torch.zeros(1, 3, 32, 32), point).shape[1]
    torch.manual_seed(2)
    layer = nn.Conv2d(channels, channels, 1, bias=True)
    opt = torch.optim.Adam(layer.parameters(), lr=1e-3, weight_decay=1e-4)
    mean, std = channel(CIFAR10_MEAN), channel(CIFAR10_STD)
    order, pos = torch.empty(0, dtype=torch.int64), 0

    def next_batch():
        # data/loader.ts's batches() without augmentation: a shuffled index_select, then float,
        # /255, -mean, /std; a new permutation per epoch.
        nonlocal order, pos
        if pos + a.batch > n or order.numel() == 0:
            order, pos = torch.randperm(n), 0
        idx = order[pos : pos + a.batch]
        pos += a.batch
        x = images.index_select(0, idx)
        y = labels.index_select(0, idx)
        return x.float().div(255).sub(mean).div(std), y

    def relative_distance(mine, target):
        return (mine - target).norm() / (target.norm() + 1e-12)

    def step():
        # As trainStitch's loop body with stitchLoss(s, x, y, {fula: 1}) (stitch/objectives.ts).
        x, _ = next_batch()
        with torch.no_grad():
            target, _ = back.forward_features(x, points)
            fa = front.forward_to(x, point)
        h = layer(fa)
        mine, _ = back.forward_features_from(h, point, points)
        loss = torch.stack([relative_distance(mine[p], target[p]) for p in points]).mean() * 1
        value = loss.item()
        if not math.isfinite(value):
            raise RuntimeError(f"stitching diverged: loss is {value}")
        loss.backward()
        opt.step()
        opt.zero_grad()

    return step, points


def stitch_iris_workload(a):
    """One whole invariance-aware stitching run as the reference loops it: --epochs epochs over
    batch * batches stored IRIs with SLM, A and B frozen in eval mode, and every step running A
    to the point and B on the batch again (nothing computed once). T is a fresh 1x1 conv with
    its Adam per run, as trainStitch makes (init "random")."""
    torch.manual_seed(0)
    n = a.batch * a.batches
    images = torch.randint(0, 256, (n, 3, 32, 32), dtype=torch.uint8)
    front, back = Staged(resnet18(0)), Staged(resnet18(1))
    for m in (front.model, back.model):
        m.requires_grad_(False)
        m.eval()
    point = a.point
    channels = front.forward_to(torch.zeros(1, 3, 32, 32), point).shape[1]
    mean, std = channel(CIFAR10_MEAN), channel(CIFAR10_STD)

    def run():
        torch.manual_seed(2)
        layer = nn.Conv2d(channels, channels, 1, bias=True)
        opt = torch.optim.Adam(layer.parameters(), lr=1e-3, weight_decay=1e-4)
        for _ in range(a.epochs):
            order = torch.randperm(n)
            for b in range(n // a.batch):
                idx = order[b * a.batch : (b + 1) * a.batch]
                x = images.index_select(0, idx).float().div(255).sub(mean).div(std)
                with torch.no_grad():
                    _, target = back.forward_features(x, [])
                    fa = front.forward_to(x, point)
                _, logits = back.forward_features_from(layer(fa), point, [])
                loss = F.cross_entropy(logits, target.softmax(1))
                value = loss.item()
                if not math.isfinite(value):
                    raise RuntimeError(f"stitching diverged: loss is {value}")
                loss.backward()
                opt.step()
                opt.zero_grad()

    return run, [point]


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--workload", choices=["iris", "stitch", "stitch-iris"], required=True)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--point", default="layer2.1")
    ap.add_argument("--steps", type=int, default=5, help="iris: signed steps per generateIriBatch call")
    ap.add_argument("--batches", type=int, default=23, help="stitch: images in memory: batch * batches")
    ap.add_argument("--epochs", type=int, default=8, help="stitch-iris: epochs per timed run")
    ap.add_argument("--threads", type=int, required=True, help="the TypeScript side's torch.getNumThreads()")
    ap.add_argument("--device", default="cpu", help="iris: cpu, cuda or cuda:N (stitch runs on the CPU)")
    a = ap.parse_args()
    # Debian's PyTorch starts with one thread; match the other side exactly.
    torch.set_num_threads(a.threads)
    if a.workload.startswith("stitch") and a.device != "cpu":
        ap.error("--device: the stitch workloads run on the CPU only")
    device, sync = use_device(a.device)
    workloads = {"iris": lambda: iris_workload(a, device), "stitch": lambda: stitch_workload(a), "stitch-iris": lambda: stitch_iris_workload(a)}
    step, points = workloads[a.workload]()

    hello = {"threads": torch.get_num_threads(), "torch": torch.__version__, "points": points, **device_info(device)}
    print(json.dumps(hello), flush=True)
    serve(step, sync)


if __name__ == "__main__":
    main()
