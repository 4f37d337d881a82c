"""The PyTorch side of the ONNX benchmark (bench/onnx.ts): builds a model (torchvision's ResNet-18
at 32 px, or the cross-architecture preset's ConvNeXt or ViT), exports it to ONNX for the
TypeScript side, and on each {"op": "step"} times one step of what an IRI descent does with a
front: the forward pass and the gradient with respect to the input (eval mode), on the same
batch; with --forward, the forward pass alone (eval mode, no gradient). With --device cuda the
model and batch sit on the GPU and each timed step ends with a synchronisation. Greets with
{"onnx": path, "torch": version, "threads": n, "device": ..., "gpu": ...}.

usage: onnx_torch.py --model resnet18|convnext|vit --batch N --threads T --out DIR [--forward] [--device D]
"""

import argparse
import json
import os
import sys

import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "presets", "cross-architecture"))
from train_models import convnext_small, vit_small  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "python"))
from stitchlab import torchscript_export  # noqa: E402
from train_torch import device_info, serve, use_device  # noqa: E402

MODELS = {
    "resnet18": lambda: torchvision.models.resnet18(num_classes=10),
    "convnext": convnext_small,
    "vit": vit_small,
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=list(MODELS), required=True)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", required=True)
    p.add_argument("--forward", action="store_true")
    p.add_argument("--device", default="cpu")
    a = p.parse_args()
    device, sync = use_device(a.device)
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    model = MODELS[a.model]().eval()
    path = os.path.join(a.out, f"{a.model}.onnx")
    torch.onnx.export(model, torch.zeros(2, 3, 32, 32), path, opset_version=17, input_names=["image"],
                      output_names=["logits"], dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
                      training=torch.onnx.TrainingMode.PRESERVE, **torchscript_export())
    g = torch.Generator().manual_seed(1)
    x = torch.rand(a.batch, 3, 32, 32, generator=g).to(device)
    r = torch.linspace(-1, 1, a.batch * 10).reshape(a.batch, 10).to(device)
    model.to(device)
    print(json.dumps({"onnx": path, "torch": torch.__version__, "threads": torch.get_num_threads(),
                      **device_info(device)}), flush=True)

    def step():
        if a.forward:
            with torch.no_grad():
                model(x)
        else:
            xg = x.clone().requires_grad_(True)
            torch.autograd.grad((model(xg) * r).sum(), xg)

    serve(step, sync)


if __name__ == "__main__":
    main()
