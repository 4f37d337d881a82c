// Evaluation: accuracy and mean loss of a model on a dataset, in eval mode without gradients;
// robust accuracy under APGD-CE and APGD-DLR (or PGD).
import type { Dataset } from "../data/index.js";
import type { Module } from "../nn/module.js";
import * as torch from "../torch/index.js";
import { apgdRobustAccuracy } from "./apgd.js";
import { type EvalOptions, forEachEvalBatch } from "./batches.js";
import { robustAccuracy } from "./pgd.js";

export interface EvalResult {
  accuracy: number;
  loss: number;
  n: number;
}

/** Clean accuracy (share of correct top-1 predictions) and mean cross-entropy. */
export function evaluate(model: Module, ds: Dataset, opts: EvalOptions): EvalResult {
  let correct = 0;
  let lossSum = 0;
  let n = 0;
  forEachEvalBatch(model, ds, opts, (b) =>
    torch.noGrad(() => {
      const logits = model.forward(b.x);
      correct += logits.argmax(1).eq(b.y).sum().item();
      lossSum += torch.crossEntropy(logits, b.y, { reduction: "sum" }).item();
      n += b.indices.length;
    }),
  );
  return { accuracy: correct / n, loss: lossSum / n, n };
}

// The attacks' names and defaults live with the other settings (eval/config.ts).
export { ROBUST_EVAL_ATTACKS, type RobustEvalAttack } from "./config.js";

import type { RobustEvalAttack, RobustEvalConfig } from "./config.js";

/** A robust evaluation's resolved numbers (eval/config.ts resolveRobustEval) and where it runs. */
export interface RobustEvalOptions extends EvalOptions, RobustEvalConfig {
  /** Start from a random point in the ball: eval/config.ts robustEvalRandomStart says when. */
  randomStart: boolean;
}

/** What produced a model's robust accuracies: recorded beside them in the checkpoint. */
export interface RobustEvalRecord {
  attack: RobustEvalAttack;
  /** The attacks run, e.g. ["apgd-ce", "apgd-dlr"]; `robust` is the worst case over them per image. */
  attacks: string[];
  eps: number;
  steps: number;
  randomStart: boolean;
  /** APGD's first step (then halved on its schedule), or PGD's step, in pixel units. */
  step: number;
}

/**
 * Robust accuracies under `opts.attack`, keyed for a checkpoint's `accuracies`: `robust` (the
 * worst case per image over the attacks run) and one `robust_<attack>` per attack
 * (`robust_apgd_ce`, `robust_apgd_dlr`, or `robust_pgd`), with the record of the settings.
 */
export function robustEvaluation(
  model: Module,
  ds: Dataset,
  opts: RobustEvalOptions,
): { accuracies: Record<string, number>; record: RobustEvalRecord } {
  // Settings are checked once, where they are resolved (eval/config.ts robustEvalSchema).
  const common = { normalization: opts.normalization, batchSize: opts.batchSize, device: opts.device };
  const { randomStart } = opts;
  if (opts.attack === "apgd") {
    const r = apgdRobustAccuracy(model, ds, {
      ...common,
      eps: opts.eps,
      steps: opts.steps,
      stepSize: opts.stepSize,
      randomStart,
    });
    return {
      accuracies: { robust: r.worst, robust_apgd_ce: r.ce, robust_apgd_dlr: r.dlr },
      record: {
        attack: "apgd",
        attacks: ["apgd-ce", "apgd-dlr"],
        eps: opts.eps,
        steps: opts.steps,
        randomStart,
        step: opts.stepSize,
      },
    };
  }
  const acc = robustAccuracy(model, ds, {
    ...common,
    eps: opts.eps,
    step: opts.stepSize,
    steps: opts.steps,
    randomStart,
  });
  return {
    accuracies: { robust: acc, robust_pgd: acc },
    record: { attack: "pgd", attacks: ["pgd"], eps: opts.eps, steps: opts.steps, randomStart, step: opts.stepSize },
  };
}
