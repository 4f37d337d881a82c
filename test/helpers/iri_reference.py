"""IRI generation (docs/method.md, "IRI generation") written directly in PyTorch, for
test/iris.test.ts: signed-gradient descent on ||A(x') - A(x)||_F / ||A(x)||_F in pixel space,
clamped to [0, 1], from uniform noise.

Usage: python3 iri_reference.py DIR SETTINGS_JSON
  reads DIR/ts_state.pt (a ResNet-18 state dict saved by stitchlab) and DIR/iri_input.pt {x: uint8},
  writes DIR/py_iris.pt {images: uint8, residuals: float32}.
"""

import json
import os
import sys

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zoo_reference import ResNet18  # noqa: E402


def forward_to(m, x, point):
    x = F.relu(m.bn1(m.conv1(x)))
    if point == "stem":
        return x
    for i in range(1, 5):
        for b, block in enumerate(getattr(m, f"layer{i}")):
            x = block(x)
            if point == f"layer{i}.{b}":
                return x
    raise ValueError(point)


def main():
    d, s = sys.argv[1], json.loads(sys.argv[2])
    m = ResNet18(width=s["width"])
    m.load_state_dict(torch.load(f"{d}/ts_state.pt"))
    m.eval()
    for p in m.parameters():
        p.requires_grad_(False)
    x = torch.load(f"{d}/iri_input.pt")["x"]
    mean = torch.tensor(s["mean"]).reshape(1, -1, 1, 1)
    std = torch.tensor(s["std"]).reshape(1, -1, 1, 1)
    feats = lambda p01: forward_to(m, (p01 - mean) / std, s["point"])  # noqa: E731
    x01 = x.float() / 255
    with torch.no_grad():
        target = feats(x01)
    tnorm = target.norm().item()
    torch.manual_seed(s["seed"])
    p = torch.rand_like(x01).requires_grad_(True)
    for _ in range(s["steps"]):
        loss = (feats(p) - target).norm() / tnorm
        loss.backward()
        with torch.no_grad():
            p -= s["stepSize"] * p.grad.sign()
            p.clamp_(0, 1)
        p.grad = None
    images = (p.detach() * 255).round().clamp(0, 255).to(torch.uint8)
    with torch.no_grad():
        f = feats(images.float() / 255)
        res = (f - target).flatten(1).norm(dim=1) / (target.flatten(1).norm(dim=1) + 1e-12)
    torch.save({"images": images, "residuals": res}, f"{d}/py_iris.pt")


if __name__ == "__main__":
    main()
