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

from foreign_reference import cifar_resnet18

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from stitchlab import torchscript_export  # noqa: E402


def main():
    out = sys.argv[1]
    torch.set_num_threads(1)
    for name, seed in (("a", 0), ("b", 1)):
        m = cifar_resnet18(seed)
        torch.save(m.state_dict(), os.path.join(out, f"{name}.pt"))
        torch.onnx.export(m, torch.rand(2, 3, 32, 32), os.path.join(out, f"{name}.onnx"), opset_version=17,
                          input_names=["x"], dynamic_axes={"x": {0: "n"}},
                          training=torch.onnx.TrainingMode.PRESERVE, **torchscript_export())
        if name == "a":
            torch.onnx.export(m, torch.rand(2, 3, 32, 32), os.path.join(out, "a-folded.onnx"), opset_version=17,
                              input_names=["x"], dynamic_axes={"x": {0: "n"}}, **torchscript_export())


if __name__ == "__main__":
    main()
