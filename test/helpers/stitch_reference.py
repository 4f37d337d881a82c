"""Invariance-aware stitching written directly in plain PyTorch, independent of stitchlab's code,
for test/fidelity.test.ts: a 1x1 convolution T between two ResNet-18s at a stitch point, started
as the identity, trained by soft-label matching (SLM) on an IRI set with every network in eval
mode (B's targets computed on the IRIs themselves), Adam with weight decay, the lr x0.1 at
floor(1/3) and floor(2/3) of the epochs, then scored against B on a test set (accuracy and
agreement probability). The batch order comes with the data, so both sides see the same batches.

Usage: python3 stitch_reference.py DIR
  reads DIR/front.pt, DIR/back.pt (state dicts), DIR/data.pt {iris: uint8 [N, 3, H, W],
  test: uint8 [M, 3, H, W], test_labels: int64 [M], order: int64 [epochs, N]} and
  DIR/settings.json {width, point, epochs, batch, lr, weight_decay, mean, std}
  writes DIR/py_scores.json {accuracy, back_accuracy, agreement_prob}.
"""

import json
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo_reference import ResNet18  # noqa: E402  (the architecture only, with torchvision's names)


def blocks(m):
    """The stem, then each residual block, named as the stitch points are."""
    yield "stem", lambda x: F.relu(m.bn1(m.conv1(x)))
    for i in range(1, 5):
        for b, block in enumerate(getattr(m, f"layer{i}")):
            yield f"layer{i}.{b}", block


def up_to(m, x, point):
    for name, f in blocks(m):
        x = f(x)
        if name == point:
            return x
    raise ValueError(point)


def after(m, h, point):
    seen = False
    for name, f in blocks(m):
        if seen:
            h = f(h)
        seen = seen or name == point
    return m.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))


def main():
    d = sys.argv[1]
    s = json.load(open(os.path.join(d, "settings.json")))
    data = torch.load(os.path.join(d, "data.pt"))
    torch.set_num_threads(1)
    nets = []
    for name in ("front", "back"):
        m = ResNet18(num_classes=10, width=s["width"])
        m.load_state_dict(torch.load(os.path.join(d, f"{name}.pt")))
        m.eval()
        for p in m.parameters():
            p.requires_grad_(False)
        nets.append(m)
    front, back = nets
    mean = torch.tensor(s["mean"]).reshape(1, 3, 1, 1)
    std = torch.tensor(s["std"]).reshape(1, 3, 1, 1)
    norm = lambda u8: (u8.float() / 255 - mean) / std  # noqa: E731

    c = up_to(front, norm(data["iris"][:1]), s["point"]).shape[1]
    t = nn.Conv2d(c, c, 1)
    with torch.no_grad():
        t.weight.copy_(torch.eye(c).reshape(c, c, 1, 1))
        t.bias.zero_()
    opt = torch.optim.Adam(t.parameters(), lr=s["lr"], weight_decay=s["weight_decay"])
    epochs = s["epochs"]
    sched = torch.optim.lr_scheduler.MultiStepLR(opt, [int(epochs / 3), int(2 * epochs / 3)], 0.1)
    batch = s["batch"]
    for e in range(epochs):
        order = data["order"][e]
        for k in range(len(order) // batch):
            x = norm(data["iris"][order[k * batch : (k + 1) * batch]])
            with torch.no_grad():
                h = up_to(front, x, s["point"])
                target = F.softmax(back(x), 1)
            loss = F.cross_entropy(after(back, t(h), s["point"]), target)
            opt.zero_grad()
            loss.backward()
            opt.step()
        sched.step()

    with torch.no_grad():
        x = norm(data["test"])
        p = F.softmax(after(back, t(up_to(front, x, s["point"])), s["point"]), 1)
        q = F.softmax(back(x), 1)
        y = data["test_labels"]
        agreement = (p * q).sum(1) / torch.maximum(p.square().sum(1), q.square().sum(1))
        out = {
            "accuracy": (p.argmax(1) == y).float().mean().item(),
            "back_accuracy": (q.argmax(1) == y).float().mean().item(),
            "agreement_prob": agreement.mean().item(),
        }
    json.dump(out, open(os.path.join(d, "py_scores.json"), "w"))


if __name__ == "__main__":
    main()
