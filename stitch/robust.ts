// Adversarial stitching and the stitched model's robust scores (the paper's adversarial-stitching
// study; the reference's stitching configs `robust: mandry` with `attack_ratio`, and
// `eval_robustness`: training/stitching/trainer_pc.py, evaluation/stitching/evaluator.py):
// - T can be trained on PGD examples of the stitched model (cross-entropy with the labels, L-inf,
//   a fraction of each batch), B's targets then being computed on those examples too;
// - the trained stitched model is scored on adversarial test images made against it: APGD-CE and
//   APGD-DLR (or PGD), every score (accuracy, agreement with B, error consistency) on the
//   per-image worst case over the attacks, as AutoAttack counts an image robust only if it
//   survives every attack (and as base models' robust evaluation does, eval/evaluate.ts): each
//   image takes the first attack's example that fools the stitched model, else the last one's.
//   Each attack's own scores are kept beside.
// The attacks run the frozen networks in eval mode, as base training's do (eval/pgd.ts).
import type { Dataset, Normalization } from "../data/index.js";
import { apgdAttack } from "../eval/apgd.js";
import { type EvalOptions, forEachEvalBatch } from "../eval/batches.js";
import type { RobustEvalConfig } from "../eval/config.js";
import { robustEvalRandomStart } from "../eval/config.js";
import { adversarialMix, pgdAttack } from "../eval/pgd.js";
import { AgreementMeter, type AgreementResult } from "../metrics/index.js";
import { inEvalMode, Module } from "../nn/module.js";
import * as torch from "../torch/index.js";
import type { StitchedModel } from "./stitched.js";

type Tensor = torch.Tensor;

/**
 * The stitched model as a module the attacks take: its forward is the stitched model's logits,
 * and eval/train switch its frozen networks (T has no batch norm or dropout). Use it inside
 * inEvalMode(s.networks, ...), which restores each network's own mode afterwards: it starts in
 * eval mode, so an attack's own inEvalMode leaves the networks in eval mode.
 */
export class StitchedClassifier extends Module {
  constructor(readonly stitched: StitchedModel) {
    super();
    this.training = false;
  }
  forward(x: Tensor): Tensor {
    return this.stitched.forward(x);
  }
  override train(mode = true): this {
    this.training = mode;
    for (const n of this.stitched.networks) n.train(mode);
    return this;
  }
}

/**
 * The robust evaluation's resolved numbers (eval/config.ts resolveRobustEval: the attack, "apgd"
 * for APGD-CE and APGD-DLR or "pgd"; eps; steps of each attack; APGD's first step or PGD's step)
 * and where it runs.
 */
export interface StitchRobustEvalOptions extends EvalOptions, RobustEvalConfig {}

export interface StitchRobustResult {
  /** Every score on the adversarial test images, each image the worst case over the attacks. */
  scores: AgreementResult;
  /** Each attack's scores. */
  perAttack: Record<string, AgreementResult>;
  attack: string;
  eps: number;
  steps: number;
  /** APGD's first step, or PGD's step (pixel units). */
  stepSize: number;
}

/** Scores of the stitched model against B on adversarial test images made against the stitched model. */
export function robustStitchScores(s: StitchedModel, test: Dataset, opts: StitchRobustEvalOptions): StitchRobustResult {
  // Settings are checked once, where they are resolved (eval/config.ts robustEvalSchema).
  const model = new StitchedClassifier(s);
  const apgd = (loss: "ce" | "dlr") => (x: Tensor, y: Tensor) =>
    apgdAttack(model, x, y, {
      eps: opts.eps,
      steps: opts.steps,
      stepSize: opts.stepSize,
      loss,
      normalization: opts.normalization,
      randomStart: robustEvalRandomStart("apgd"),
    }).adv;
  const attacks: Record<string, (x: Tensor, y: Tensor) => Tensor> =
    opts.attack === "apgd"
      ? { "apgd-ce": apgd("ce"), "apgd-dlr": apgd("dlr") }
      : {
          pgd: (x, y) =>
            pgdAttack(model, x, y, {
              eps: opts.eps,
              step: opts.stepSize,
              steps: opts.steps,
              normalization: opts.normalization,
              randomStart: robustEvalRandomStart("pgd"),
            }),
        };
  const names = Object.keys(attacks);
  const meters = Object.fromEntries(names.map((n) => [n, new AgreementMeter()]));
  const worst = new AgreementMeter();
  // One pass: each attack once per batch, its images scored, and per image the worst case.
  forEachEvalBatch(s.networks, test, opts, (b) => {
    let chosen: Tensor | null = null;
    let fooled: Tensor | null = null;
    for (const name of names) {
      const x = attacks[name](b.x, b.y).detach();
      const logits = torch.noGrad(() => s.forward(x));
      torch.noGrad(() => meters[name].update(logits, s.backForward(x), b.y));
      const wrong: Tensor = torch.noGrad(() => logits.argmax(1).ne(b.y));
      if (chosen === null || fooled === null) {
        chosen = x;
        fooled = wrong;
      } else {
        // Images not fooled yet take this attack's example; those fooled keep the first that did.
        const keep: Tensor = fooled.view([-1, 1, 1, 1]);
        chosen = torch.where(keep, chosen, x);
        fooled = fooled.logicalOr(wrong);
      }
    }
    const x = chosen as Tensor;
    torch.noGrad(() => worst.update(s.forward(x), s.backForward(x), b.y));
  });
  return {
    scores: worst.result(),
    perAttack: Object.fromEntries(names.map((n) => [n, meters[n].result()])),
    attack: opts.attack,
    eps: opts.eps,
    steps: opts.steps,
    stepSize: opts.stepSize,
  };
}

/**
 * A batch with its first floor(fraction B) images replaced by PGD examples of the stitched model
 * (Madry training on a fraction of the batch, mixed as base training's: eval/pgd.ts adversarialMix;
 * the reference's `attack_ratio`). x is in the stitched model's input space (pixels in [0, 1]).
 */
export function adversarialBatch(
  s: StitchedModel,
  x: Tensor,
  y: Tensor,
  opts: {
    eps: number;
    step: number;
    steps: number;
    fraction: number;
    randomStart?: boolean;
    normalization: Normalization;
  },
): Tensor {
  // inEvalMode(s.networks): the classifier's own eval mode would leave the networks in eval mode (StitchedClassifier).
  return adversarialMix(x, y, opts.fraction, (xs, ys) =>
    inEvalMode(s.networks, () => pgdAttack(new StitchedClassifier(s), xs, ys, opts)),
  );
}
