// Evaluation: accuracy and mean loss of a model on a dataset, in eval mode without gradients.
import { batches, type Dataset, type Normalization } from "../data/index.js";
import type { StitchableModel } from "../models/stitchable.js";
import { inEvalMode } from "../nn/module.js";
import * as torch from "../torch/index.js";

export interface EvalOptions {
  normalization: Normalization;
  batchSize?: number;
  device?: string;
}

export interface EvalResult {
  accuracy: number;
  loss: number;
  n: number;
}

/** Clean accuracy (share of correct top-1 predictions) and mean cross-entropy. */
export function evaluate(model: StitchableModel, ds: Dataset, opts: EvalOptions): EvalResult {
  let correct = 0;
  let lossSum = 0;
  let n = 0;
  inEvalMode([model], () => {
    for (const b of batches(ds, {
      batchSize: opts.batchSize ?? 256,
      normalization: opts.normalization,
      device: opts.device,
    })) {
      torch.tidy(() =>
        torch.noGrad(() => {
          const logits = model.forward(b.x);
          correct += logits.argmax(1).eq(b.y).sum().item();
          lossSum += torch.crossEntropy(logits, b.y, { reduction: "sum" }).item();
          n += b.indices.length;
        }),
      );
      torch.dispose(b);
    }
  });
  return { accuracy: correct / n, loss: lossSum / n, n };
}
