// ResNet-18 and ResNet-50 with torchvision's parameter names (conv1, bn1, layer1.0.conv1, ...,
// fc). The CIFAR stem (3x3 conv, stride 1, no max-pool) is the default; the ImageNet stem (7x7
// stride 2 and a 3x3 max-pool) is an option. Stitch points: the stem output (after its ReLU; with
// the ImageNet stem before the max-pool, which then runs on the way to layer1.0, as the reference
// hooks the stem's ReLU: models/model_utils.py, resnet 'post_act'), then block outputs: every
// BasicBlock of ResNet-18 (8), and the first and last Bottleneck of each stage of ResNet-50
// (layer1.0, layer1.2, layer2.0, layer2.3, layer3.0, layer3.5, layer4.0, layer4.2: the
// reference's resnet50 points, models/model_utils.py).

import { defaultWeightAndBias, kaimingNormalFanOut } from "../nn/init.js";
import { AdaptiveAvgPool2d, BatchNorm2d, Conv2d, Linear, MaxPool2d, runInOrder, Sequential } from "../nn/layers.js";
import { Module } from "../nn/module.js";
import * as torch from "../torch/index.js";
import { type ModelSize, type Stage, StitchableModel } from "./stitchable.js";

type Tensor = torch.Tensor;

export interface ResNetOptions {
  numClasses?: number;
  /** Width multiplier: stage widths are round(64w), round(128w), round(256w), round(512w). */
  width?: number;
  stem?: "cifar" | "imagenet";
  /** Input height and width, for the stitch points' spatial sizes (32 for CIFAR). */
  imageSize?: number;
}

/** Releases t once f has read it (see BasicBlock.forward). */
function step(t: Tensor, f: (t: Tensor) => Tensor): Tensor {
  const next = f(t);
  t.dispose();
  return next;
}

type Layer = (t: Tensor) => Tensor;

/**
 * A residual block's output relu(f(x) + shortcut(x)), f being `layers` in order and the shortcut
 * `down` (or the identity), each intermediate released once read.
 */
function residual(x: Tensor, layers: Layer[], down: Sequential | null): Tensor {
  let out = runInOrder(x, layers);
  const identity = down ? down.forward(x) : x;
  out = step(out, (t) => t.add(identity));
  if (identity !== x) identity.dispose();
  return step(out, (t) => t.relu());
}

/** The 1x1 convolution and batch norm that match the identity's shape to the block's output. */
function downsample(inPlanes: number, out: number, stride: number): Sequential | null {
  return stride !== 1 || inPlanes !== out
    ? new Sequential(new Conv2d(inPlanes, out, 1, { stride, bias: false }), new BatchNorm2d(out))
    : null;
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
    const d = downsample(inPlanes, planes, stride);
    this.downsample = d ? this.child("downsample", d) : null;
  }
  forward(x: Tensor): Tensor {
    // Each intermediate is released as soon as the next op has read it, as Python's reference
    // counting does: a block's scope would otherwise hold five full-size maps until its end
    // (measured: 2-4x PyTorch's page faults in no-grad forwards). Autograd keeps its own
    // references to what backward needs, so releasing ours is safe with gradients too.
    const layers: Layer[] = [(t) => this.conv1.forward(t), (t) => this.bn1.forward(t), (t) => t.relu()];
    layers.push(
      (t) => this.conv2.forward(t),
      (t) => this.bn2.forward(t),
    );
    return residual(x, layers, this.downsample);
  }
}

/** torchvision's Bottleneck (v1.5: the stride on the 3x3 convolution), output 4 x planes channels. */
export class Bottleneck extends Module {
  static readonly expansion = 4;
  readonly conv1: Conv2d;
  readonly bn1: BatchNorm2d;
  readonly conv2: Conv2d;
  readonly bn2: BatchNorm2d;
  readonly conv3: Conv2d;
  readonly bn3: BatchNorm2d;
  readonly downsample: Sequential | null;
  constructor(inPlanes: number, planes: number, stride: number) {
    super();
    const out = planes * Bottleneck.expansion;
    this.conv1 = this.child("conv1", new Conv2d(inPlanes, planes, 1, { bias: false }));
    this.bn1 = this.child("bn1", new BatchNorm2d(planes));
    this.conv2 = this.child("conv2", new Conv2d(planes, planes, 3, { stride, padding: 1, bias: false }));
    this.bn2 = this.child("bn2", new BatchNorm2d(planes));
    this.conv3 = this.child("conv3", new Conv2d(planes, out, 1, { bias: false }));
    this.bn3 = this.child("bn3", new BatchNorm2d(out));
    const d = downsample(inPlanes, out, stride);
    this.downsample = d ? this.child("downsample", d) : null;
  }
  forward(x: Tensor): Tensor {
    const layers: Layer[] = [(t) => this.conv1.forward(t), (t) => this.bn1.forward(t), (t) => t.relu()];
    layers.push(
      (t) => this.conv2.forward(t),
      (t) => this.bn2.forward(t),
      (t) => t.relu(),
    );
    layers.push(
      (t) => this.conv3.forward(t),
      (t) => this.bn3.forward(t),
    );
    return residual(x, layers, this.downsample);
  }
}

/** A ResNet's recipe: its block, blocks per stage, and which block outputs are stitch points. */
interface ResNetRecipe {
  arch: string;
  block: "basic" | "bottleneck";
  blocks: [number, number, number, number];
  /** Whether block b (0-based) of a stage of n blocks is a stitch point. */
  isPoint: (b: number, n: number) => boolean;
}

export const RESNET18: ResNetRecipe = { arch: "resnet18", block: "basic", blocks: [2, 2, 2, 2], isPoint: () => true };
export const RESNET50: ResNetRecipe = {
  arch: "resnet50",
  block: "bottleneck",
  blocks: [3, 4, 6, 3],
  isPoint: (b, n) => b === 0 || b === n - 1,
};

/** The options with their defaults, once: the constructor and resnetSize read the same. */
export function resolveResNetOptions(opts: ResNetOptions = {}): Required<ResNetOptions> {
  const stem = opts.stem ?? "cifar";
  return {
    numClasses: opts.numClasses ?? 10,
    width: opts.width ?? 1,
    stem,
    imageSize: opts.imageSize ?? (stem === "imagenet" ? 224 : 32),
  };
}

/**
 * The size of `new ResNet(recipe, opts)` (ModelSize), from the same widths, strides and sizes as
 * the constructor: convolutions without bias, batch norms (weight and bias; running mean and
 * variance and a counter as buffers), the classifier; every conv, batch-norm, ReLU and residual
 * output as activations.
 */
export function resnetSize(recipe: ResNetRecipe, opts: ResNetOptions = {}): ModelSize {
  const { numClasses, width, stem, imageSize } = resolveResNetOptions(opts);
  const imagenet = stem === "imagenet";
  const widths = [64, 128, 256, 512].map((w) => Math.max(1, Math.round(w * width)));
  const expansion = recipe.block === "bottleneck" ? Bottleneck.expansion : 1;
  const half = (s: number) => Math.floor((s - 1) / 2) + 1;
  let parameters = 0;
  let buffers = 0;
  let activations = 0;
  // A bias-free conv of k x k from cin to cout whose output is size x size, then its batch norm.
  const convBn = (cin: number, cout: number, k: number, size: number) => {
    parameters += cin * cout * k * k + 2 * cout;
    buffers += 2 * cout + 1;
    activations += 2 * cout * size * size;
  };
  let size = imagenet ? half(imageSize) : imageSize;
  convBn(3, widths[0], imagenet ? 7 : 3, size);
  activations += widths[0] * size * size; // the stem's ReLU
  if (imagenet) {
    size = half(size);
    activations += widths[0] * size * size; // the max-pool
  }
  let inPlanes = widths[0];
  widths.forEach((planes, li) => {
    for (let bi = 0; bi < recipe.blocks[li]; bi++) {
      const stride = bi === 0 && li > 0 ? 2 : 1;
      const input = bi === 0 ? inPlanes : planes * expansion;
      const inSize = size;
      if (stride === 2) size = half(size);
      const out = planes * expansion;
      if (recipe.block === "bottleneck") {
        convBn(input, planes, 1, inSize);
        convBn(planes, planes, 3, size);
        convBn(planes, out, 1, size);
        activations += planes * inSize * inSize + planes * size * size; // two ReLUs
      } else {
        convBn(input, planes, 3, size);
        convBn(planes, planes, 3, size);
        activations += planes * size * size; // the ReLU between them
      }
      if (stride !== 1 || input !== out) convBn(input, out, 1, size);
      activations += 2 * out * size * size; // the residual sum and its ReLU
    }
    inPlanes = planes * expansion;
  });
  parameters += widths[3] * expansion * numClasses + numClasses;
  activations += widths[3] * expansion + numClasses;
  return { parameters, buffers, activations };
}

export class ResNet extends StitchableModel {
  readonly arch: string;
  readonly config: Required<ResNetOptions>;
  protected readonly stageList: Stage[];
  readonly conv1: Conv2d;
  readonly bn1: BatchNorm2d;
  readonly fc: Linear;
  readonly layers: Sequential[];
  readonly #pool = new AdaptiveAvgPool2d(1);
  readonly #maxpool = new MaxPool2d(3, 2, 1);

  constructor(recipe: ResNetRecipe, opts: ResNetOptions = {}) {
    super();
    this.arch = recipe.arch;
    const c = resolveResNetOptions(opts);
    this.config = c;
    const widths = [64, 128, 256, 512].map((w) => Math.max(1, Math.round(w * c.width)));
    const expansion = recipe.block === "bottleneck" ? Bottleneck.expansion : 1;
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
      const n = recipe.blocks[li];
      const blocks = Array.from({ length: n }, (_, bi) => {
        const stride = bi === 0 && li > 0 ? 2 : 1;
        const input = bi === 0 ? inPlanes : planes * expansion;
        return recipe.block === "bottleneck"
          ? new Bottleneck(input, planes, stride)
          : new BasicBlock(input, planes, stride);
      });
      inPlanes = planes * expansion;
      this.layers.push(this.child(`layer${li + 1}`, new Sequential(...blocks)));
      blocks.forEach((b, bi) => {
        if (bi === 0 && li > 0) size = half(size);
        const name = `layer${li + 1}.${bi}`;
        this.stageList.push({
          name,
          point: recipe.isPoint(bi, n) ? point(name, planes * expansion) : null,
          run: (h) => b.forward(h),
        });
      });
    });
    this.fc = this.child("fc", new Linear(widths[3] * expansion, c.numClasses));
    // torchvision's ResNet initialisation, which the reference's models are (its
    // models/resnet/resnet_architecture.py builds torchvision's resnet18 with weights=None):
    // convolutions kaiming-normal (fan_out, relu); batch norm weight 1 and bias 0 (BatchNorm2d's
    // own); the classifier keeps nn.Linear's default (the reference replaces torchvision's fc by
    // a fresh nn.Linear for its class count). The 32 px stem is the exception: the reference
    // swaps torchvision's conv1 for a new 3x3 nn.Conv2d after torchvision has initialised the
    // model (the same file, its low-resolution branch), so that conv keeps nn.Conv2d's default,
    // kaiming_uniform_(a=sqrt(5)): U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (nn/init.ts).
    torch.noGrad(() => {
      for (const [, m] of this.namedModules())
        if (m instanceof Conv2d) {
          const w = m.namedParameters().find(([n]) => n === "weight")?.[1];
          if (!w) continue;
          const init =
            m === this.conv1 && !imagenet ? defaultWeightAndBias(w.shape, false).weight : kaimingNormalFanOut(w.shape);
          w.copy_(init);
          init.dispose();
        }
    });
  }

  get head(): Linear {
    return this.fc;
  }

  protected get embedDim(): number {
    return this.fc.inFeatures;
  }

  protected embedFrom(h: Tensor): Tensor {
    return this.#pool.forward(h).flatten(1);
  }
}
