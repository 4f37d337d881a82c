// VGG-16 with batch norm for CIFAR, named as torchvision's vgg16_bn features ("features.0" is the
// first conv, "features.1" its BN, ...) with one linear classifier on the 512-d pooled features
// (the usual CIFAR variant; torchvision's 4096-wide ImageNet head would dwarf the network).
// Stitch points: the ends of the five conv stages (after each max-pool) and the classifier
// input (after global average pooling, [N, 512, 1, 1]).
import {
  AdaptiveAvgPool2d,
  BatchNorm2d,
  Conv2d,
  Linear,
  MaxPool2d,
  ReLU,
  runInOrder,
  Sequential,
} from "../nn/layers.js";
import type { Module } from "../nn/module.js";
import type * as torch from "../torch/index.js";
import { type Stage, StitchableModel } from "./stitchable.js";

type Tensor = torch.Tensor;

const CFG: (number | "M")[] = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"];

export interface VggOptions {
  numClasses?: number;
  width?: number;
  imageSize?: number;
}

export class Vgg16Bn extends StitchableModel {
  readonly arch = "vgg16_bn";
  readonly config: Required<VggOptions>;
  protected readonly stageList: Stage[] = [];
  readonly features: Sequential;
  readonly classifier: Linear;
  readonly #pool = new AdaptiveAvgPool2d(1);

  constructor(opts: VggOptions = {}) {
    super();
    const c: Required<VggOptions> = {
      numClasses: opts.numClasses ?? 10,
      width: opts.width ?? 1,
      imageSize: opts.imageSize ?? 32,
    };
    this.config = c;
    const layers: Module[] = [];
    let inCh = 3;
    let size = c.imageSize;
    let stageStart = 0;
    const stages: { end: number; channels: number; size: number; from: number }[] = [];
    for (const v of CFG) {
      if (v === "M") {
        layers.push(new MaxPool2d(2, 2));
        size = Math.floor(size / 2);
        stages.push({ from: stageStart, end: layers.length - 1, channels: inCh, size });
        stageStart = layers.length;
      } else {
        const out = Math.max(1, Math.round(v * c.width));
        layers.push(new Conv2d(inCh, out, 3, { padding: 1 }), new BatchNorm2d(out), new ReLU());
        inCh = out;
      }
    }
    this.features = this.child("features", new Sequential(...layers));
    for (const s of stages) {
      const name = `features.${s.end}`;
      const mods = this.features.layers.slice(s.from, s.end + 1);
      this.stageList.push({
        name,
        point: { name, channels: s.channels, height: s.size, width: s.size, kind: "cnn" },
        run: (h) => runInOrder(h, mods),
      });
    }
    this.stageList.push({
      name: "avgpool",
      point: { name: "avgpool", channels: inCh, height: 1, width: 1, kind: "cnn" },
      run: (h) => this.#pool.forward(h),
    });
    this.classifier = this.child("classifier", new Linear(inCh, c.numClasses));
  }

  protected head(h: Tensor): Tensor {
    return this.classifier.forward(h.flatten(1));
  }
}
