"""The PyTorch side of the engine benchmark (bench/engine.ts): the same ResNet-18 and ViT-Tiny,
built from the same ATen ops in the same composition, the same four workloads and the same
timing protocol. Run alone, prints {"workloads": {name: median_ms}, "threads": n, "torch": version};
bench/engine.ts runs it with --serve instead, to alternate the two sides iteration by iteration.

Written functionally, like the TypeScript side, rather than with torch.nn modules: modules
would use in-place ReLU and in-place residual adds, which the TypeScript side does not do.
"""

import argparse
import json
import math
import statistics
import sys
import time

import torch
import torch.nn.functional as F

WORKLOADS = ["forward", "backward_input", "train_step", "vit_backward_input"]


# ---- ResNet-18, CIFAR stem ----


def conv_weight(out, inp, k):
    # Kaiming-normal, fan_in, ReLU gain: as bench/models/resnet18.ts.
    return torch.randn(out, inp, k, k) * math.sqrt(2 / (inp * k * k))


def batch_norm2d(c):
    return {"weight": torch.ones(c), "bias": torch.zeros(c), "running_mean": torch.zeros(c), "running_var": torch.ones(c)}


def resnet18(num_classes=10):
    blocks = []
    inp = 64
    for width, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
        for i in range(2):
            s = stride if i == 0 else 1
            blocks.append(
                {
                    "stride": s,
                    "conv1": conv_weight(width, inp, 3),
                    "bn1": batch_norm2d(width),
                    "conv2": conv_weight(width, width, 3),
                    "bn2": batch_norm2d(width),
                    "downsample": {"conv": conv_weight(width, inp, 1), "bn": batch_norm2d(width)}
                    if s != 1 or inp != width
                    else None,
                }
            )
            inp = width
    bound = 1 / math.sqrt(512)
    return {
        "conv1": conv_weight(64, 3, 3),
        "bn1": batch_norm2d(64),
        "blocks": blocks,
        "fc": {"weight": torch.rand(num_classes, 512) * (2 * bound) - bound, "bias": torch.zeros(num_classes)},
    }


def resnet_parameters(m):
    def bn(b):
        return [b["weight"], b["bias"]]

    out = [m["conv1"], *bn(m["bn1"])]
    for b in m["blocks"]:
        out += [b["conv1"], *bn(b["bn1"]), b["conv2"], *bn(b["bn2"])]
        if b["downsample"]:
            out += [b["downsample"]["conv"], *bn(b["downsample"]["bn"])]
    return out + [m["fc"]["weight"], m["fc"]["bias"]]


def bn(x, p, training):
    # F.batch_norm calls aten::batch_norm with cudnn_enabled = torch.backends.cudnn.enabled
    # (True), as torch.batchNorm does.
    return F.batch_norm(x, p["running_mean"], p["running_var"], p["weight"], p["bias"], training)


def basic_block(x, b, training):
    out = torch.relu(bn(torch.conv2d(x, b["conv1"], None, b["stride"], 1), b["bn1"], training))
    out = bn(torch.conv2d(out, b["conv2"], None, 1, 1), b["bn2"], training)
    d = b["downsample"]
    shortcut = bn(torch.conv2d(x, d["conv"], None, b["stride"]), d["bn"], training) if d else x
    return torch.relu(out + shortcut)


def resnet_forward(m, x, training):
    h = torch.relu(bn(torch.conv2d(x, m["conv1"], None, 1, 1), m["bn1"], training))
    for b in m["blocks"]:
        h = basic_block(h, b, training)
    return F.linear(F.adaptive_avg_pool2d(h, 1).flatten(1), m["fc"]["weight"], m["fc"]["bias"])


# ---- ViT-Tiny, patch 4 on 32x32 ----

VIT = {"image_size": 32, "patch": 4, "dim": 192, "depth": 12, "heads": 3, "mlp_ratio": 4, "num_classes": 10}
EPS = 1e-6


def small(*shape):
    return torch.randn(*shape) * 0.02


def linear(out, inp):
    return {"weight": small(out, inp), "bias": torch.zeros(out)}


def layer_norm(d):
    return {"weight": torch.ones(d), "bias": torch.zeros(d)}


def vit_tiny(c=VIT):
    dim, patch = c["dim"], c["patch"]
    tokens = (c["image_size"] // patch) ** 2 + 1
    hidden = dim * c["mlp_ratio"]
    blocks = [
        {
            "norm1": layer_norm(dim),
            "qkv": linear(3 * dim, dim),
            "proj": linear(dim, dim),
            "norm2": layer_norm(dim),
            "fc1": linear(hidden, dim),
            "fc2": linear(dim, hidden),
        }
        for _ in range(c["depth"])
    ]
    return {
        "config": c,
        "patch_embed": {"weight": small(dim, 3, patch, patch), "bias": torch.zeros(dim)},
        "cls_token": small(1, 1, dim),
        "pos_embed": small(1, tokens, dim),
        "blocks": blocks,
        "norm": layer_norm(dim),
        "head": linear(c["num_classes"], dim),
    }


def attention(x, b, heads):
    n, t, d = x.shape
    head_dim = d // heads
    qkv = F.linear(x, b["qkv"]["weight"], b["qkv"]["bias"]).reshape(n, t, 3, heads, head_dim).permute(2, 0, 3, 1, 4)
    q, k, v = qkv.unbind(0)
    attn = (q @ k.transpose(-2, -1)).mul(head_dim**-0.5).softmax(-1)
    out = (attn @ v).transpose(1, 2).reshape(n, t, d)
    return F.linear(out, b["proj"]["weight"], b["proj"]["bias"])


def mlp(x, b):
    return F.linear(F.gelu(F.linear(x, b["fc1"]["weight"], b["fc1"]["bias"])), b["fc2"]["weight"], b["fc2"]["bias"])


def norm(x, p, dim):
    return F.layer_norm(x, [dim], p["weight"], p["bias"], EPS)


def vit_forward(m, x):
    c = m["config"]
    dim = c["dim"]
    n = x.shape[0]
    h = torch.conv2d(x, m["patch_embed"]["weight"], m["patch_embed"]["bias"], c["patch"]).flatten(2).transpose(1, 2)
    h = torch.cat([m["cls_token"].expand(n, -1, -1), h], 1).add(m["pos_embed"])
    for b in m["blocks"]:
        h = h.add(attention(norm(h, b["norm1"], dim), b, c["heads"]))
        h = h.add(mlp(norm(h, b["norm2"], dim), b))
    cls = norm(h, m["norm"], dim).select(1, 0)
    return F.linear(cls, m["head"]["weight"], m["head"]["bias"])


# ---- SGD, as bench/sgd.ts ----


class SGD:
    def __init__(self, params, lr, momentum, weight_decay, nesterov):
        self.params, self.lr, self.momentum, self.wd, self.nesterov = params, lr, momentum, weight_decay, nesterov
        self.buffers = [torch.zeros_like(p) for p in params]

    def zero_grad(self):
        for p in self.params:
            if p.grad is not None:
                p.grad.zero_()

    @torch.no_grad()
    def step(self):
        for p, buf in zip(self.params, self.buffers):
            g = p.grad
            if g is None:
                continue
            g.add_(p, alpha=self.wd)
            buf.mul_(self.momentum).add_(g)
            if self.nesterov:
                g.add_(buf, alpha=self.momentum)
            p.add_(g if self.nesterov else buf, alpha=-self.lr)


# ---- the workloads and the protocol ----


def build_workloads(batch):
    torch.manual_seed(0)
    net = resnet18()
    weights = resnet_parameters(net)
    vt = vit_tiny()
    x = torch.randn(batch, 3, 32, 32)
    y = torch.randint(0, 10, (batch,))
    x_grad = x.detach().requires_grad_()
    sgd = SGD(weights, lr=0.01, momentum=0.9, weight_decay=5e-4, nesterov=True)

    def trainable(flag):
        for p in weights:
            p.requires_grad_(flag)

    def forward():
        with torch.no_grad():
            resnet_forward(net, x, False)

    def backward_input():
        torch.autograd.grad(F.cross_entropy(resnet_forward(net, x_grad, False), y), x_grad)

    def train_step():
        sgd.zero_grad()
        F.cross_entropy(resnet_forward(net, x, True), y).backward()
        sgd.step()

    def vit_backward_input():
        torch.autograd.grad(F.cross_entropy(vit_forward(vt, x_grad), y), x_grad)

    return {
        "forward": (lambda: trainable(False), forward),
        "backward_input": (lambda: trainable(False), backward_input),
        "train_step": (lambda: trainable(True), train_step),
        "vit_backward_input": (lambda: None, vit_backward_input),
    }


def time_iterations(fn, warmup, iters):
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return times


def serve(workloads):
    """Answers one JSON command per stdin line, so that bench/engine.ts can alternate its
    iterations with ours: {"op": "setup", "name": ...} -> {}, {"op": "step", "name": ...} ->
    {"ms": ...}. Both sides then see the same machine load, which a shared machine needs."""
    print(json.dumps({"threads": torch.get_num_threads(), "torch": torch.__version__}), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        setup, step = workloads[cmd["name"]]
        if cmd["op"] == "setup":
            setup()
            reply = {}
        else:
            t0 = time.perf_counter()
            step()
            reply = {"ms": (time.perf_counter() - t0) * 1000}
        print(json.dumps(reply), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--threads", type=int, required=True, help="the TypeScript side's torch.getNumThreads()")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--serve", action="store_true", help="take commands on stdin (as bench/engine.ts does)")
    a = ap.parse_args()
    # Debian's PyTorch starts with one thread; match the other side exactly.
    torch.set_num_threads(a.threads)
    workloads = build_workloads(a.batch)
    if a.serve:
        serve(workloads)
        return
    medians = {}
    for name in a.workloads.split(","):
        setup, step = workloads[name]
        setup()
        medians[name] = statistics.median(time_iterations(step, a.warmup, a.iters))
    print(json.dumps({"workloads": medians, "threads": torch.get_num_threads(), "torch": torch.__version__}))


if __name__ == "__main__":
    main()
