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

/**
 * The grey stem (train/config.ts greyStem): the kernels of the model's first layer on the image
 * (the one parameter of rank 4 with 3 input channels: ResNet's conv1, VGG's features.0, ViT's
 * patch embedding) are replaced, in place, by their mean over the colour channels.
 *
 * Why: a model trained on grey images replicated to 3 channels gets the same gradient for each
 * channel's kernel, so what tells colours apart is its random initial difference, never trained.
 * An IRI may use any direction of the input, and the colour ones of a grey model are each seed's
 * own noise (docs/method.md, "Grey data"). The mean keeps the response to a grey image exactly
 * (the sum over channels is unchanged), so on grey data training follows the same path in exact
 * arithmetic (in float, another draw of the same recipe); only the untrained colour response is
 * gone, and it is learnt where the data carry colour (a Pixel marker).
 */
export function greyStem(module: { namedParameters(): [string, Tensor][] }): string {
  const found = module.namedParameters().find(([, p]) => p.shape.length === 4 && p.shape[1] === 3);
  if (!found)
    throw new Error("greyStem: the model has no layer taking 3-channel images (a rank-4 weight with 3 input channels)");
  const [name, weight] = found;
  torch.noGrad(() =>
    torch.tidy(() => {
      weight.copy_(weight.mean(1, true).expandAs(weight));
    }),
  );
  return name;
}
