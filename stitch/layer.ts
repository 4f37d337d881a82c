// The stitching layer T (docs/method.md, "The stitching layer T"): between CNN points a 1x1
// convolution with bias from A's channels to B's, after a bilinear resize of A's map when the
// spatial sizes differ; between ViT points a linear map over the embedding dimension, applied
// to every token; between vector points (the ViT head input, [N, D]) a linear map over D (the
// reference's StitchVec2Vec, models/stitch.py). Its weight is [out, in] in every case (a 1x1
// conv weight viewed as a matrix).
//
// Across architectures (issue 39) T stays one linear map per position; what changes is how A's
// positions are laid onto B's (align), by these rules:
// - CNN to CNN of another spatial size: A's map resized bilinearly to B's (the reference's
//   resize; Bansal et al. 2021 stitch equal sizes only, SN-Net resizes in the same way).
// - tokens to tokens: a per-token map needs equal token counts (SN-Net's linear stitching
//   between ViTs); other counts are refused.
// - CNN to tokens: a token point is a square grid of g x g patch tokens in row-major order (a
//   ViT's patch embedding flattened, Dosovitskiy et al. 2021) after T - g^2 leading tokens, the
//   class (and distillation) token; A's map is resized to g x g and flattened, and each leading
//   token is given A's spatial mean (what a global-pool head reads, and T of the mean is the
//   mean of T's tokens).
// - tokens to CNN: the leading tokens are dropped, the grid is laid out as a g x g map and
//   resized to B's.
// - vectors (a head's input) stitch to vectors only.

import type { PointKind, StitchPoint } from "../models/stitchable.js";
import { Module } from "../nn/module.js";
import * as torch from "../torch/index.js";

type Tensor = torch.Tensor;

/** A token point's square grid: its side and the leading (class, distillation) tokens before it; null when not a grid. */
export function tokenGrid(p: StitchPoint & { kind: "vit" }): { side: number; leading: number } | null {
  const side = Math.floor(Math.sqrt(p.tokens));
  const leading = p.tokens - side * side;
  return side > 0 && leading <= 2 ? { side, leading } : null;
}

/** A point's shape for one image, in words. */
export const describePoint = (p: StitchPoint): string =>
  `${p.name}: ${p.kind === "cnn" ? `${p.channels} x ${p.height} x ${p.width} map` : p.kind === "vit" ? `${p.tokens} tokens x ${p.channels}` : `vector of ${p.channels}`}`;

/** Why two points cannot be stitched, or null when they can. */
export function stitchMismatch(a: StitchPoint, b: StitchPoint): string | null {
  const both = `A's ${describePoint(a)}; B's ${describePoint(b)}`;
  if ((a.kind === "vector") !== (b.kind === "vector"))
    return `a vector (a head's input) stitches to a vector only (${both})`;
  if (a.kind === "vit" && b.kind === "vit" && a.tokens !== b.tokens)
    return `token points with different token counts cannot be stitched token by token (${both})`;
  for (const p of [a, b])
    if (p.kind === "vit" && a.kind !== b.kind && !tokenGrid(p))
      return `${p.name}'s ${p.tokens} tokens are not a square grid after at most two leading tokens, so they cannot be laid onto a map (${both})`;
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

  /**
   * A's features laid onto B's positions, still with A's channels (the file's comment gives the
   * rules): [N, C_A, H_B, W_B] for a map, [N, T_B, C_A] for tokens, [N, C_A] for a vector.
   */
  align(h: Tensor): Tensor {
    const [s, t] = [this.source, this.target];
    if (s.kind === "cnn" && t.kind === "cnn")
      return s.height !== t.height || s.width !== t.width ? torch.interpolateBilinear(h, [t.height, t.width]) : h;
    if (s.kind === "cnn" && t.kind === "vit") {
      const { side, leading } = tokenGrid(t) as { side: number; leading: number };
      const grid = s.height !== side || s.width !== side ? torch.interpolateBilinear(h, [side, side]) : h;
      const tokens = grid.flatten(2).transpose(1, 2); // [N, g*g, C], row-major as a patch embedding
      if (leading === 0) return tokens;
      const mean = h.mean([2, 3], true).flatten(2).transpose(1, 2); // [N, 1, C]
      return torch.cat([...new Array(leading).fill(mean), tokens], 1);
    }
    if (s.kind === "vit" && t.kind === "cnn") {
      const { side, leading } = tokenGrid(s) as { side: number; leading: number };
      const n = h.shape[0] as number;
      const map = h
        .narrow(1, leading, side * side)
        .transpose(1, 2)
        .reshape(n, s.channels, side, side);
      return side !== t.height || side !== t.width ? torch.interpolateBilinear(map, [t.height, t.width]) : map;
    }
    return h;
  }

  forward(h: Tensor): Tensor {
    return torch.tidy(() => {
      const x = this.align(h);
      // Token sequences and vectors: a linear map over the last dimension.
      if (this.target.kind !== "cnn") return torch.linear(x, this.weight, this.bias);
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
 * Singular values of [X 1] below this fraction of the largest are taken as zero by the least-squares
 * start. The features are float32 (a relative precision of 6e-8 per value), so directions that
 * weak are rounding, not signal; solved without a cutoff, a system with fewer distinct samples than
 * unknowns (a 1 x 1 map laid onto a larger one, a head's input over fewer images than features)
 * fits its samples through them: T's weights reached 3e8 from a ConvNeXt's 1 x 1 map into a
 * ResNet's 4 x 4 (48 images; agreement 0.10), and 0.79 with the cutoff (1e-7 and 1e-5 the same).
 */
export const LSTSQ_RCOND = 1e-6;

/**
 * Least-squares initialisation with bias (docs/method.md, "The stitching layer T": from K real
 * training images, every position or token a sample, one per image at a vector point, target B's
 * own features): solves [X 1] W = Y with torch.linalg.lstsq in float64 (a QR-based solver, stabler
 * than the normal equations), and sets weight = W[:in]^T, bias = W[in]. xs are A's features at
 * `source`, ys B's at `target`, for the same images.
 */
export function leastSquaresInit(layer: StitchingLayer, xs: Tensor, ys: Tensor): { residual: number } {
  return torch.noGrad(() =>
    torch.tidy(() => {
      // On the CPU whatever the model's device: gelsd is a LAPACK driver (CUDA has only gels).
      const X = asSamples(layer.align(xs), layer.target.kind).double().to("cpu");
      const Y = asSamples(ys, layer.target.kind).double().to("cpu");
      if (X.shape[0] !== Y.shape[0])
        throw new Error(`least squares: ${X.shape[0]} samples of A but ${Y.shape[0]} of B (same images needed)`);
      const X1 = torch.cat([X, torch.ones([X.shape[0], 1], { dtype: "float64" })], 1);
      // gelsd (SVD): minimum-norm when X is rank deficient (dead ReLU channels give zero
      // columns), and bitwise reproducible; the default gelsy differed in the last digits from
      // call to call here, which made reruns of an experiment differ at 1e-4 after training.
      const W = torch.lstsq(X1, Y, { driver: "gelsd", rcond: LSTSQ_RCOND });
      const c = layer.source.channels;
      // copy_ moves the solution to the layer's device.
      layer.weight.copy_(W.narrow(0, 0, c).t().float());
      layer.bias.copy_(W.select(0, c).float());
      const residual = X1.matmul(W).sub(Y).norm().item() / Y.norm().item();
      return { residual };
    }),
  );
}
