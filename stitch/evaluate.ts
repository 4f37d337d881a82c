// Scores of a stitched model against B on a test set (PROTOCOL.md, "Scores"), streamed batch by
// batch. The frozen networks run in eval mode here, whatever mode T was trained in: with
// batch-norm mode "adapt" the stitched model uses its adapted statistics and B its own.
import { batches, type Dataset, type Normalization } from "../data/index.js";
import { AgreementMeter, type AgreementResult, NonFiniteLogitsError } from "../metrics/index.js";
import { inEvalMode } from "../nn/module.js";
import * as torch from "../torch/index.js";
import type { StitchedModel } from "./stitched.js";

export function evaluateStitch(
  s: StitchedModel,
  test: Dataset,
  opts: {
    normalization: Normalization;
    batchSize?: number;
    device?: string;
    /** Scores on attack(x, y) instead of x: adversarial images (stitch/robust.ts); gradients allowed there. */
    attack?: (x: torch.Tensor, y: torch.Tensor) => torch.Tensor;
  },
): AgreementResult {
  const meter = new AgreementMeter();
  inEvalMode(s.networks, () => {
    for (const b of batches(test, {
      batchSize: opts.batchSize ?? 256,
      normalization: opts.normalization,
      device: opts.device,
    })) {
      try {
        torch.tidy(() => {
          const x = opts.attack ? opts.attack(b.x, b.y).detach() : b.x;
          torch.noGrad(() => meter.update(s.forward(x), s.backForward(x), b.y));
        });
      } finally {
        torch.dispose(b);
      }
    }
  });
  return meter.result();
}

/**
 * The front end of the reference's curves: A alone, with its own head and no T, scored against
 * B on the same test set (train_stithching.py evaluates stitch index layers + 1 untrained, and
 * models/model_utils.py's 'front' mode is the front model's own output). Null when A and B do not
 * classify into the same number of classes, so that A's outputs are not B's classes.
 */
export function evaluateFrontAlone(
  s: StitchedModel,
  test: Dataset,
  opts: { normalization: Normalization; batchSize?: number; device?: string },
): AgreementResult | null {
  const [a, b] = [s.front.config.numClasses, s.back.config.numClasses];
  if (a === undefined || a !== b) return null;
  const meter = new AgreementMeter();
  try {
    inEvalMode([s.front, s.back], () => {
      for (const batch of batches(test, {
        batchSize: opts.batchSize ?? 256,
        normalization: opts.normalization,
        device: opts.device,
      })) {
        try {
          torch.tidy(() =>
            torch.noGrad(() => meter.update(s.front.forward(s.frontInput(batch.x)), s.backForward(batch.x), batch.y)),
          );
        } finally {
          torch.dispose(batch);
        }
      }
    });
  } catch (e) {
    // A model whose logits are not finite has no front end to draw (nothing non-finite is
    // scored); the stitch itself goes on and says what is wrong where it fails.
    if (e instanceof NonFiniteLogitsError) return null;
    throw e;
  }
  return meter.result();
}
