// Madry et al.'s projected gradient descent under an L-inf budget, on normalised inputs: the
// budget and step are given in pixel units ([0, 1] images) and scaled per channel by 1/std, and
// every iterate is clamped to the valid pixel range. The attacked model runs in eval mode, so
// generating attacks never updates batch-norm statistics.
//
// By default the attack starts from x itself, as the paper's reference does: its PGD
// (external/attacks/pgd.py) has `random_start=False` and train_base.py never turns it on. Madry
// et al.'s uniform start in the ball is `randomStart: true`.
import { type Dataset, type Normalization, validRange } from "../data/index.js";
import { inEvalMode, type Module } from "../nn/module.js";
import * as torch from "../torch/index.js";
import { type EvalOptions, forEachEvalBatch } from "./batches.js";

type Tensor = torch.Tensor;

export interface PgdOptions {
  /** L-inf radius in pixel units, e.g. 8/255. */
  eps: number;
  /** Step size in pixel units, e.g. 2/255. */
  step: number;
  steps: number;
  /** Start from a uniform point in the ball (Madry) rather than from x. Default false (the reference). */
  randomStart?: boolean;
  normalization: Normalization;
}

/** A per-channel [1, C, 1, 1] tensor of v / std: a pixel-unit amount in normalised units. */
export function pixelsToNormalised(v: number, norm: Normalization, device: torch.Device): Tensor {
  const c = norm.std.length;
  return torch
    .tensor(
      norm.std.map((s) => v / s),
      { device },
    )
    .reshape(1, c, 1, 1);
}

/**
 * Adversarial examples for (x, y) that raise the cross-entropy of `model` (any module whose
 * forward gives logits). x is normalised; so is the result.
 */
export function pgdAttack(model: Module, x: Tensor, y: Tensor, opts: PgdOptions): Tensor {
  return inEvalMode([model], () =>
    torch.tidy(() => {
      const eps = pixelsToNormalised(opts.eps, opts.normalization, x.device);
      const step = pixelsToNormalised(opts.step, opts.normalization, x.device);
      const { min, max } = validRange(opts.normalization, x.device);
      // The ball and the valid range are both boxes: projecting onto their intersection is a clamp.
      const lo = x.sub(eps).maximum(min);
      const hi = x.add(eps).minimum(max);
      let adv = opts.randomStart ? x.add(torch.randLike(x).mul(2).sub(1).mul(eps)).clamp(lo, hi) : x.detach();
      for (let i = 0; i < opts.steps; i++) {
        const next = torch.tidy(() => {
          const a = adv.detach().requiresGrad_(true);
          const loss = torch.crossEntropy(model.forward(a), y);
          const [g] = torch.grad(loss, a);
          return torch.noGrad(() => a.add(g!.sign().mul(step)).clamp(lo, hi));
        });
        adv.dispose(); // keeps memory flat over many steps
        adv = next;
      }
      return adv.detach();
    }),
  );
}

/**
 * A batch of Madry training on a fraction of it: its first floor(fraction n) images replaced by
 * their adversarial examples, the rest as they are. `attack` makes the examples (PGD against the
 * model being trained); the mixing is written here once, for base training's half of each batch
 * (train/trainer.ts) and adversarial stitching's whole batches (stitch/robust.ts adversarialBatch,
 * the reference's attack_ratio). A fraction that leaves no image returns x itself, unattacked.
 */
export function adversarialMix(
  x: Tensor,
  y: Tensor,
  fraction: number,
  attack: (x: Tensor, y: Tensor) => Tensor,
): Tensor {
  const n = x.shape[0] as number;
  const k = Math.floor(fraction * n);
  if (k === 0) return x;
  const adv = attack(x.narrow(0, 0, k), y.narrow(0, 0, k));
  return k === n ? adv : torch.cat([adv, x.narrow(0, k, n - k)]);
}

/** Accuracy on PGD adversarial examples of every image of `ds`. */
export function robustAccuracy(model: Module, ds: Dataset, opts: PgdOptions & EvalOptions): number {
  let correct = 0;
  let n = 0;
  forEachEvalBatch(model, ds, opts, (b) => {
    const adv = pgdAttack(model, b.x, b.y, opts);
    correct += torch.noGrad(() => model.forward(adv).argmax(1).eq(b.y).sum().item());
    n += b.indices.length;
  });
  return correct / n;
}
