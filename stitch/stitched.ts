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
import type { ImageIds, NoiseClusters } from "./noise.js";

type Tensor = torch.Tensor;

export interface StitchedModelOptions {
  /** B's layers after the point as the stitched model runs them (default: B itself). */
  tail?: StitchableModel;
  /** Per-network input statistics; inputs are then float pixels in [0, 1]. */
  normalization?: { front: Normalization; back: Normalization } | null;
  /**
   * A sender of clustered noise in A's place (stitch/noise.ts: a null front): A gives the point's
   * shape only, and every method that runs the front then needs the images' ids (labels and
   * positions), which the callers pass wherever they have a batch.
   */
  noise?: NoiseClusters | null;
}

export class StitchedModel {
  readonly layer: StitchingLayer;
  readonly tail: StitchableModel;
  readonly normalization: { front: Normalization; back: Normalization } | null;
  readonly noise: NoiseClusters | null;
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
    this.noise = opts.noise ?? null;
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

  /**
   * A's features at the front point (no gradient to A's weights, which stay frozen), or the noise
   * sender's for these images (ids: their labels and positions, which only the sender reads).
   */
  frontFeatures(x: Tensor, ids?: ImageIds): Tensor {
    if (this.noise) {
      if (!ids) throw new Error("the noise-cluster front sends by label: it needs the images' labels and positions");
      return this.noise.sample(ids);
    }
    return torch.noGrad(() => this.front.forwardTo(this.frontInput(x), this.frontPoint));
  }

  /** Logits of the stitched model. Gradients flow to T (and to x when it requires them). */
  forward(x: Tensor, ids?: ImageIds): Tensor {
    return torch.tidy(() => {
      if (x.requiresGrad && this.noise)
        throw new Error("the noise-cluster front does not depend on the image: there is no gradient to the input");
      const h = x.requiresGrad ? this.front.forwardTo(this.frontInput(x), this.frontPoint) : this.frontFeatures(x, ids);
      return this.tail.forwardFrom(this.layer.forward(h), this.backPoint);
    });
  }

  /** B's own logits on x (the reference the stitched model is scored against). */
  backForward(x: Tensor): Tensor {
    return torch.tidy(() => torch.noGrad(() => this.back.forward(this.backInput(x))));
  }

  /** Initialises T: least squares on images xs (B's own features as target), random, or identity. */
  init(how: StitchInit, xs?: Tensor, ids?: ImageIds): { residual?: number } {
    if (how === "identity") {
      this.layer.setIdentity();
      return {};
    }
    if (how === "random") return {};
    if (!xs) throw new Error("least-squares initialisation needs images");

    return torch.tidy(() => {
      const fa = this.frontFeatures(xs, ids);
      const fb = torch.noGrad(() => this.back.forwardTo(this.backInput(xs), this.backPoint));
      return leastSquaresInit(this.layer, fa, fb);
    });
  }
}
