"""Two routes to one model (test/onnx-routes.test.ts): two torchvision ResNet-18s (CIFAR stem, the
zoo's default: a 3x3 conv1 of stride 1 and no max-pool; 10 classes), seeds 0 and 1, with made-up
batch-norm statistics so that eval mode is not the identity, each written twice: its state dict
(NAME.pt, for the zoo's resnet18) and the same module exported to ONNX (NAME.onnx, opset 17, a
dynamic batch axis, batch norm kept as nodes), as the README tells a user to export; and A once
more as torch.onnx.export's default eval export writes it (a-folded.onnx: each batch norm folded
into its convolution).

  two_routes.py OUT_DIR
"""

import os
import sys

import torch
import torchvision


def model(seed):
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
    torch.set_num_threads(1)
    for name, seed in (("a", 0), ("b", 1)):
        m = model(seed)
        torch.save(m.state_dict(), os.path.join(out, f"{name}.pt"))
        torch.onnx.export(m, torch.rand(2, 3, 32, 32), os.path.join(out, f"{name}.onnx"), opset_version=17,
                          input_names=["x"], dynamic_axes={"x": {0: "n"}},
                          training=torch.onnx.TrainingMode.PRESERVE)
        if name == "a":
            torch.onnx.export(m, torch.rand(2, 3, 32, 32), os.path.join(out, "a-folded.onnx"), opset_version=17,
                              input_names=["x"], dynamic_axes={"x": {0: "n"}})


if __name__ == "__main__":
    main()
