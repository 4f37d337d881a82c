// The stitched model B_{>i}(T(A_{<=i}(x))): a frozen front and back around a trainable layer.
//
// Two details follow the reference (training/stitching/trainer_pc.py, models/model_utils.py):
// - B's layers after the point, as the stitched model runs them, are `tail`. Usually that is B
//   itself. In standard runs with batch-norm mode "adapt" the stitched model's forward pass
//   updates the running statistics of its batch norm (A's, and B's after the point) while B's
//   own pass, which gives the targets and the reference outputs for scoring, must stay
//   untouched: then `tail` is a second copy of B whose statistics adapt.
// - Each network sees inputs normalised with the statistics it was trained with (a front from
//   LS-ImageNet-10 and a back from CIFAR-10 differ by 7-14% per channel). With `normalization`
//   set, every method here takes images as float pixels in [0, 1] and normalises them for A and
//   for B separately; without it, the caller has normalised x for both already.
import type { Normalization } from "../data/index.js";
import { normalizePixels } from "../data/index.js";
import type { StitchableModel } from "../models/stitchable.js";
import * as torch from "../torch/index.js";
import type { StitchInit } from "./config.js";
import { leastSquaresInit, StitchingLayer } from "./layer.js";

type Tensor = torch.Tensor;

export interface StitchedModelOptions {
  /** B's layers after the point as the stitched model runs them (default: B itself). */
  tail?: StitchableModel;
  /** Per-network input statistics; inputs are then float pixels in [0, 1]. */
  normalization?: { front: Normalization; back: Normalization } | null;
}

export class StitchedModel {
  readonly layer: StitchingLayer;
  readonly tail: StitchableModel;
  readonly normalization: { front: Normalization; back: Normalization } | null;
  constructor(
    readonly front: StitchableModel,
    readonly back: StitchableModel,
    readonly frontPoint: string,
    readonly backPoint: string = frontPoint,
    opts: StitchedModelOptions = {},
  ) {
    // Each point resolved once, by the model (HEAD_POINT included), with one wording of the error.
    const resolve = (m: StitchableModel, name: string, role: string) => {
      try {
        return m.stitchPoint(name);
      } catch (e) {
        throw new Error(`${role} model ${(e as Error).message.replace(/; its points are: /, "; its points: ")}`);
      }
    };
    const a = resolve(front, frontPoint, "front");
    const b = resolve(back, backPoint, "back");
    this.tail = opts.tail ?? back;
    this.normalization = opts.normalization ?? null;
    this.layer = new StitchingLayer(a, b);
  }

  /** The frozen networks, each once (front, tail, back). */
  get networks(): StitchableModel[] {
    return [...new Set([this.front, this.tail, this.back])];
  }

  /** x as A takes it. */
  frontInput(x: Tensor): Tensor {
    return this.normalization ? normalizePixels(x, this.normalization.front) : x;
  }

  /** x as B takes it. */
  backInput(x: Tensor): Tensor {
    return this.normalization ? normalizePixels(x, this.normalization.back) : x;
  }

  /** A's features at the front point (no gradient to A's weights, which stay frozen). */
  frontFeatures(x: Tensor): Tensor {
    return torch.noGrad(() => this.front.forwardTo(this.frontInput(x), this.frontPoint));
  }

  /** Logits of the stitched model. Gradients flow to T (and to x when it requires them). */
  forward(x: Tensor): Tensor {
    return torch.tidy(() => {
      const h = x.requiresGrad ? this.front.forwardTo(this.frontInput(x), this.frontPoint) : this.frontFeatures(x);
      return this.tail.forwardFrom(this.layer.forward(h), this.backPoint);
    });
  }

  /** B's own logits on x (the reference the stitched model is scored against). */
  backForward(x: Tensor): Tensor {
    return torch.tidy(() => torch.noGrad(() => this.back.forward(this.backInput(x))));
  }

  /** Initialises T: least squares on images xs (B's own features as target), random, or identity. */
  init(how: StitchInit, xs?: Tensor): { residual?: number } {
    if (how === "identity") {
      this.layer.setIdentity();
      return {};
    }
    if (how === "random") return {};
    if (!xs) throw new Error("least-squares initialisation needs images");

    return torch.tidy(() => {
      const fa = this.frontFeatures(xs);
      const fb = torch.noGrad(() => this.back.forwardTo(this.backInput(xs), this.backPoint));
      return leastSquaresInit(this.layer, fa, fb);
    });
  }
}
