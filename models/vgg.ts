// VGG-16 with batch norm in torchvision's layout (torchvision.models.vgg16_bn), so a torchvision
// state dict loads as it is: `features` (conv / BN / ReLU triples and max-pools, numbered as
// nn.Sequential numbers them), `avgpool` (adaptive average pool to 7x7) and `classifier`
// (Linear 25088-4096, ReLU, Dropout, Linear 4096-4096, ReLU, Dropout, Linear 4096-K: parameters
// classifier.0, classifier.3, classifier.6). The paper's VGG is this torchvision model on
// CIFAR-sized inputs (the reference's models/vgg/vgg_architecture.py): at 32 px the features
// end at 1x1 and the adaptive pool repeats that pixel into the 7x7 grid the classifier expects.
//
// Stitch points (docs/method.md, "Stitch points"; the reference's models/model_utils.py, 'vgg16'),
// all post-ReLU: features.2 (conv1_1's ReLU), then the last ReLU of each stage, before its
// max-pool: features.5, .12, .22, .32, .42.
import {
  AdaptiveAvgPool2d,
  BatchNorm2d,
  Conv2d,
  Dropout,
  Linear,
  MaxPool2d,
  ReLU,
  runInOrder,
  Sequential,
} from "../nn/layers.js";
import type { Module } from "../nn/module.js";
import * as torch from "../torch/index.js";
import { type ModelSize, type Stage, StitchableModel } from "./stitchable.js";

type Tensor = torch.Tensor;

// torchvision's cfgs["D"].
const CFG: (number | "M")[] = [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"];
/** Indices in `features` of the ReLUs that are stitch points. */
const POINTS = [2, 5, 12, 22, 32, 42];
/** torchvision's avgpool output size and classifier width. */
const POOL = 7;
const HIDDEN = 4096;

export interface VggOptions {
  numClasses?: number;
  /**
   * Width multiplier for small CPU runs: conv channels become round(64w) ... round(512w) and the
   * classifier's hidden width round(4096w), so the whole network shrinks together (at 1/8 the
   * classifier would otherwise hold 30M of the model's 31M parameters). 1 is torchvision's.
   */
  width?: number;
  /** Input height and width, for the stitch points' spatial sizes (32 for CIFAR). */
  imageSize?: number;
}

/**
 * torchvision's VGG initialisation (torchvision/models/vgg.py, init_weights): convolutions
 * kaiming_normal_(mode="fan_out", nonlinearity="relu") with zero bias, batch norm 1 and 0 (as
 * built), linear layers N(0, 0.01) with zero bias.
 */
function initLikeTorchvision(features: Module[], classifier: Module[]): void {
  const init = (m: Module, std: number) => {
    const p = Object.fromEntries(m.namedParameters());
    p.weight.normal_(0, std);
    p.bias.zero_();
  };
  torch.noGrad(() => {
    for (const m of features)
      if (m instanceof Conv2d) init(m, Math.sqrt(2 / (m.outChannels * m.kernelSize * m.kernelSize)));
    for (const m of classifier) if (m instanceof Linear) init(m, 0.01);
  });
}

/** The options with their defaults, once: the constructor and vggSize read the same. */
export function resolveVggOptions(opts: VggOptions = {}): Required<VggOptions> {
  return { numClasses: opts.numClasses ?? 10, width: opts.width ?? 1, imageSize: opts.imageSize ?? 32 };
}

/**
 * The size of `new Vgg16Bn(opts)` (ModelSize), from the same configuration as the constructor:
 * convolutions with bias, batch norms, the classifier; every conv, batch-norm, ReLU and max-pool
 * output (a max-pool's indices too, int64: two floats each), the pool and the classifier's
 * outputs as activations.
 */
export function vggSize(opts: VggOptions = {}): ModelSize {
  const { width, numClasses, imageSize } = resolveVggOptions(opts);
  const scaled = (v: number) => Math.max(1, Math.round(v * width));
  let parameters = 0;
  let buffers = 0;
  let activations = 0;
  let inCh = 3;
  let size = imageSize;
  for (const v of CFG) {
    if (v === "M") {
      size = Math.floor(size / 2);
      activations += 3 * inCh * size * size;
    } else {
      const out = scaled(v);
      parameters += inCh * out * 9 + out + 2 * out;
      buffers += 2 * out + 1;
      activations += 3 * out * size * size;
      inCh = out;
    }
  }
  const hidden = scaled(HIDDEN);
  const pooled = inCh * POOL * POOL;
  parameters += pooled * hidden + hidden + hidden * hidden + hidden + hidden * numClasses + numClasses;
  activations += pooled + 6 * hidden + numClasses;
  return { parameters, buffers, activations };
}

export class Vgg16Bn extends StitchableModel {
  readonly arch = "vgg16_bn";
  readonly config: Required<VggOptions>;
  protected readonly stageList: Stage[] = [];
  readonly features: Sequential;
  readonly avgpool = new AdaptiveAvgPool2d(POOL);
  readonly classifier: Sequential;

  constructor(opts: VggOptions = {}) {
    super();
    const c = resolveVggOptions(opts);
    this.config = c;
    const scaled = (v: number) => Math.max(1, Math.round(v * c.width));
    // torchvision's make_layers(cfg, batch_norm=True); sizes[i] is the spatial size after layer i.
    const layers: Module[] = [];
    const channels: number[] = [];
    const sizes: number[] = [];
    let inCh = 3;
    let size = c.imageSize;
    for (const v of CFG) {
      if (v === "M") {
        layers.push(new MaxPool2d(2, 2));
        size = Math.floor(size / 2);
        channels.push(inCh);
        sizes.push(size);
      } else {
        const out = scaled(v);
        layers.push(new Conv2d(inCh, out, 3, { padding: 1 }), new BatchNorm2d(out), new ReLU());
        inCh = out;
        channels.push(out, out, out);
        sizes.push(size, size, size);
      }
    }
    this.features = this.child("features", new Sequential(...layers));
    this.child("avgpool", this.avgpool); // no parameters; registered as torchvision's module is
    const hidden = scaled(HIDDEN);
    this.classifier = this.child(
      "classifier",
      new Sequential(
        new Linear(inCh * POOL * POOL, hidden),
        new ReLU(),
        new Dropout(0.5),
        new Linear(hidden, hidden),
        new ReLU(),
        new Dropout(0.5),
        new Linear(hidden, c.numClasses),
      ),
    );
    initLikeTorchvision(layers, this.classifier.layers);

    // One stage per point (the layers after the previous point up to its ReLU), then the rest
    // of `features` (the last max-pool) and the pool; the classifier is the head.
    let from = 0;
    for (const end of POINTS) {
      const name = `features.${end}`;
      const mods = layers.slice(from, end + 1);
      this.stageList.push({
        name,
        point: { name, channels: channels[end], height: sizes[end], width: sizes[end], kind: "cnn" },
        run: (h) => runInOrder(h, mods),
      });
      from = end + 1;
    }
    const rest = layers.slice(from);
    this.stageList.push(
      { name: `features.${from}`, point: null, run: (h) => runInOrder(h, rest) },
      { name: "avgpool", point: null, run: (h) => this.avgpool.forward(h) },
    );
  }

  protected embedFrom(h: Tensor): Tensor {
    return h.flatten(1);
  }

  get head(): Sequential {
    return this.classifier;
  }

  protected get embedDim(): number {
    return (this.classifier.layers[0] as Linear).inFeatures;
  }
}
