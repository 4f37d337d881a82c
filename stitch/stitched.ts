// The stitched model B_{>i}(T(A_{<=i}(x))): a frozen front and back around a trainable layer.
import type { StitchableModel } from "../models/stitchable.js";
import * as torch from "../torch/index.js";
import { leastSquaresInit, type StitchInit, StitchingLayer } from "./layer.js";

type Tensor = torch.Tensor;

export class StitchedModel {
  readonly layer: StitchingLayer;
  constructor(
    readonly front: StitchableModel,
    readonly back: StitchableModel,
    readonly frontPoint: string,
    readonly backPoint: string = frontPoint,
  ) {
    const a = front.stitchPoints.find((p) => p.name === frontPoint);
    const b = back.stitchPoints.find((p) => p.name === backPoint);
    const names = (m: StitchableModel) => m.stitchPoints.map((p) => p.name).join(", ");
    if (!a)
      throw new Error(`front model ${front.arch} has no stitch point '${frontPoint}'; its points: ${names(front)}`);
    if (!b) throw new Error(`back model ${back.arch} has no stitch point '${backPoint}'; its points: ${names(back)}`);
    this.layer = new StitchingLayer(a, b);
  }

  /** A's features at the front point (no gradient to A's weights, which stay frozen). */
  frontFeatures(x: Tensor): Tensor {
    return torch.noGrad(() => this.front.forwardTo(x, this.frontPoint));
  }

  /** Logits of the stitched model. Gradients flow to T (and to x when it requires them). */
  forward(x: Tensor): Tensor {
    return torch.tidy(() => {
      const h = x.requiresGrad ? this.front.forwardTo(x, this.frontPoint) : this.frontFeatures(x);
      return this.back.forwardFrom(this.layer.forward(h), this.backPoint);
    });
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
      const fb = torch.noGrad(() => this.back.forwardTo(xs, this.backPoint));
      return leastSquaresInit(this.layer, fa, fb);
    });
  }
}
