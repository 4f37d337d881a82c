"""Weights made elsewhere, as a PyTorch user brings them (test/byo.test.ts): torchvision's
resnet18(num_classes=10) with a CIFAR stem (3x3 conv1 of stride 1, no max-pool: stitchlab's
resnet18 default), seeded, with made-up batch-norm statistics so that eval mode is not the
identity, saved in the forms training scripts save, with its eval-mode logits on a fixed input.

  foreign_reference.py OUT_DIR
"""

import os
import sys

import torch
import torchvision


def cifar_resnet18(seed):
    """torchvision's resnet18(num_classes=10) with the CIFAR stem, seeded, with made-up batch-norm
    statistics, in eval mode (also test/helpers/two_routes.py's model)."""
    torch.manual_seed(seed)
    m = torchvision.models.resnet18(num_classes=10)
    m.conv1 = torch.nn.Conv2d(3, 64, 3, 1, 1, bias=False)
    m.maxpool = torch.nn.Identity()
    with torch.no_grad():
        for bn in m.modules():
            if isinstance(bn, torch.nn.BatchNorm2d):
                bn.running_mean.uniform_(-0.1, 0.1)
                bn.running_var.uniform_(0.5, 1.5)
    return m.eval()


def main():
    out = sys.argv[1]
    m = cifar_resnet18(0)
    sd = m.state_dict()
    torch.save(sd, os.path.join(out, "plain.pt"))
    torch.save({"model_state_dict": sd, "epoch": 3}, os.path.join(out, "model_state_dict.pt"))
    torch.save({"state_dict": sd}, os.path.join(out, "state_dict.pt"))
    torch.save({"model": sd, "args": {"lr": 0.1}}, os.path.join(out, "model.pt"))
    torch.save(torch.nn.DataParallel(m).state_dict(), os.path.join(out, "dataparallel.pt"))
    torch.save(m, os.path.join(out, "whole.pt"))
    # An ImageNet-stem model (7x7 conv1, max-pool): trained on 224 px images.
    torch.save(torchvision.models.resnet18(num_classes=10).state_dict(), os.path.join(out, "imagenet_stem.pt"))
    x = torch.rand(4, 3, 32, 32)
    with torch.no_grad():
        logits = m(x)
    torch.save({"x": x, "logits": logits}, os.path.join(out, "io.pt"))


if __name__ == "__main__":
    main()
