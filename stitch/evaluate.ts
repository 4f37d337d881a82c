// Scores of a stitched model against B on a test set (PROTOCOL.md, "Scores"), streamed batch by
// batch. The frozen networks run in eval mode here, whatever mode T was trained in: with
// batch-norm mode "adapt" the stitched model uses its adapted statistics and B its own.
import type { Dataset } from "../data/index.js";
import { AgreementMeter, type AgreementResult, linearCka, NonFiniteLogitsError } from "../metrics/index.js";
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
  opts: EvalOptions & { backLogits?: torch.Tensor },
  logits: (b: { x: torch.Tensor; y: torch.Tensor }) => { x: torch.Tensor; logits: torch.Tensor },
): AgreementResult {
  const meter = new AgreementMeter();
  forEachEvalBatch(networks, test, opts, (b) => {
    const out = logits(b);
    // B's logits on these very images, when the caller has them (frontAndBack below): B is
    // frozen in eval mode, so they are what B would give again.
    const back =
      opts.backLogits && out.x === b.x
        ? opts.backLogits.indexSelect(
            0,
            torch.tensor(BigInt64Array.from(b.indices, (i) => BigInt(i))).to(opts.backLogits.device),
          )
        : s.backForward(out.x);
    torch.noGrad(() => meter.update(out.logits, back, b.y));
  });
  return meter.result();
}

/** What one pass of A and B over the test set gives before T trains (frontAndBack). */
export interface FrontAndBack {
  /** A alone against B (evaluateFrontAlone's score), or null. */
  frontAlone: AgreementResult | null;
  /** Linear CKA of A's and B's features at the points over the first `ckaImages` test images, or null. */
  cka: number | null;
  /** B's logits on every test image, in the set's order (kept: the caller disposes of them). */
  backLogits: torch.Tensor;
}

/**
 * One pass of A and B over the test set, before T trains (with batch-norm mode "adapt" training
 * moves A's statistics): A alone scored against B, the linear CKA of their features at the points,
 * and B's logits, which evaluateStitch then takes as `backLogits` instead of running B again.
 * Each image's numbers are those of evaluateFrontAlone and of a CKA pass of its own (eval mode:
 * no image depends on its batch), in a third of the forward passes.
 */
export function frontAndBack(s: StitchedModel, test: Dataset, opts: EvalOptions & { ckaImages: number }): FrontAndBack {
  const [a, b] = [s.front.config.numClasses, s.back.config.numClasses];
  const scored = a !== undefined && a === b;
  const meter = new AgreementMeter();
  let finite = true;
  const backParts: torch.Tensor[] = [];
  const fa: torch.Tensor[] = [];
  const fb: torch.Tensor[] = [];
  let seen = 0;
  try {
    forEachEvalBatch([s.front, s.back], test, opts, (batch) =>
      torch.noGrad(() => {
        const n = batch.x.shape[0] as number;
        const take = Math.max(0, Math.min(opts.ckaImages - seen, n));
        seen += n;
        const front = s.front.forwardIntermediates(s.frontInput(batch.x), take ? [s.frontPoint] : []);
        const back = s.back.forwardIntermediates(s.backInput(batch.x), take ? [s.backPoint] : []);
        backParts.push(torch.keep(back.logits));
        if (take) {
          fa.push(torch.keep((front.features[s.frontPoint] as torch.Tensor).narrow(0, 0, take)));
          fb.push(torch.keep((back.features[s.backPoint] as torch.Tensor).narrow(0, 0, take)));
        }
        if (!scored || !finite) return;
        try {
          meter.update(front.logits, back.logits, batch.y);
        } catch (e) {
          // As evaluateFrontAlone: a model whose logits are not finite has no front end to draw;
          // the stitch goes on and says what is wrong where it fails.
          if (!(e instanceof NonFiniteLogitsError)) throw e;
          finite = false;
        }
      }),
    );
    const cka = fa.length ? torch.tidy(() => linearCka(torch.cat(fa, 0), torch.cat(fb, 0))) : null;
    const backLogits = torch.keep(torch.tidy(() => torch.cat(backParts, 0)));
    return { frontAlone: scored && finite ? meter.result() : null, cka, backLogits };
  } finally {
    torch.dispose([...backParts, ...fa, ...fb]);
  }
}

export function evaluateStitch(
  s: StitchedModel,
  test: Dataset,
  opts: EvalOptions & {
    /** B's logits on every image of `test` (frontAndBack's), used where the images are not attacked. */
    backLogits?: torch.Tensor;
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
