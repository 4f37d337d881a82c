// The one evaluation loop: a pass over a test set with the models in eval mode, shared by clean
// evaluation (eval/evaluate.ts), the robust evaluations (PGD, APGD) and the stitched model's
// scores (stitch/evaluate.ts, stitch/robust.ts). Batches in order, normalised, on the device; each
// batch's work in its own scope and the batch freed after, whatever the callback throws.
// Gradients stay on: the attacks need them, so a clean pass runs its forward under noGrad itself.
import { type Batch, batches, type Dataset, type Normalization } from "../data/index.js";
import { inEvalMode, type Module } from "../nn/module.js";
import * as torch from "../torch/index.js";

/** Images per batch of every evaluation pass that does not set its own. */
export const EVAL_BATCH_SIZE = 256;

/** How an evaluation pass reads its test set. */
export interface EvalOptions {
  normalization: Normalization;
  /** Images per batch; default EVAL_BATCH_SIZE. */
  batchSize?: number;
  /** Where the batches go (the models must already be there); default the CPU. */
  device?: torch.Device;
}

/** Runs fn on every batch of `ds`, with `models` in eval mode (each restored to its own mode after). */
export function forEachEvalBatch(
  models: Module | Module[],
  ds: Dataset,
  opts: EvalOptions,
  fn: (b: Batch) => void,
): void {
  inEvalMode(Array.isArray(models) ? models : [models], () => {
    for (const b of batches(ds, {
      batchSize: opts.batchSize ?? EVAL_BATCH_SIZE,
      normalization: opts.normalization,
      device: opts.device,
    })) {
      try {
        torch.tidy(() => fn(b));
      } finally {
        torch.dispose(b);
      }
    }
  });
}
