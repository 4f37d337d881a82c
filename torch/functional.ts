// Functional operators of torch.nn.functional and torch.linalg, with PyTorch's names and
// defaults. Each is one ATen call (or a short composition, noted where so).
import { native } from "./native.js";
import { call, type Scalar, Tensor } from "./tensor.js";

type Pair = number | [number, number];

export function cat(tensors: Tensor[], dim = 0): Tensor {
  return call("cat", tensors, dim);
}
export function stack(tensors: Tensor[], dim = 0): Tensor {
  return call("stack", tensors, dim);
}
export function where(condition: Tensor, input: Tensor | Scalar, other: Tensor | Scalar): Tensor {
  if (input instanceof Tensor && other instanceof Tensor) return call("where.self", condition, input, other);
  if (input instanceof Tensor) return call("where.ScalarOther", condition, input, other);
  if (other instanceof Tensor) return call("where.ScalarSelf", condition, input, other);
  return call("where.Scalar", condition, input, other);
}

export function linear(input: Tensor, weight: Tensor, bias: Tensor | null = null): Tensor {
  return call("linear", input, weight, bias);
}
export function conv2d(
  input: Tensor,
  weight: Tensor,
  bias: Tensor | null = null,
  opts: { stride?: Pair; padding?: Pair; dilation?: Pair; groups?: number } = {},
): Tensor {
  return call("conv2d", input, weight, bias, opts.stride ?? 1, opts.padding ?? 0, opts.dilation ?? 1, opts.groups ?? 1);
}
export function maxPool2d(
  input: Tensor,
  kernelSize: Pair,
  opts: { stride?: Pair; padding?: Pair; dilation?: Pair; ceilMode?: boolean } = {},
): Tensor {
  return call(
    "max_pool2d",
    input,
    kernelSize,
    opts.stride ?? [],
    opts.padding ?? 0,
    opts.dilation ?? 1,
    opts.ceilMode ?? false,
  );
}
export function avgPool2d(
  input: Tensor,
  kernelSize: Pair,
  opts: { stride?: Pair; padding?: Pair; ceilMode?: boolean; countIncludePad?: boolean } = {},
): Tensor {
  return call(
    "avg_pool2d",
    input,
    kernelSize,
    opts.stride ?? [],
    opts.padding ?? 0,
    opts.ceilMode ?? false,
    opts.countIncludePad ?? true,
  );
}
export function adaptiveAvgPool2d(input: Tensor, outputSize: Pair): Tensor {
  return call("adaptive_avg_pool2d", input, outputSize);
}
export function adaptiveMaxPool2d(input: Tensor, outputSize: Pair): Tensor {
  const [out, indices] = call("adaptive_max_pool2d", input, outputSize) as [Tensor, Tensor];
  indices.dispose();
  return out;
}

/**
 * Batch normalisation. In training mode it normalises with batch statistics and, when running
 * statistics are given, updates them in place (momentum as in PyTorch: new = (1-m) old + m batch,
 * with the unbiased batch variance); in eval mode it uses the running statistics.
 */
export function batchNorm(
  input: Tensor,
  runningMean: Tensor | null,
  runningVar: Tensor | null,
  opts: { weight?: Tensor | null; bias?: Tensor | null; training?: boolean; momentum?: number; eps?: number } = {},
): Tensor {
  const training = opts.training ?? false;
  const momentum = opts.momentum ?? 0.1;
  const eps = opts.eps ?? 1e-5;
  // Batch statistics of a channels-last float32 input on the CPU: stitchlab's kernel, as
  // libtorch 1.13's loses precision there (native/src/batchnorm.cc); null: aten's applies.
  if (training) {
    const h = native.batchNormChannelsLast(
      input.handle,
      opts.weight?.handle ?? null,
      opts.bias?.handle ?? null,
      runningMean?.handle ?? null,
      runningVar?.handle ?? null,
      momentum,
      eps,
    );
    if (h !== null) return new Tensor(h);
  }
  return call(
    "batch_norm",
    input,
    opts.weight ?? null,
    opts.bias ?? null,
    runningMean,
    runningVar,
    training,
    momentum,
    eps,
    true,
  );
}
export function layerNorm(
  input: Tensor,
  normalizedShape: number[],
  weight: Tensor | null = null,
  bias: Tensor | null = null,
  eps = 1e-5,
): Tensor {
  return call("layer_norm", input, normalizedShape, weight, bias, eps);
}
export function dropout(input: Tensor, p = 0.5, training = true): Tensor {
  return call("dropout", input, p, training);
}
export function relu(input: Tensor): Tensor {
  return call("relu", input);
}
export function gelu(input: Tensor, approximate: "none" | "tanh" = "none"): Tensor {
  return call("gelu", input, approximate);
}
export function softmax(input: Tensor, dim: number): Tensor {
  return call("softmax.int", input, dim);
}
export function logSoftmax(input: Tensor, dim: number): Tensor {
  return call("log_softmax.int", input, dim);
}

const REDUCTION = { none: 0, mean: 1, sum: 2 } as const;
export type Reduction = keyof typeof REDUCTION;

/**
 * Cross-entropy of logits [N, C, ...] with class indices (int64 [N, ...]) or with class
 * probabilities (float, same shape as input: soft targets), as torch.nn.functional.cross_entropy.
 */
export function crossEntropy(
  input: Tensor,
  target: Tensor,
  opts: { reduction?: Reduction; labelSmoothing?: number; ignoreIndex?: number; weight?: Tensor | null } = {},
): Tensor {
  return call(
    "cross_entropy_loss",
    input,
    target,
    opts.weight ?? null,
    REDUCTION[opts.reduction ?? "mean"],
    opts.ignoreIndex ?? -100,
    opts.labelSmoothing ?? 0,
  );
}
export function mseLoss(input: Tensor, target: Tensor, reduction: Reduction = "mean"): Tensor {
  return call("mse_loss", input, target, REDUCTION[reduction]);
}

/** Bilinear resize of [N, C, H, W] to `size` (align_corners=false by default, as PyTorch). */
export function interpolateBilinear(input: Tensor, size: [number, number], alignCorners = false): Tensor {
  return call("upsample_bilinear2d.vec", input, size, alignCorners, null);
}

// ---- linear algebra ----
export function matmul(a: Tensor, b: Tensor): Tensor {
  return call("matmul", a, b);
}
export function bmm(a: Tensor, b: Tensor): Tensor {
  return call("bmm", a, b);
}
/** Moore-Penrose pseudo-inverse (torch.linalg.pinv), with optional absolute/relative tolerances. */
export function pinv(a: Tensor, opts: { atol?: number; rtol?: number; hermitian?: boolean } = {}): Tensor {
  return call("linalg_pinv.atol_rtol_float", a, opts.atol ?? null, opts.rtol ?? null, opts.hermitian ?? false);
}
/** Least squares solution X of A X = B (torch.linalg.lstsq); returns the solution only. */
export function lstsq(
  a: Tensor,
  b: Tensor,
  opts: { rcond?: number; driver?: "gels" | "gelsy" | "gelsd" | "gelss" } = {},
): Tensor {
  const [solution, ...rest] = call("linalg_lstsq", a, b, opts.rcond ?? null, opts.driver ?? null) as Tensor[];
  for (const t of rest) t.dispose();
  return solution;
}
/** Singular value decomposition A = U diag(S) Vh (torch.linalg.svd). */
export function svd(a: Tensor, fullMatrices = false): { U: Tensor; S: Tensor; Vh: Tensor } {
  const [U, S, Vh] = call("linalg_svd", a, fullMatrices, null) as Tensor[];
  return { U, S, Vh };
}
/** Singular values only (torch.linalg.svdvals). */
export function svdvals(a: Tensor): Tensor {
  return call("linalg_svdvals", a);
}
