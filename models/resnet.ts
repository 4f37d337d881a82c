// ResNet-18 with torchvision's parameter names (conv1, bn1, layer1.0.conv1, ..., fc). The CIFAR
// stem (3x3 conv, stride 1, no max-pool) is the default; the ImageNet stem (7x7 stride 2 and a
// 3x3 max-pool) is an option. Stitch points: the stem output (after its ReLU; with the ImageNet
// stem before the max-pool, which then runs on the way to layer1.0, as the reference hooks the
// stem's ReLU: models/model_utils.py, resnet 'post_act') and the 8 BasicBlock outputs.
import { AdaptiveAvgPool2d, BatchNorm2d, Conv2d, Linear, MaxPool2d, Sequential } from "../nn/layers.js";
import { Module } from "../nn/module.js";
import type * as torch from "../torch/index.js";
import { type Stage, StitchableModel } from "./stitchable.js";

type Tensor = torch.Tensor;

export interface ResNetOptions {
  numClasses?: number;
  /** Width multiplier: stage widths are round(64w), round(128w), round(256w), round(512w). */
  width?: number;
  stem?: "cifar" | "imagenet";
  /** Input height and width, for the stitch points' spatial sizes (32 for CIFAR). */
  imageSize?: number;
}

export class BasicBlock extends Module {
  readonly conv1: Conv2d;
  readonly bn1: BatchNorm2d;
  readonly conv2: Conv2d;
  readonly bn2: BatchNorm2d;
  readonly downsample: Sequential | null;
  constructor(inPlanes: number, planes: number, stride: number) {
    super();
    this.conv1 = this.child("conv1", new Conv2d(inPlanes, planes, 3, { stride, padding: 1, bias: false }));
    this.bn1 = this.child("bn1", new BatchNorm2d(planes));
    this.conv2 = this.child("conv2", new Conv2d(planes, planes, 3, { padding: 1, bias: false }));
    this.bn2 = this.child("bn2", new BatchNorm2d(planes));
    this.downsample =
      stride !== 1 || inPlanes !== planes
        ? this.child(
            "downsample",
            new Sequential(new Conv2d(inPlanes, planes, 1, { stride, bias: false }), new BatchNorm2d(planes)),
          )
        : null;
  }
  forward(x: Tensor): Tensor {
    // Each intermediate is released as soon as the next op has read it, as Python's reference
    // counting does: a block's scope would otherwise hold five full-size maps until its end
    // (measured: 2-4x PyTorch's page faults in no-grad forwards). Autograd keeps its own
    // references to what backward needs, so releasing ours is safe with gradients too.
    const step = (t: Tensor, f: (t: Tensor) => Tensor): Tensor => {
      const next = f(t);
      t.dispose();
      return next;
    };
    let out = this.conv1.forward(x);
    out = step(out, (t) => this.bn1.forward(t));
    out = step(out, (t) => t.relu());
    out = step(out, (t) => this.conv2.forward(t));
    out = step(out, (t) => this.bn2.forward(t));
    const identity = this.downsample ? this.downsample.forward(x) : x;
    out = step(out, (t) => t.add(identity));
    if (identity !== x) identity.dispose();
    return step(out, (t) => t.relu());
  }
}

export class ResNet18 extends StitchableModel {
  readonly arch = "resnet18";
  readonly config: Required<ResNetOptions>;
  protected readonly stageList: Stage[];
  readonly conv1: Conv2d;
  readonly bn1: BatchNorm2d;
  readonly fc: Linear;
  readonly layers: Sequential[];
  readonly #pool = new AdaptiveAvgPool2d(1);
  readonly #maxpool = new MaxPool2d(3, 2, 1);

  constructor(opts: ResNetOptions = {}) {
    super();
    const c: Required<ResNetOptions> = {
      numClasses: opts.numClasses ?? 10,
      width: opts.width ?? 1,
      stem: opts.stem ?? "cifar",
      imageSize: opts.imageSize ?? (opts.stem === "imagenet" ? 224 : 32),
    };
    this.config = c;
    const widths = [64, 128, 256, 512].map((w) => Math.max(1, Math.round(w * c.width)));
    const imagenet = c.stem === "imagenet";
    this.conv1 = this.child(
      "conv1",
      imagenet
        ? new Conv2d(3, widths[0], 7, { stride: 2, padding: 3, bias: false })
        : new Conv2d(3, widths[0], 3, { stride: 1, padding: 1, bias: false }),
    );
    this.bn1 = this.child("bn1", new BatchNorm2d(widths[0]));
    // Both the 7x7 stride-2 conv (padding 3) and the 3x3 stride-2 max-pool (padding 1) map a
    // size s to floor((s - 1) / 2) + 1.
    const half = (s: number) => Math.floor((s - 1) / 2) + 1;
    let size = imagenet ? half(c.imageSize) : c.imageSize;
    const point = (name: string, channels: number) =>
      ({ name, channels, height: size, width: size, kind: "cnn" }) as const;
    this.stageList = [
      { name: "stem", point: point("stem", widths[0]), run: (x) => this.bn1.forward(this.conv1.forward(x)).relu() },
    ];
    if (imagenet) {
      this.stageList.push({ name: "maxpool", point: null, run: (h) => this.#maxpool.forward(h) });
      size = half(size);
    }
    this.layers = [];
    let inPlanes = widths[0];
    widths.forEach((planes, li) => {
      const blocks = [0, 1].map(
        (bi) => new BasicBlock(bi === 0 ? inPlanes : planes, planes, bi === 0 && li > 0 ? 2 : 1),
      );
      inPlanes = planes;
      this.layers.push(this.child(`layer${li + 1}`, new Sequential(...blocks)));
      blocks.forEach((b, bi) => {
        if (bi === 0 && li > 0) size = Math.floor((size - 1) / 2) + 1;
        this.stageList.push({
          name: `layer${li + 1}.${bi}`,
          point: point(`layer${li + 1}.${bi}`, planes),
          run: (h) => b.forward(h),
        });
      });
    });
    this.fc = this.child("fc", new Linear(widths[3], c.numClasses));
  }

  protected head(h: Tensor): Tensor {
    return this.fc.forward(this.#pool.forward(h).flatten(1));
  }
}
