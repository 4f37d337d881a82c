// ResNet-18 for 32x32 inputs (the CIFAR variant: 3x3 stem, stride 1, no max-pool), written
// functionally: a params object of tensors and a forward function, as torchvision's
// resnet18 would compute it module by module. bench/engine_torch.py builds the same model.
import * as torch from "../../torch/index.js";
import { sequential } from "./sequential.js";

type Tensor = torch.Tensor;

export interface BatchNorm2d {
  weight: Tensor;
  bias: Tensor;
  runningMean: Tensor;
  runningVar: Tensor;
}

export interface BasicBlock {
  stride: number;
  conv1: Tensor;
  bn1: BatchNorm2d;
  conv2: Tensor;
  bn2: BatchNorm2d;
  /** 1x1 conv + BN on the shortcut, where the block changes the shape. */
  downsample: { conv: Tensor; bn: BatchNorm2d } | null;
}

export interface ResNet18 {
  conv1: Tensor;
  bn1: BatchNorm2d;
  blocks: BasicBlock[];
  fc: { weight: Tensor; bias: Tensor };
}

// Kaiming-normal (fan_in, ReLU gain), so that activations keep their scale in eval mode.
function convWeight(out: number, inp: number, k: number): Tensor {
  return torch.randn([out, inp, k, k]).mul_(Math.sqrt(2 / (inp * k * k)));
}

function batchNorm2d(c: number): BatchNorm2d {
  return {
    weight: torch.ones([c]),
    bias: torch.zeros([c]),
    runningMean: torch.zeros([c]),
    runningVar: torch.ones([c]),
  };
}

export function resnet18(numClasses = 10): ResNet18 {
  const blocks: BasicBlock[] = [];
  let inp = 64;
  for (const [width, stride] of [
    [64, 1],
    [128, 2],
    [256, 2],
    [512, 2],
  ]) {
    for (let i = 0; i < 2; i++) {
      const s = i === 0 ? stride : 1;
      blocks.push({
        stride: s,
        conv1: convWeight(width, inp, 3),
        bn1: batchNorm2d(width),
        conv2: convWeight(width, width, 3),
        bn2: batchNorm2d(width),
        downsample: s !== 1 || inp !== width ? { conv: convWeight(width, inp, 1), bn: batchNorm2d(width) } : null,
      });
      inp = width;
    }
  }
  const bound = 1 / Math.sqrt(512);
  return {
    conv1: convWeight(64, 3, 3),
    bn1: batchNorm2d(64),
    blocks,
    fc: {
      weight: torch
        .rand([numClasses, 512])
        .mul_(2 * bound)
        .sub_(bound),
      bias: torch.zeros([numClasses]),
    },
  };
}

/** The trainable tensors (BN running statistics are buffers, not parameters), in module order. */
export function parameters(m: ResNet18): Tensor[] {
  const bn = (b: BatchNorm2d) => [b.weight, b.bias];
  const out = [m.conv1, ...bn(m.bn1)];
  for (const b of m.blocks) {
    out.push(b.conv1, ...bn(b.bn1), b.conv2, ...bn(b.bn2));
    if (b.downsample) out.push(b.downsample.conv, ...bn(b.downsample.bn));
  }
  out.push(m.fc.weight, m.fc.bias);
  return out;
}

function bn(x: Tensor, p: BatchNorm2d, training: boolean): Tensor {
  return torch.batchNorm(x, p.runningMean, p.runningVar, { weight: p.weight, bias: p.bias, training });
}

function basicBlock(x: Tensor, b: BasicBlock, training: boolean): Tensor {
  let out = torch.relu(bn(torch.conv2d(x, b.conv1, null, { stride: b.stride, padding: 1 }), b.bn1, training));
  out = bn(torch.conv2d(out, b.conv2, null, { padding: 1 }), b.bn2, training);
  const shortcut = b.downsample
    ? bn(torch.conv2d(x, b.downsample.conv, null, { stride: b.stride }), b.downsample.bn, training)
    : x;
  return torch.relu(out.add(shortcut));
}

/** Logits [N, numClasses] of images [N, 3, 32, 32]; training selects batch statistics in BN. */
export function forward(m: ResNet18, x: Tensor, training: boolean): Tensor {
  const stem = torch.relu(bn(torch.conv2d(x, m.conv1, null, { padding: 1 }), m.bn1, training));
  const h = sequential(stem, m.blocks, (h, b) => basicBlock(h, b, training));
  return torch.linear(torch.adaptiveAvgPool2d(h, 1).flatten(1), m.fc.weight, m.fc.bias);
}
