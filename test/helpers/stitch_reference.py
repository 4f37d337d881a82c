"""Invariance-aware and standard stitching written directly in plain PyTorch from docs/method.md,
independent of stitchlab's code, for test/fidelity.test.ts ("an independent plain-PyTorch
stitcher ..."). Nothing here imports stitchlab or its PyTorch twins: the networks are built from
torchvision's own ResNet pieces (its BasicBlock and _make_layer, with the 32 px stem: a 3x3 conv1
of stride 1, no max-pool), their widths read from the weights.

What it does, in one process:
1. IRIs of the front model A at one point (docs/method.md, "IRI generation"): for each batch of source
   images, A in eval mode, start from uniform noise in [0, 1] (drawn after torch.manual_seed of the
   batch's seed, given with the data), then signed-gradient descent on
   ||A(x') - A(x)||_F / ||A(x)||_F (norms over the batch) in pixel space, clamped to [0, 1] after
   each step, no early stop; the last iterate quantised to uint8, its per-image residual measured.
   (The public reference's external/attacks/pgd_iris.py takes signed steps of this kind too.)
2. Each run of settings["runs"]: T a 1x1 convolution with bias, started by least squares with bias
   (the pseudo-inverse, as the public reference's models/stitch.py ps_inv does, but in float64) on
   every real image given, A and B in eval mode, every spatial position a sample, B's own features
   at the point the target. Scores of that start, then T trained by Adam (weight decay as L2 in
   the gradient), lr x0.1 at int(E/3) and int(2E/3), on the real images (mode "standard") or on
   the IRIs made in step 1 (mode "iris"; B's targets computed on the IRIs themselves, HLM's labels
   those of the source images), batches in the given order, the last partial batch dropped.
   Objectives: HLM (cross-entropy with the labels), SLM (cross-entropy with B's softmax), DM
   (relative Frobenius distance of T's output to B's features at the point) and FuLA (the mean of
   that distance over the point and every later block output of B).
   Batch norm "eval": every network in eval mode. Batch norm "adapt" (the public reference's
   bn_running_stats, training/stitching/trainer_pc.py and models/model_utils.py
   get_end_hooked_activations): the stitched model runs in train mode, so its forward pass updates
   (momentum 0.1) the running statistics of A's batch norm and of its own copy of B's layers after
   the point; B's pass that gives the targets runs in train mode with momentum 0 (batch
   statistics, nothing updated). Scoring puts the stitched model in eval mode with its statistics
   and compares it with B as loaded, in eval mode.
3. Scores on the test set: accuracy, B's accuracy, hard agreement, agreement probability and the
   soft error consistency (docs/method.md, "Scores").

Usage: python3 stitch_reference.py DIR
  reads DIR/front.pt, DIR/back.pt (state dicts), DIR/data.pt {real: uint8 [N, 3, H, W],
  real_labels: int64 [N], test: uint8 [M, 3, H, W], test_labels: int64 [M], iri_sources: uint8
  [P, 3, H, W], iri_labels: int64 [P], iri_seeds: int64 [batches], order_standard: int64 [E, N],
  order_iris: int64 [E, P]} and DIR/settings.json {mean, std, iris: {point, steps, step_size,
  batch}, epochs, batch, lr, weight_decay, threads, runs: [{name, mode, point, objective, bn}]}
  writes DIR/py_iris.pt {images: uint8 [P, 3, H, W], residuals: float32 [P]}, DIR/py_out.pt
  {"<run>.init_weight", "<run>.init_logits" (the stitched model on the test set, T as started),
  "<run>.weight", "<run>.bias", "<run>.logits" (the same, T trained), "back_logits"} and
  DIR/py_scores.json {"iris_seconds", "<run>": {init: scores, trained: scores, init_residual,
  seconds}}.
"""

import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models.resnet import BasicBlock, ResNet

POINTS = ["stem"] + [f"layer{i}.{b}" for i in range(1, 5) for b in range(2)]


class CifarResNet18(ResNet):
    """torchvision's ResNet-18 at the widths of `state`, with the 32 px stem."""

    def __init__(self, state):
        nn.Module.__init__(self)
        widths = [state["conv1.weight"].shape[0]] + [state[f"layer{i}.0.conv1.weight"].shape[0] for i in (2, 3, 4)]
        # What ResNet.__init__ sets up for _make_layer (groups 1 and base width 64: BasicBlock's only ones).
        self._norm_layer, self.dilation, self.groups, self.base_width = nn.BatchNorm2d, 1, 1, 64
        self.inplanes = widths[0]
        self.conv1 = nn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(widths[0])
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.Identity()
        self.layer1 = self._make_layer(BasicBlock, widths[0], 2)
        self.layer2 = self._make_layer(BasicBlock, widths[1], 2, stride=2)
        self.layer3 = self._make_layer(BasicBlock, widths[2], 2, stride=2)
        self.layer4 = self._make_layer(BasicBlock, widths[3], 2, stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(widths[3], state["fc.weight"].shape[0])
        self.load_state_dict(state)
        for p in self.parameters():
            p.requires_grad_(False)

    def stage(self, point):
        """The module that computes `point` from the previous point's output."""
        if point == "stem":
            return nn.Sequential(self.conv1, self.bn1, self.relu)
        layer, block = point.split(".")
        b = getattr(self, layer)[int(block)]
        return nn.Sequential(self.maxpool, b) if point == "layer1.0" else b

    def up_to(self, x, point):
        for p in POINTS:
            x = self.stage(p)(x)
            if p == point:
                return x
        raise ValueError(point)

    def after(self, h, point):
        """Logits from the features at `point`, and every later point's features (point's own included)."""
        feats = {point: h}
        for p in POINTS[POINTS.index(point) + 1 :]:
            h = self.stage(p)(h)
            feats[p] = h
        return self.fc(torch.flatten(self.avgpool(h), 1)), feats

    def with_features(self, x):
        """torchvision's own forward, with every point's output caught by a forward hook."""
        feats = {}
        # The stem's point is its ReLU's output (before the max-pool); each block's, the block's output.
        modules = [self.relu] + [getattr(self, p.split(".")[0])[int(p.split(".")[1])] for p in POINTS[1:]]
        catch = lambda p: lambda _m, _i, o: feats.__setitem__(p, o)  # noqa: E731
        hooks = [m.register_forward_hook(catch(p)) for m, p in zip(modules, POINTS)]
        try:
            logits = self(x)
        finally:
            for h in hooks:
                h.remove()
        return logits, feats


def rel(a, b):
    return (a - b).norm() / b.norm()


def bn_modules(m):
    return [x for x in m.modules() if isinstance(x, nn.BatchNorm2d)]


def generate_iris(front, sources, seeds, norm, s):
    """The method's IRIs: signed descent from uniform noise, clamped to [0, 1], quantised to uint8."""
    front.eval()
    point, steps, step, batch = s["point"], s["steps"], s["step_size"], s["batch"]
    images, residuals = [], []
    for b, seed in enumerate(seeds.tolist()):
        x01 = sources[b * batch : (b + 1) * batch].float() / 255
        with torch.no_grad():
            target = front.up_to(norm(x01), point)
        tnorm = target.norm()
        torch.manual_seed(seed)
        p = torch.rand_like(x01)
        for _ in range(steps):
            p.requires_grad_(True)
            loss = (front.up_to(norm(p), point) - target).norm() / tnorm
            (g,) = torch.autograd.grad(loss, p)
            p = (p.detach() - step * g.sign()).clamp(0, 1)
        q = (p * 255).round().clamp(0, 255).to(torch.uint8)
        with torch.no_grad():
            f = front.up_to(norm(q.float() / 255), point)
        images.append(q)
        residuals.append((f - target).flatten(1).norm(dim=1) / target.flatten(1).norm(dim=1))
    return torch.cat(images), torch.cat(residuals)


def scores(logits, back_logits, y):
    p, q = F.softmax(logits.double(), 1), F.softmax(back_logits.double(), 1)
    agreement = ((p * q).sum(1) / torch.maximum(p.square().sum(1), q.square().sum(1))).mean().item()
    k = p.shape[1]
    a_s, a_b = p.gather(1, y[:, None]).mean().item(), q.gather(1, y[:, None]).mean().item()
    c_exp = a_s * a_b + (1 - a_s) * (1 - a_b) / (k - 1)
    right_s, right_b = logits.argmax(1) == y, back_logits.argmax(1) == y
    return {
        "accuracy": right_s.double().mean().item(),
        "back_accuracy": right_b.double().mean().item(),
        "hard_agreement": (right_s == right_b).double().mean().item(),
        "agreement_prob": agreement,
        "soft_error_consistency": 1.0 if c_exp == 1 else (agreement - c_exp) / (1 - c_exp),
    }


def run(r, state, data, iris, norm, s):
    started = time.perf_counter()
    front, back, tail = CifarResNet18(state["front"]), CifarResNet18(state["back"]), CifarResNet18(state["back"])
    point = r["point"]
    for m in (front, back, tail):
        m.eval()
    real = norm(data["real"].float() / 255)
    test = norm(data["test"].float() / 255)
    if r["mode"] == "standard":
        train, labels, order = real, data["real_labels"], data["order_standard"]
    else:
        train, labels, order = norm(iris.float() / 255), data["iri_labels"], data["order_iris"]

    # The least-squares start, in float64: [X 1] W = Y by the pseudo-inverse.
    with torch.no_grad():
        fa, fb = front.up_to(real, point), back.up_to(real, point)
    c_in, c_out = fa.shape[1], fb.shape[1]
    X = fa.permute(0, 2, 3, 1).reshape(-1, c_in).double()
    Y = fb.permute(0, 2, 3, 1).reshape(-1, c_out).double()
    X1 = torch.cat([X, torch.ones(X.shape[0], 1, dtype=torch.float64)], 1)
    W = torch.linalg.pinv(X1) @ Y
    init_residual = ((X1 @ W - Y).norm() / Y.norm()).item()
    t = nn.Conv2d(c_in, c_out, 1)
    with torch.no_grad():
        t.weight.copy_(W[:c_in].T.reshape(c_out, c_in, 1, 1))
        t.bias.copy_(W[c_in])
    init_weight = t.weight.detach().reshape(c_out, c_in).clone()

    def stitched(x):
        return tail.after(t(front.up_to(x, point)), point)

    def score():
        for m in (front, tail, back):
            m.eval()
        with torch.no_grad():
            logits = stitched(test)[0]
            return logits, scores(logits, back(test), data["test_labels"])

    init_logits, init_scores = score()
    back_before = [(b.running_mean.clone(), b.running_var.clone()) for b in bn_modules(back)]

    adapt = r["bn"] == "adapt"
    if adapt:
        front.train()
        tail.train()
        back.train()
        for b in bn_modules(back):
            b.momentum = 0.0  # batch statistics, running statistics kept as they are
    opt = torch.optim.Adam(t.parameters(), lr=s["lr"], weight_decay=s["weight_decay"])
    epochs, batch = s["epochs"], s["batch"]
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, [int(epochs / 3), int(2 * epochs / 3)], 0.1)
    objective = r["objective"]
    for e in range(epochs):
        o = order[e]
        for k in range(len(o) // batch):
            idx = o[k * batch : (k + 1) * batch]
            x, y = train[idx], labels[idx]
            with torch.no_grad():
                h = front.up_to(x, point)
                target_logits, target_feats = back.with_features(x)
            mine = t(h)
            logits, feats = tail.after(mine, point)
            if objective == "hlm":
                loss = F.cross_entropy(logits, y)
            elif objective == "slm":
                loss = -(F.softmax(target_logits, 1) * F.log_softmax(logits, 1)).sum(1).mean()
            elif objective == "dm":
                loss = rel(mine, target_feats[point])
            elif objective == "fula":
                loss = torch.stack([rel(feats[p], target_feats[p]) for p in feats]).mean()
            else:
                raise ValueError(objective)
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()
    for b, (mean, var) in zip(bn_modules(back), back_before):
        assert torch.equal(b.running_mean, mean) and torch.equal(b.running_var, var), "B's statistics moved"
    logits, trained = score()
    out = {
        f"{r['name']}.init_weight": init_weight,
        f"{r['name']}.init_logits": init_logits,
        f"{r['name']}.weight": t.weight.detach().reshape(c_out, c_in).clone(),
        f"{r['name']}.bias": t.bias.detach().clone(),
        f"{r['name']}.logits": logits,
    }
    summary = {
        "init": init_scores,
        "trained": trained,
        "init_residual": init_residual,
        "seconds": time.perf_counter() - started,
    }
    return out, summary


def main():
    d = sys.argv[1]
    s = json.load(open(os.path.join(d, "settings.json")))
    data = torch.load(os.path.join(d, "data.pt"))
    torch.set_num_threads(s.get("threads", 1))
    state = {name: torch.load(os.path.join(d, f"{name}.pt")) for name in ("front", "back")}
    mean = torch.tensor(s["mean"]).reshape(1, -1, 1, 1)
    std = torch.tensor(s["std"]).reshape(1, -1, 1, 1)
    norm = lambda x01: (x01 - mean) / std  # noqa: E731

    started = time.perf_counter()
    front = CifarResNet18(state["front"])
    images, residuals = generate_iris(front, data["iri_sources"], data["iri_seeds"], norm, s["iris"])
    torch.save({"images": images, "residuals": residuals}, os.path.join(d, "py_iris.pt"))
    summary = {"iris_seconds": time.perf_counter() - started}
    out = {}
    with torch.no_grad():
        back = CifarResNet18(state["back"]).eval()
        out["back_logits"] = back(norm(data["test"].float() / 255))
    for r in s["runs"]:
        o, summary[r["name"]] = run(r, state, data, images, norm, s)
        out.update(o)
    torch.save(out, os.path.join(d, "py_out.pt"))
    json.dump(summary, open(os.path.join(d, "py_scores.json"), "w"), indent=1)


if __name__ == "__main__":
    main()
