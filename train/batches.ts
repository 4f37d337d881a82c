// One pass over a dataset with a model in eval mode: the loop shared by clean evaluation and the
// robust evaluations (PGD, APGD), each batch's work in its own scope and the batch freed after.
import { type Batch, batches, type Dataset, type Normalization } from "../data/index.js";
import { inEvalMode, type Module } from "../nn/module.js";
import * as torch from "../torch/index.js";

export function forEachEvalBatch(
  model: Module,
  ds: Dataset,
  opts: { normalization: Normalization; batchSize?: number; device?: string },
  fn: (b: Batch) => void,
): void {
  inEvalMode([model], () => {
    for (const b of batches(ds, {
      batchSize: opts.batchSize ?? 256,
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
