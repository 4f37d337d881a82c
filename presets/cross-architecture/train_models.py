# The models of the cross-architecture study (presets/cross-architecture/study.yaml), trained in
# plain PyTorch and exported to ONNX, as a researcher brings models made elsewhere: two ResNet-18s
# (CIFAR stem, 1/4 width; seeds 0 and 1), a small ConvNeXt (torchvision's ConvNeXt, four stages of
# two blocks) and a small ViT (torchvision's VisionTransformer: 32 px, patch 4, six layers), each on
# Fashion-MNIST padded to 32 px and fed as three equal channels, normalised with the dataset's own
# statistics (stitchlab's fashion-mnist: mean 0.286, std 0.353), as stitchlab feeds it.
#
#   python3 presets/cross-architecture/train_models.py [--out DIR] [--epochs 4] [--limit 10000]
#
# Writes DIR/<model>.onnx (opset 17, dynamic batch axis) and DIR/accuracies.json. The default
# (4 epochs on 10,000 images) took 7.5 minutes on 2 CPU cores (test accuracies 0.89, 0.89, 0.85, 0.76).
import argparse
import gzip
import json
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.models.convnext import CNBlockConfig, ConvNeXt
from torchvision.models.vision_transformer import VisionTransformer

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from stitchlab import torchscript_export  # noqa: E402

FASHION_MNIST = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.286, 0.353


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i: 8 + 4 * i], "big") for i in range(dims)]
    return torch.frombuffer(bytearray(data[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def load(root, split, limit):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(root, f"{prefix}-images-idx3-ubyte.gz"))[:limit]
    y = read_idx(os.path.join(root, f"{prefix}-labels-idx1-ubyte.gz"))[:limit].long()
    x = F.pad(x.float().div(255), (2, 2, 2, 2)).unsqueeze(1).expand(-1, 3, -1, -1)
    return (x - MEAN) / STD, y


class BasicBlock(nn.Module):
    def __init__(self, cin, cout, stride):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout))

    def forward(self, x):
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + (x if self.downsample is None else self.downsample(x)))


class ResNet18(nn.Module):
    """torchvision's ResNet-18 layout and names with the CIFAR stem (3x3 conv, no max pool), at a width."""

    def __init__(self, width=16, classes=10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        chans = [width, 2 * width, 4 * width, 8 * width]
        cin = width
        for i, c in enumerate(chans):
            stride = 1 if i == 0 else 2
            setattr(self, f"layer{i + 1}", nn.Sequential(BasicBlock(cin, c, stride), BasicBlock(c, c, 1)))
            cin = c
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, classes)

    def forward(self, x):
        x = self.relu(self.bn1(self.conv1(x)))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def convnext_small():
    # torchvision's ConvNeXt (patchify stem 4x4, LayerNorm, depthwise 7x7, layer scale) at 32 px:
    # stages of two blocks at widths 32, 64, 128, 256.
    setting = [CNBlockConfig(32, 64, 2), CNBlockConfig(64, 128, 2), CNBlockConfig(128, 256, 2), CNBlockConfig(256, None, 2)]
    return ConvNeXt(setting, stochastic_depth_prob=0.0, num_classes=10)


def vit_small():
    return VisionTransformer(32, 4, num_layers=6, num_heads=3, hidden_dim=96, mlp_dim=192, num_classes=10)


MODELS = {
    "resnet18-s0": (lambda: ResNet18(), 0, 0.05),
    "resnet18-s1": (lambda: ResNet18(), 1, 0.05),
    "convnext": (convnext_small, 0, 0.002),
    "vit": (vit_small, 0, 0.001),
}


def train(name, make, seed, lr, data, test, epochs, batch):
    torch.manual_seed(seed)
    model = make()
    # SGD for the ResNets (their recipe), AdamW for the ConvNeXt and the ViT (theirs).
    opt = (torch.optim.SGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=5e-4) if name.startswith("resnet")
           else torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.05))
    x, y = data
    steps = epochs * (len(x) // batch)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=lr, total_steps=steps)
    g = torch.Generator().manual_seed(seed)
    for _ in range(epochs):
        model.train()
        order = torch.randperm(len(x), generator=g)
        for i in range(len(x) // batch):
            idx = order[i * batch:(i + 1) * batch]
            loss = F.cross_entropy(model(x[idx]), y[idx])
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
    model.eval()
    with torch.no_grad():
        tx, ty = test
        acc = sum((model(tx[i:i + 500]).argmax(1) == ty[i:i + 500]).sum().item() for i in range(0, len(tx), 500)) / len(tx)
    return model, acc


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser()
    p.add_argument("--out", default=os.path.join(here, "models"))
    p.add_argument("--root", default=FASHION_MNIST)
    p.add_argument("--epochs", type=int, default=4)
    p.add_argument("--limit", type=int, default=10000)
    p.add_argument("--test-limit", type=int, default=2000)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--threads", type=int, default=os.cpu_count())
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    os.makedirs(a.out, exist_ok=True)
    data = load(a.root, "train", a.limit)
    test = load(a.root, "test", a.test_limit)
    accuracies = {}
    for name, (make, seed, lr) in MODELS.items():
        t = time.time()
        model, acc = train(name, make, seed, lr, data, test, a.epochs, a.batch)
        # PRESERVE keeps each batch norm a node (the default eval export folds it into the
        # convolutions), so that stitching's 'adapt' reaches the ResNet's as it does the zoo's.
        torch.onnx.export(model.eval(), torch.zeros(2, 3, 32, 32), os.path.join(a.out, f"{name}.onnx"),
                          opset_version=17, input_names=["image"], output_names=["logits"],
                          dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
                          training=torch.onnx.TrainingMode.PRESERVE, **torchscript_export())
        accuracies[name] = {"test_accuracy": acc, "seconds": round(time.time() - t, 1)}
        print(f"{name}: test accuracy {acc:.3f} ({time.time() - t:.0f} s)", flush=True)
    recipe = {"epochs": a.epochs, "limit": a.limit, "test_limit": a.test_limit, "batch": a.batch, "torch": torch.__version__}
    with open(os.path.join(a.out, "accuracies.json"), "w") as f:
        json.dump({"recipe": recipe, "models": accuracies}, f, indent=2)


if __name__ == "__main__":
    main()
