// PyTorch's default initialisations, so a freshly built stitchlab model starts from the same
// distribution as its PyTorch twin (the values differ: the generators are used differently).
import * as torch from "../torch/index.js";

type Tensor = torch.Tensor;

/** U(-bound, bound) of the given shape. */
export function uniform(shape: number[], bound: number): Tensor {
  return torch
    .rand(shape)
    .mul_(2 * bound)
    .sub_(bound);
}

/**
 * nn.Conv2d / nn.Linear default: kaiming_uniform_(a=sqrt(5)) for the weight, which is
 * U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the same bound for the bias.
 */
export function defaultWeightAndBias(
  weightShape: number[],
  withBias: boolean,
): { weight: Tensor; bias: Tensor | null } {
  const fanIn = weightShape.slice(1).reduce((a, b) => a * b, 1);
  const bound = 1 / Math.sqrt(fanIn);
  return { weight: uniform(weightShape, bound), bias: withBias ? uniform([weightShape[0]], bound) : null };
}

/**
 * kaiming_normal_(mode="fan_out", nonlinearity="relu"): N(0, 2 / fan_out), fan_out = out
 * channels x kernel area, as torchvision's ResNet and VGG initialise their convolutions.
 */
export function kaimingNormalFanOut(shape: number[]): Tensor {
  const fanOut = shape[0] * shape.slice(2).reduce((a, b) => a * b, 1);
  return torch.tidy(() => torch.randn(shape).mul(Math.sqrt(2 / fanOut)));
}

/** trunc_normal_(std) truncated at ±2 (absolute, as timm's ViT init uses). */
export function truncNormal(shape: number[], std: number): Tensor {
  return torch.tidy(() => torch.randn(shape).mul(std).clamp(-2, 2));
}
