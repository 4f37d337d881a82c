// Adversarial stitching and the stitched model's robust scores (the paper's adversarial-stitching
// study; the reference's stitching configs `robust: mandry` with `attack_ratio`, and
// `eval_robustness`: training/stitching/trainer_pc.py, evaluation/stitching/evaluator.py):
// - T can be trained on PGD examples of the stitched model (cross-entropy with the labels, L-inf,
//   a fraction of each batch), B's targets then being computed on those examples too;
// - the trained stitched model is scored on adversarial test images made against it: APGD-CE and
//   APGD-DLR (or PGD), every score (accuracy, agreement with B, error consistency) on each
//   attack's images, averaged over the attacks as the reference averages its attacks.
// The attacks run the frozen networks in eval mode, as base training's do (train/pgd.ts).
import type { Dataset, Normalization } from "../data/index.js";
import type { AgreementResult } from "../metrics/index.js";
import { inEvalMode, Module } from "../nn/module.js";
import * as torch from "../torch/index.js";
import { apgdAttack } from "../train/apgd.js";
import type { EvalOptions } from "../train/batches.js";
import type { RobustEvalAttack } from "../train/config.js";
import { pgdAttack } from "../train/pgd.js";
import { evaluateStitch } from "./evaluate.js";
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

export interface StitchRobustEvalOptions extends EvalOptions {
  /** "apgd": APGD-CE and APGD-DLR (the paper's); "pgd": PGD. */
  attack: RobustEvalAttack;
  /** L-inf radius in pixel units (8/255 on CIFAR). */
  eps: number;
  steps: number;
  /** PGD's step in pixel units (default eps / 4). */
  pgdStep?: number;
}

export interface StitchRobustResult {
  /** Every score on the adversarial test images, averaged over the attacks. */
  scores: AgreementResult;
  /** Each attack's scores. */
  perAttack: Record<string, AgreementResult>;
  attack: string;
  eps: number;
  steps: number;
}

/** The mean of each numeric field over results of the same test set. */
function meanResults(rs: AgreementResult[]): AgreementResult {
  const out = { ...rs[0] } as Record<string, unknown>;
  for (const k of Object.keys(out)) {
    const vs = rs.map((r) => (r as unknown as Record<string, unknown>)[k]);
    if (vs.every((v) => typeof v === "number")) out[k] = (vs as number[]).reduce((a, b) => a + b, 0) / vs.length;
  }
  return out as unknown as AgreementResult;
}

/** Scores of the stitched model against B on adversarial test images made against the stitched model. */
export function robustStitchScores(s: StitchedModel, test: Dataset, opts: StitchRobustEvalOptions): StitchRobustResult {
  // Settings are checked once, where they are resolved (train/config.ts robustEvalSchema).
  const model = new StitchedClassifier(s);
  const attacks: Record<string, (x: Tensor, y: Tensor) => Tensor> =
    opts.attack === "apgd"
      ? {
          "apgd-ce": (x, y) =>
            apgdAttack(model, x, y, { eps: opts.eps, steps: opts.steps, loss: "ce", normalization: opts.normalization })
              .adv,
          "apgd-dlr": (x, y) =>
            apgdAttack(model, x, y, {
              eps: opts.eps,
              steps: opts.steps,
              loss: "dlr",
              normalization: opts.normalization,
            }).adv,
        }
      : {
          pgd: (x, y) =>
            pgdAttack(model, x, y, {
              eps: opts.eps,
              step: opts.pgdStep ?? opts.eps / 4,
              steps: opts.steps,
              normalization: opts.normalization,
            }),
        };
  const perAttack: Record<string, AgreementResult> = {};
  for (const [name, attack] of Object.entries(attacks)) perAttack[name] = evaluateStitch(s, test, { ...opts, attack });
  return {
    scores: meanResults(Object.values(perAttack)),
    perAttack,
    attack: opts.attack,
    eps: opts.eps,
    steps: opts.steps,
  };
}

/**
 * A batch with its first floor(fraction B) images replaced by PGD examples of the stitched model
 * (Madry training on a fraction of the batch, as base training does; the reference's
 * `attack_ratio`). x is in the stitched model's input space (pixels in [0, 1]).
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
  const n = x.shape[0] as number;
  const k = Math.floor(opts.fraction * n);
  if (k === 0) return x;
  const adv = inEvalMode(s.networks, () =>
    pgdAttack(new StitchedClassifier(s), x.narrow(0, 0, k), y.narrow(0, 0, k), opts),
  );
  return k === n ? adv : torch.cat([adv, x.narrow(0, k, n - k)]);
}
