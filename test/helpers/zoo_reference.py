"""PyTorch twins of stitchlab's ResNet-18 (torchvision names) and ViT (timm names), written with
torch.nn only, and torchvision's own vgg16_bn and resnet50, for the parity tests in
test/models.test.ts.

Usage: python3 zoo_reference.py ARCH OPTIONS_JSON MODE DIR
  MODE save: build with seed 0, save DIR/py_state.pt, DIR/input.pt and DIR/py_logits.pt;
             for vgg16_bn also DIR/py_features.pt: features[:k+1](x) at each stitch point
             features.k (stitchlab's points, docs/method.md "Stitch points")
  MODE load: load DIR/ts_state.pt (saved by stitchlab), run DIR/input.pt, save DIR/py_logits_from_ts.pt
  MODE save,load: both, in one process (torch and torchvision start once)
"""

import json
import math
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F


class BasicBlock(nn.Module):
    def __init__(self, inp, planes, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(inp, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or inp != planes:
            self.downsample = nn.Sequential(nn.Conv2d(inp, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return F.relu(out + (self.downsample(x) if self.downsample is not None else x))


class ResNet18(nn.Module):
    def __init__(self, num_classes=10, width=1.0, stem="cifar"):
        super().__init__()
        w = [max(1, round(c * width)) for c in (64, 128, 256, 512)]
        self.imagenet = stem == "imagenet"
        self.conv1 = nn.Conv2d(3, w[0], 7, 2, 3, bias=False) if self.imagenet else nn.Conv2d(3, w[0], 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(w[0])
        inp = w[0]
        for i, planes in enumerate(w):
            blocks = [BasicBlock(inp if b == 0 else planes, planes, 2 if (b == 0 and i > 0) else 1) for b in range(2)]
            inp = planes
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(w[3], num_classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        if self.imagenet:
            x = F.max_pool2d(x, 3, 2, 1)
        for i in range(4):
            x = getattr(self, f"layer{i + 1}")(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class Attention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, dim * 3)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        B, N, C = x.shape
        qkv = self.qkv(x).reshape(B, N, 3, self.heads, C // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv.unbind(0)
        attn = (q @ k.transpose(-2, -1) * (1 / math.sqrt(C // self.heads))).softmax(-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, N, C))


class Mlp(nn.Module):
    def __init__(self, dim, hidden):
        super().__init__()
        self.fc1 = nn.Linear(dim, hidden)
        self.fc2 = nn.Linear(hidden, dim)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))


class Block(nn.Module):
    def __init__(self, dim, heads, ratio):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = Attention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = Mlp(dim, round(dim * ratio))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class PatchEmbed(nn.Module):
    def __init__(self, patch, dim):
        super().__init__()
        self.proj = nn.Conv2d(3, dim, patch, patch)


class ViT(nn.Module):
    def __init__(self, num_classes=10, image_size=32, patch=4, dim=192, depth=12, heads=3, ratio=4.0):
        super().__init__()
        tokens = (image_size // patch) ** 2 + 1
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, tokens, dim) * 0.02)
        self.patch_embed = PatchEmbed(patch, dim)
        self.blocks = nn.Sequential(*[Block(dim, heads, ratio) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, num_classes)

    def forward(self, x):
        x = self.patch_embed.proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], 1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


VGG_POINTS = (2, 5, 12, 22, 32, 42)


def build(arch, o):
    if arch == "vgg16_bn":
        # The real torchvision model, not a twin: its state dict must load into stitchlab unchanged.
        import torchvision

        return torchvision.models.vgg16_bn(num_classes=o.get("numClasses", 10))
    if arch == "resnet18":
        return ResNet18(width=o.get("width", 1.0), stem=o.get("stem", "cifar"))
    if arch == "resnet50":
        # torchvision's own resnet50; the CIFAR stem (stitchlab's default) swaps in a 3x3 conv1 of
        # stride 1 and drops the max-pool, as CIFAR ResNets do.
        import torchvision

        m = torchvision.models.resnet50(num_classes=o.get("numClasses", 10))
        if o.get("stem", "cifar") == "cifar":
            m.conv1 = nn.Conv2d(3, 64, 3, 1, 1, bias=False)
            m.maxpool = nn.Identity()
        return m
    d = VIT_DEFAULTS[arch]
    return ViT(image_size=o.get("imageSize", d["imageSize"]), patch=o.get("patchSize", d["patchSize"]),
               dim=o.get("embedDim", d["embedDim"]), depth=o.get("depth", 12), heads=o.get("numHeads", d["numHeads"]))


# The zoo's ViTs as createModel builds them without options (models/registry.ts).
VIT_DEFAULTS = {
    "vit_tiny_patch4_32": {"imageSize": 32, "patchSize": 4, "embedDim": 192, "numHeads": 3},
    "vit_base_patch16_224": {"imageSize": 224, "patchSize": 16, "embedDim": 768, "numHeads": 12},
    "vit_tiny_patch16_224": {"imageSize": 224, "patchSize": 16, "embedDim": 192, "numHeads": 3},
    "vit_small_patch16_224": {"imageSize": 224, "patchSize": 16, "embedDim": 384, "numHeads": 6},
}


def main():
    arch, opts, modes, d = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3], sys.argv[4]
    for mode in modes.split(","):
        run(arch, opts, mode, d)


def run(arch, opts, mode, d):
    torch.manual_seed(0)
    m = build(arch, opts)
    if mode == "save":
        # Non-trivial batch-norm statistics, so eval mode exercises the running buffers.
        size = opts.get("imageSize", VIT_DEFAULTS.get(arch, {}).get("imageSize", 32))
        if arch in ("resnet18", "resnet50", "vgg16_bn"):
            m.train()
            with torch.no_grad():
                for _ in range(3):
                    m(torch.randn(8, 3, size, size) * 2 + 0.5)
        m.eval()
        x = torch.randn(4, 3, size, size)
        torch.save(m.state_dict(), f"{d}/py_state.pt")
        torch.save({"x": x}, f"{d}/input.pt")
        with torch.no_grad():
            torch.save({"logits": m(x)}, f"{d}/py_logits.pt")
            if arch == "vgg16_bn":
                torch.save({f"features.{k}": m.features[: k + 1](x) for k in VGG_POINTS}, f"{d}/py_features.pt")
    else:
        m.load_state_dict(torch.load(f"{d}/ts_state.pt"))
        m.eval()
        x = torch.load(f"{d}/input.pt")["x"]
        with torch.no_grad():
            torch.save({"logits": m(x)}, f"{d}/py_logits_from_ts.pt")


if __name__ == "__main__":
    main()
