// The stitching layer T (PROTOCOL.md, "Stitching layer T"): between CNN points a 1x1
// convolution with bias from A's channels to B's, after a bilinear resize of A's map when the
// spatial sizes differ; between ViT points a linear map over the embedding dimension, applied
// to every token; between vector points (the ViT head input, [N, D]) a linear map over D (the
// reference's StitchVec2Vec, models/stitch.py). Its weight is [out, in] in every case (a 1x1
// conv weight viewed as a matrix).

import type { PointKind, StitchPoint } from "../models/stitchable.js";
import { Module } from "../nn/module.js";
import * as torch from "../torch/index.js";

type Tensor = torch.Tensor;

/** Why two points cannot be stitched, or null when they can. */
export function stitchMismatch(a: StitchPoint, b: StitchPoint): string | null {
  if (a.kind !== b.kind) return `a ${a.kind} point (${a.name}) cannot be stitched to a ${b.kind} point (${b.name})`;
  if (a.kind === "vit" && b.kind === "vit" && a.tokens !== b.tokens)
    return `ViT points with different token counts (${a.name}: ${a.tokens}, ${b.name}: ${b.tokens}) cannot be stitched token by token`;
  return null;
}

export class StitchingLayer extends Module {
  constructor(
    readonly source: StitchPoint,
    readonly target: StitchPoint,
  ) {
    super();
    const why = stitchMismatch(source, target);
    if (why) throw new Error(`stitching layer: ${why}`);
    // PyTorch's default initialisation of a Linear / 1x1 Conv2d; lstsq or identity replace it.
    const bound = 1 / Math.sqrt(source.channels);
    this.param(
      "weight",
      torch
        .rand([target.channels, source.channels])
        .mul_(2 * bound)
        .sub_(bound),
    );
    this.param(
      "bias",
      torch
        .rand([target.channels])
        .mul_(2 * bound)
        .sub_(bound),
    );
  }

  get weight(): Tensor {
    return this.tensor("weight");
  }
  get bias(): Tensor {
    return this.tensor("bias");
  }

  /** A's features at `source` as B expects them at `target`, before the linear map (resized if needed). */
  align(h: Tensor): Tensor {
    const [s, t] = [this.source, this.target];
    if (s.kind === "cnn" && t.kind === "cnn" && (s.height !== t.height || s.width !== t.width))
      return torch.interpolateBilinear(h, [t.height, t.width]);
    return h;
  }

  forward(h: Tensor): Tensor {
    return torch.tidy(() => {
      const x = this.align(h);
      // Token sequences and vectors: a linear map over the last dimension.
      if (this.source.kind !== "cnn") return torch.linear(x, this.weight, this.bias);
      const w = this.weight.reshape(this.target.channels, this.source.channels, 1, 1);
      return torch.conv2d(torch.toConvLayout(x, this.target.channels), w, this.bias);
    });
  }

  /** Sets T to the identity map (same channel counts only) with zero bias. */
  setIdentity(): void {
    if (this.source.channels !== this.target.channels)
      throw new Error(
        `identity initialisation needs equal widths (${this.source.channels} vs ${this.target.channels})`,
      );
    torch.noGrad(() => {
      torch.tidy(() => this.weight.copy_(torch.eye(this.source.channels)));
      this.bias.zero_();
    });
  }
}

const RANK: Record<PointKind, number> = { cnn: 4, vit: 3, vector: 2 };

/**
 * Features [N, C, H, W], [N, T, D] or [N, D] as samples [N*H*W, C], [N*T, D] or [N, D]: every
 * position or token is one sample, and a vector point has one sample per image.
 */
export function asSamples(h: Tensor, kind: PointKind): Tensor {
  if (h.ndim !== RANK[kind]) throw new RangeError(`a ${kind} point holds ${RANK[kind]}-d features, got [${h.shape}]`);
  if (kind === "cnn") return h.permute(0, 2, 3, 1).reshape(-1, h.shape[1]);
  return kind === "vit" ? h.reshape(-1, h.shape[2]) : h;
}

/**
 * Least-squares initialisation with bias (PROTOCOL: from K real training images, every position
 * or token a sample, one per image at a vector point, target B's own features): solves [X 1] W = Y with torch.linalg.lstsq in
 * float64 (a QR-based solver, stabler than the normal equations), and sets weight = W[:in]^T,
 * bias = W[in]. xs are A's features at `source`, ys B's at `target`, for the same images.
 */
export function leastSquaresInit(layer: StitchingLayer, xs: Tensor, ys: Tensor): { residual: number } {
  return torch.noGrad(() =>
    torch.tidy(() => {
      // On the CPU whatever the model's device: gelsd is a LAPACK driver (CUDA has only gels).
      const X = asSamples(layer.align(xs), layer.source.kind).double().to("cpu");
      const Y = asSamples(ys, layer.target.kind).double().to("cpu");
      if (X.shape[0] !== Y.shape[0])
        throw new Error(`least squares: ${X.shape[0]} samples of A but ${Y.shape[0]} of B (same images needed)`);
      const X1 = torch.cat([X, torch.ones([X.shape[0], 1], { dtype: "float64" })], 1);
      // gelsd (SVD): minimum-norm when X is rank deficient (dead ReLU channels give zero
      // columns), and bitwise reproducible; the default gelsy differed in the last digits from
      // call to call here, which made reruns of an experiment differ at 1e-4 after training.
      const W = torch.lstsq(X1, Y, { driver: "gelsd" });
      const c = layer.source.channels;
      // copy_ moves the solution to the layer's device.
      layer.weight.copy_(W.narrow(0, 0, c).t().float());
      layer.bias.copy_(W.select(0, c).float());
      const residual = X1.matmul(W).sub(Y).norm().item() / Y.norm().item();
      return { residual };
    }),
  );
}
