// Scores of a stitched model against B on a test set (PROTOCOL.md, "Scores"), streamed batch by
// batch. The frozen networks run in eval mode here, whatever mode T was trained in: with
// batch-norm mode "adapt" the stitched model uses its adapted statistics and B its own.
import type { Dataset } from "../data/index.js";
import { AgreementMeter, type AgreementResult, NonFiniteLogitsError } from "../metrics/index.js";
import * as torch from "../torch/index.js";
import { type EvalOptions, forEachEvalBatch } from "../train/batches.js";
import type { StitchedModel } from "./stitched.js";

/**
 * The agreement of `logits(x)` with B's on every test batch, through the evaluation loop of base
 * models (train/batches.ts: the networks in eval mode, each batch freed whether or not its scores
 * are accepted): what both the stitched model and A alone are scored with.
 */
function scoreAgainstBack(
  s: StitchedModel,
  networks: StitchedModel["networks"],
  test: Dataset,
  opts: EvalOptions,
  logits: (b: { x: torch.Tensor; y: torch.Tensor }) => { x: torch.Tensor; logits: torch.Tensor },
): AgreementResult {
  const meter = new AgreementMeter();
  forEachEvalBatch(networks, test, opts, (b) => {
    const out = logits(b);
    torch.noGrad(() => meter.update(out.logits, s.backForward(out.x), b.y));
  });
  return meter.result();
}

export function evaluateStitch(
  s: StitchedModel,
  test: Dataset,
  opts: EvalOptions & {
    /** Scores on attack(x, y) instead of x: adversarial images (stitch/robust.ts); gradients allowed there. */
    attack?: (x: torch.Tensor, y: torch.Tensor) => torch.Tensor;
  },
): AgreementResult {
  return scoreAgainstBack(s, s.networks, test, opts, (b) => {
    const x = opts.attack ? opts.attack(b.x, b.y).detach() : b.x;
    return { x, logits: torch.noGrad(() => s.forward(x)) };
  });
}

/**
 * The front end of the reference's curves: A alone, with its own head and no T, scored against
 * B on the same test set (train_stithching.py evaluates stitch index layers + 1 untrained, and
 * models/model_utils.py's 'front' mode is the front model's own output). Null when A and B do not
 * classify into the same number of classes, so that A's outputs are not B's classes.
 */
export function evaluateFrontAlone(s: StitchedModel, test: Dataset, opts: EvalOptions): AgreementResult | null {
  const [a, b] = [s.front.config.numClasses, s.back.config.numClasses];
  if (a === undefined || a !== b) return null;
  try {
    return scoreAgainstBack(s, [s.front, s.back], test, opts, (batch) => ({
      x: batch.x,
      logits: torch.noGrad(() => s.front.forward(s.frontInput(batch.x))),
    }));
  } catch (e) {
    // A model whose logits are not finite has no front end to draw (nothing non-finite is
    // scored); the stitch itself goes on and says what is wrong where it fails.
    if (e instanceof NonFiniteLogitsError) return null;
    throw e;
  }
}
