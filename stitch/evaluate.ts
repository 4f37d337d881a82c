// Scores of a stitched model against B on a test set (docs/method.md, "Scores"), streamed batch by
// batch. The frozen networks run in eval mode here, whatever mode T was trained in: with
// batch-norm mode "adapt" the stitched model uses its adapted statistics and B its own.
import type { Dataset } from "../data/index.js";
import { type EvalOptions, forEachEvalBatch } from "../eval/batches.js";
import { AgreementMeter, type AgreementResult, linearCka, NonFiniteLogitsError } from "../metrics/index.js";
import * as torch from "../torch/index.js";
import type { StitchedModel } from "./stitched.js";

/** What one pass of A and B over the test set gives before T trains (frontAndBack). */
export interface FrontAndBack {
  /** A alone against B (the reference's front end: evaluateFrontAlone), or null. */
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
 * Each image's numbers are those of a pass of its own (eval mode: no image depends on its
 * batch); one pass serves what took three.
 */
export function frontAndBack(s: StitchedModel, test: Dataset, opts: EvalOptions & { ckaImages: number }): FrontAndBack {
  const [a, b] = [s.front.config.numClasses, s.back.config.numClasses];
  // A noise-cluster front (stitch/noise.ts) has no head of its own: no front end, and its CKA is the noise's.
  const scored = !s.noise && a !== undefined && a === b;
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
        const front = s.noise ? null : s.front.forwardIntermediates(s.frontInput(batch.x), take ? [s.frontPoint] : []);
        const back = s.back.forwardIntermediates(s.backInput(batch.x), take ? [s.backPoint] : []);
        backParts.push(torch.keep(back.logits));
        if (take) {
          const features = front
            ? (front.features[s.frontPoint] as torch.Tensor)
            : s.frontFeatures(batch.x, { y: batch.y, indices: batch.indices, split: "test" });
          fa.push(torch.keep(features.narrow(0, 0, take)));
          fb.push(torch.keep((back.features[s.backPoint] as torch.Tensor).narrow(0, 0, take)));
        }
        if (!front || !scored || !finite) return;
        try {
          meter.update(front.logits, back.logits, batch.y);
        } catch (e) {
          // A model whose logits are not finite has no front end to draw (nothing non-finite is
          // scored); the stitch goes on and says what is wrong where it fails.
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

/**
 * The stitched model's agreement with B on every test batch, through the evaluation loop of base
 * models (eval/batches.ts: the networks in eval mode, each batch freed whether or not its scores
 * are accepted).
 */
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
  const meter = new AgreementMeter();
  forEachEvalBatch(s.networks, test, opts, (b) => {
    const x = opts.attack ? opts.attack(b.x, b.y).detach() : b.x;
    const logits = torch.noGrad(() => s.forward(x, { y: b.y, indices: b.indices, split: "test" }));
    // B's logits on these very images, when the caller has them: B is frozen in eval mode, so
    // they are what B would give again.
    const back =
      opts.backLogits && !opts.attack
        ? opts.backLogits.indexSelect(
            0,
            torch.tensor(BigInt64Array.from(b.indices, (i) => BigInt(i))).to(opts.backLogits.device),
          )
        : s.backForward(x);
    torch.noGrad(() => meter.update(logits, back, b.y));
  });
  return meter.result();
}

/**
 * The front end of the reference's curves: A alone, with its own head and no T, scored against
 * B on the same test set (train_stithching.py evaluates stitch index layers + 1 untrained, and
 * models/model_utils.py's 'front' mode is the front model's own output). Null when A and B do not
 * classify into the same number of classes, so that A's outputs are not B's classes, and when a
 * model's logits are not finite. frontAndBack's score, for a caller that wants nothing else.
 */
export function evaluateFrontAlone(s: StitchedModel, test: Dataset, opts: EvalOptions): AgreementResult | null {
  const r = frontAndBack(s, test, { ...opts, ckaImages: 0 });
  r.backLogits.dispose();
  return r.frontAlone;
}
