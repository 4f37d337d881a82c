# The ONNX test models and PyTorch's answers on them (test/onnx.test.ts): each classification
# model issue 39 names, with random weights, exported by torch.onnx.export at a small input size,
# and for each a fixed input, its logits, and PyTorch autograd's gradients of a fixed linear
# function of the logits with respect to the input, to the features at one stitch point (the
# gradient through the back's tail), and to the classifier's weight.
#
# usage: onnx_models.py OUT_DIR OPSET [name ...]
# writes OUT_DIR/<name>.onnx and OUT_DIR/<name>.json (lists of floats, row-major, with shapes).
import json
import os
import sys

import torch
import torch.nn as nn
import torchvision
from torchvision.models import vgg as tv_vgg
from torchvision.models import vision_transformer as tv_vit

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
from stitchlab import torchscript_export  # noqa: E402

torch.set_num_threads(1)


class TimmStyleViT(nn.Module):
    """A ViT written as timm writes one (patch_embed, cls_token, pos_embed, blocks, norm, head):
    fused qkv, pre-norm blocks, GELU MLP, the class token read out. timm is not a Debian package,
    so its layout is rebuilt here from plain layers."""

    def __init__(self, size=32, patch=8, dim=32, depth=3, heads=2, classes=10):
        super().__init__()
        self.heads = heads
        self.patch_embed = nn.Conv2d(3, dim, patch, patch)
        tokens = (size // patch) ** 2
        self.cls_token = nn.Parameter(torch.randn(1, 1, dim) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, tokens + 1, dim) * 0.02)
        self.blocks = nn.Sequential(*[TimmBlock(dim, heads) for _ in range(depth)])
        self.norm = nn.LayerNorm(dim, eps=1e-6)
        self.head = nn.Linear(dim, classes)

    def forward(self, x):
        x = self.patch_embed(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        x = self.norm(self.blocks(x))
        return self.head(x[:, 0])


class TimmBlock(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim, eps=1e-6)
        self.attn = TimmAttention(dim, heads)
        self.norm2 = nn.LayerNorm(dim, eps=1e-6)
        self.mlp = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, x):
        x = x + self.attn(self.norm1(x))
        return x + self.mlp(self.norm2(x))


class TimmAttention(nn.Module):
    def __init__(self, dim, heads):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)

    def forward(self, x):
        b, n, c = x.shape
        qkv = self.qkv(x).reshape(b, n, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        q, k, v = qkv[0], qkv[1], qkv[2]
        attn = (q @ k.transpose(-2, -1)) * (c // self.heads) ** -0.5
        x = (attn.softmax(dim=-1) @ v).transpose(1, 2).reshape(b, n, c)
        return self.proj(x)


def small_vgg16_bn():
    # vgg16_bn's layout (13 convolutions with batch norm, five max pools, the three-layer
    # classifier) at 1/8 of its widths, so that the test reads a few MB rather than 528.
    cfg = [8, 8, "M", 16, 16, "M", 32, 32, 32, "M", 64, 64, 64, "M", 64, 64, 64, "M"]
    m = tv_vgg.VGG(tv_vgg.make_layers(cfg, batch_norm=True), num_classes=10)
    m.classifier = nn.Sequential(
        nn.Linear(64 * 7 * 7, 64), nn.ReLU(True), nn.Dropout(), nn.Linear(64, 64), nn.ReLU(True), nn.Dropout(),
        nn.Linear(64, 10),
    )
    return m


# name: (constructor, input side, a stitch point's module path, the classifier weight's name)
MODELS = {
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), 32, "layer2.1", "fc.weight"),
    # Batch norm kept as nodes (the export the README asks for), with statistics and affine
    # parameters away from their initialisation, where eval-mode batch norm is nearly the identity.
    "resnet18_bn": (lambda: with_batch_norm_stats(torchvision.models.resnet18(num_classes=10)), 32, "layer2.1", "fc.weight"),
    "resnet50": (lambda: torchvision.models.resnet50(num_classes=10), 32, "layer3.0", "fc.weight"),
    "vgg16_bn": (small_vgg16_bn, 224, "features.22", "classifier.6.weight"),
    "mobilenet_v3_small": (
        lambda: torchvision.models.mobilenet_v3_small(num_classes=10), 32, "features.4", "classifier.3.weight"),
    "efficientnet_b0": (
        lambda: torchvision.models.efficientnet_b0(num_classes=10), 32, "features.3", "classifier.1.weight"),
    "convnext_tiny": (lambda: torchvision.models.convnext_tiny(num_classes=10), 32, "features.3", "classifier.2.weight"),
    "regnet_y_400mf": (
        lambda: torchvision.models.regnet_y_400mf(num_classes=10), 32, "trunk_output.block2", "fc.weight"),
    "densenet121": (
        lambda: torchvision.models.densenet121(num_classes=10), 32, "features.transition2", "classifier.weight"),
    # vit_b_16's layout (torchvision's VisionTransformer) at a small size: 32 px, patch 8, 2 layers.
    "vit_b_16": (
        lambda: tv_vit.VisionTransformer(32, 8, num_layers=2, num_heads=2, hidden_dim=32, mlp_dim=64, num_classes=10),
        32, "encoder.layers.encoder_layer_0", "heads.head.weight"),
    "swin_t": (lambda: torchvision.models.swin_t(num_classes=10), 64, "features.2", "head.weight"),
    "timm_vit": (TimmStyleViT, 32, "blocks.1", "head.weight"),
}


def with_batch_norm_stats(model):
    """The model with every batch norm's statistics and affine parameters drawn at random."""
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.normal_(0, 0.3)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.5, 1.5)
                m.bias.normal_(0, 0.3)
    return model


# Exported with batch norm kept as nodes (training=PRESERVE on a model in eval mode); the rest in
# eval mode, where the exporter folds each batch norm into its convolution.
KEEP_BATCH_NORM = {"resnet18_bn"}


def main():
    out, opset = sys.argv[1], int(sys.argv[2])
    names = sys.argv[3:] or list(MODELS)
    for name in names:
        make, side, point, weight = MODELS[name]
        torch.manual_seed(0)
        model = make().eval()
        # Some heads start at zero (torchvision's ViT): give every weight a random value.
        with torch.no_grad():
            for p in model.parameters():
                if p.abs().sum() == 0:
                    p.normal_(0, 0.02)
        x = torch.rand(2, 3, side, side)
        keep = {"training": torch.onnx.TrainingMode.PRESERVE} if name in KEEP_BATCH_NORM else {}
        torch.onnx.export(
            model, x, f"{out}/{name}.onnx", opset_version=opset, input_names=["image"], output_names=["logits"],
            dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}}, **keep, **torchscript_export())
        seen = {}
        module = dict(model.named_modules())[point]
        handle = module.register_forward_hook(lambda m, i, o: seen.__setitem__("h", o))
        xg = x.clone().requires_grad_(True)
        logits = model(xg)
        handle.remove()
        h = seen["h"]
        h.retain_grad()
        r = torch.linspace(-1, 1, logits.numel()).reshape(logits.shape)
        (logits * r).sum().backward()
        w = dict(model.named_parameters())[weight]
        ref = {
            "side": side, "point": point, "weight": weight,
            "x": x.flatten().tolist(), "r": r.flatten().tolist(),
            "logits": logits.detach().flatten().tolist(), "logits_shape": list(logits.shape),
            "dx": xg.grad.flatten().tolist(),
            "dh": h.grad.flatten().tolist(), "h_shape": list(h.shape),
            "dw": w.grad.flatten().tolist(), "w_shape": list(w.shape),
            "torch": torch.__version__,
        }
        with open(f"{out}/{name}.json", "w") as f:
            json.dump(ref, f)
        print(name, flush=True)


if __name__ == "__main__":
    main()
