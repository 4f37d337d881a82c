"""The PyTorch side of the engine benchmark (bench/engine.ts): the same ResNet-18 and ViT-Tiny,
built from the same ATen ops in the same composition, the same four workloads and the same
timing protocol. Run alone, prints {"workloads": {name: median_ms}, "threads": n, "torch": version,
"device": d, "gpu": name (on a GPU)}; bench/engine.ts runs it with --serve instead, to alternate
the two sides iteration by iteration.

--device cuda (or cuda:N): the models and inputs are built on the CPU from the same seed, then
moved to the GPU, and every timed iteration (warm-up too) ends with torch.cuda.synchronize()
before the clock stops, as on the TypeScript side.

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

# The script's folder is on sys.path, so the training benchmark's helpers import as a module.
from train_torch import device_info, use_device

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


# ---- devices ----


def to_device(value, device):
    """Every tensor of a model (dicts and lists of tensors) or an input, moved to device."""
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, dict):
        return {k: to_device(v, device) for k, v in value.items()}
    if isinstance(value, list):
        return [to_device(v, device) for v in value]
    return value


# ---- the workloads and the protocol ----


def build_workloads(batch, device="cpu"):
    torch.manual_seed(0)
    # Built on the CPU in this order (the seeded draws of a CPU run), then moved.
    net = to_device(resnet18(), device)
    vt = to_device(vit_tiny(), device)
    x = to_device(torch.randn(batch, 3, 32, 32), device)
    y = to_device(torch.randint(0, 10, (batch,)), device)
    weights = resnet_parameters(net)
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


def time_once(fn, sync):
    """Milliseconds of one call of fn; sync (the device's wait) runs before the clock starts and
    after fn, before it stops."""
    sync()
    t0 = time.perf_counter()
    fn()
    sync()
    return (time.perf_counter() - t0) * 1000


def time_iterations(fn, warmup, iters, sync=lambda: None):
    for _ in range(warmup):
        time_once(fn, sync)
    return [time_once(fn, sync) for _ in range(iters)]


def serve(workloads, hello, sync):
    """Answers one JSON command per stdin line, so that bench/engine.ts can alternate its
    iterations with ours: {"op": "setup", "name": ...} -> {}, {"op": "step", "name": ...} ->
    {"ms": ...}. Both sides then see the same machine load, which a shared machine needs."""
    print(json.dumps(hello), flush=True)
    for line in sys.stdin:
        cmd = json.loads(line)
        setup, step = workloads[cmd["name"]]
        if cmd["op"] == "setup":
            setup()
            reply = {}
        else:
            reply = {"ms": time_once(step, sync)}
        print(json.dumps(reply), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--threads", type=int, required=True, help="the TypeScript side's torch.getNumThreads()")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--device", default="cpu", help="cpu, cuda or cuda:N")
    ap.add_argument("--serve", action="store_true", help="take commands on stdin (as bench/engine.ts does)")
    a = ap.parse_args()
    # Debian's PyTorch starts with one thread; match the other side exactly.
    torch.set_num_threads(a.threads)
    device, sync = use_device(a.device)
    workloads = build_workloads(a.batch, device)
    hello = {"threads": torch.get_num_threads(), "torch": torch.__version__, **device_info(device)}
    if a.serve:
        serve(workloads, hello, sync)
        return
    medians = {}
    for name in a.workloads.split(","):
        setup, step = workloads[name]
        setup()
        medians[name] = statistics.median(time_iterations(step, a.warmup, a.iters, sync))
    print(json.dumps({"workloads": medians, **hello}))


if __name__ == "__main__":
    main()
