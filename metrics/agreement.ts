// Streaming agreement scores between a stitched model and the back model B (docs/method.md,
// "Scores"). AgreementMeter is fed batch by batch with logits and labels and keeps only a few
// running sums (in float64), never the logits themselves.
//
// Definitions (p_s, p_B: softmax probabilities of the stitched model and B; y: the true label;
// K: the number of classes; all means over test images):
// - accuracy (a_s), backAccuracy (a_B): share of images whose argmax is y. Larger = better.
// - hardAgreement: share of images where both models are right or both are wrong. Larger = more similar.
// - labelAgreement: share of images where both predict the same label. Larger = more similar.
// - agreementProbability: mean of sum_k p_s(k) p_B(k) / max(||p_s||², ||p_B||²); 1 for identical
//   outputs, 0 for disjoint supports. Larger = more similar.
// - hardErrorConsistency (kappa): (c_obs - c_exp) / (1 - c_exp), c_obs = hardAgreement,
//   c_exp = a_s a_B + (1-a_s)(1-a_B). 1: errors on exactly the same images, 0: no more overlap
//   than independent models of these accuracies, negative: less. Larger = more similar.
// - softErrorConsistency: (c_obs - c_exp) / (1 - c_exp) with the method's
//   c_exp = q_s q_B + (1-q_s)(1-q_B)/(K-1), q = mean probability of the true class
//   (softAccuracy, backSoftAccuracy), and c_obs = agreementProbability (the normalised dot
//   product above), as the reference computes it (evaluation/metrics.py, soft_error_consistency
//   fed by agreement's normalised soft agreement). So a model stitched with itself scores
//   exactly 1, whatever its confidence. Larger = more similar.
//   softObservedConsistency keeps the unnormalised mean of sum_k p_s(k) p_B(k) for reference.
// Kappas are 1 where c_exp = 1 (both models always right, or always wrong), as in the reference.
import * as torch from "../torch/index.js";

export interface AgreementResult {
  /** Images seen. */
  n: number;
  /** Classes K (from the logits' last dimension). */
  numClasses: number;
  accuracy: number;
  backAccuracy: number;
  hardAgreement: number;
  labelAgreement: number;
  agreementProbability: number;
  /**
   * Standard error of agreementProbability over the test images: the sample standard deviation of
   * the per-image values over sqrt(n) (NaN for one image). What another draw of as many test
   * images from the same distribution would move the score by; not seed-to-seed variation.
   */
  agreementProbabilitySe: number;
  hardErrorConsistency: number;
  /** Mean probability of the true class under the stitched model (q_s). */
  softAccuracy: number;
  /** Mean probability of the true class under B (q_B). */
  backSoftAccuracy: number;
  /** Mean over images of sum_k p_s(k) p_B(k), unnormalised (the soft c_obs is agreementProbability). */
  softObservedConsistency: number;
  softErrorConsistency: number;
}

/** Logits with a NaN or an infinity were given to a meter: they are never scored. */
export class NonFiniteLogitsError extends Error {}

/** (c_obs - c_exp) / (1 - c_exp); 1 where c_exp is 1 (the reference's convention, evaluation/metrics.py). */
export function kappa(cObs: number, cExp: number): number {
  const denom = 1 - cExp;
  return denom === 0 ? 1 : (cObs - cExp) / denom;
}

/** sd / sqrt(n) of n values from their sum and sum of squares (the sample sd, n - 1; NaN for one). */
export function standardError(sum: number, sumSq: number, n: number): number {
  if (n < 2) return Number.NaN;
  const variance = Math.max(0, (sumSq - (sum * sum) / n) / (n - 1));
  return Math.sqrt(variance / n);
}

/** The per-image terms whose means make the scores, summed batch by batch (in float64). */
const TERMS = [
  "rightStitched",
  "rightBack",
  "sameCorrectness",
  "sameLabel",
  "agreementProbability",
  "agreementProbabilitySq",
  "trueProbStitched",
  "trueProbBack",
  "dot",
] as const;
type Term = (typeof TERMS)[number];
type Totals = Record<Term, number>;

const zeroTotals = (): Totals => Object.fromEntries(TERMS.map((t) => [t, 0])) as Totals;

/** Accumulates agreement statistics over batches; see the file comment for the definitions. */
export class AgreementMeter {
  private readonly totals = zeroTotals();
  private count = 0;
  private classes = 0;

  /** Adds one batch: stitchedLogits and backLogits [B, K] (any float dtype/device), labels int [B]. */
  update(stitchedLogits: torch.Tensor, backLogits: torch.Tensor, labels: torch.Tensor): void {
    const shape = stitchedLogits.shape;
    if (shape.length !== 2) throw new RangeError(`AgreementMeter: logits must be [B, K], got [${shape}]`);
    if (backLogits.shape.join() !== shape.join())
      throw new RangeError(`AgreementMeter: logits shapes differ: [${shape}] vs [${backLogits.shape}]`);
    if (labels.shape.length !== 1 || labels.shape[0] !== shape[0])
      throw new RangeError(`AgreementMeter: labels must be [${shape[0]}], got [${labels.shape}]`);
    if (this.classes !== 0 && this.classes !== shape[1])
      throw new RangeError(`AgreementMeter: ${shape[1]} classes, earlier batches had ${this.classes}`);
    if (shape[0] === 0) return;
    const batch = torch.tidy(() => batchSums(stitchedLogits, backLogits, labels));
    // Nothing non-finite is scored: a NaN in a model (a weight, a running variance) would
    // otherwise turn into a plausible-looking score (argmax of NaNs is 0 for both models).
    if (batch.nonFiniteStitched > 0 || batch.nonFiniteBack > 0) {
      const which = batch.nonFiniteStitched > 0 ? "the stitched model's" : "the back model's";
      throw new NonFiniteLogitsError(
        `${which} logits are not finite on ${Math.max(batch.nonFiniteStitched, batch.nonFiniteBack)} of ${shape[0]} images of a batch: nothing non-finite is scored (check the models' weights and running statistics)`,
      );
    }
    for (const t of TERMS) this.totals[t] += batch.totals[t];
    this.count += shape[0];
    this.classes = shape[1];
  }

  /** Images seen so far. */
  get n(): number {
    return this.count;
  }

  /** The scores over every image seen; throws before the first image. */
  result(): AgreementResult {
    if (this.count === 0) throw new Error("AgreementMeter.result(): no images yet");
    const n = this.count;
    const K = this.classes;
    const m = (t: Term) => this.totals[t] / n;
    const aS = m("rightStitched");
    const aB = m("rightBack");
    const hardAgreement = m("sameCorrectness");
    const qS = m("trueProbStitched");
    const qB = m("trueProbBack");
    const softObs = m("dot");
    const softExp = qS * qB + (K > 1 ? ((1 - qS) * (1 - qB)) / (K - 1) : 0);
    return {
      n,
      numClasses: K,
      accuracy: aS,
      backAccuracy: aB,
      hardAgreement,
      labelAgreement: m("sameLabel"),
      agreementProbability: m("agreementProbability"),
      agreementProbabilitySe: standardError(this.totals.agreementProbability, this.totals.agreementProbabilitySq, n),
      hardErrorConsistency: kappa(hardAgreement, aS * aB + (1 - aS) * (1 - aB)),
      softAccuracy: qS,
      backSoftAccuracy: qB,
      softObservedConsistency: softObs,
      softErrorConsistency: kappa(m("agreementProbability"), softExp),
    };
  }
}

/**
 * One batch's sums of the per-image terms, and how many images have a non-finite logit in each
 * model (call inside tidy; one transfer to the CPU).
 */
function batchSums(
  stitchedLogits: torch.Tensor,
  backLogits: torch.Tensor,
  labels: torch.Tensor,
): { totals: Totals; nonFiniteStitched: number; nonFiniteBack: number } {
  const ps = stitchedLogits.double().softmax(1);
  const pb = backLogits.double().softmax(1);
  const y = labels.to(stitchedLogits.device).long();
  const rightS = ps.argmax(1).eq(y);
  const rightB = pb.argmax(1).eq(y);
  const dot = ps.mul(pb).sum(1);
  const norm = ps.square().sum(1).maximum(pb.square().sum(1));
  const yCol = y.unsqueeze(1);
  const perImage: Record<Term, torch.Tensor> = {
    rightStitched: rightS.double(),
    rightBack: rightB.double(),
    sameCorrectness: rightS.eq(rightB).double(),
    sameLabel: ps.argmax(1).eq(pb.argmax(1)).double(),
    agreementProbability: dot.div(norm),
    agreementProbabilitySq: dot.div(norm).square(),
    trueProbStitched: ps.gather(1, yCol).squeeze(1),
    trueProbBack: pb.gather(1, yCol).squeeze(1),
    dot,
  };
  const nonFinite = (l: torch.Tensor) => (torch.call("isfinite", l) as torch.Tensor).logicalNot().sum(1).gt(0).double();
  const rows = [...TERMS.map((t) => perImage[t]), nonFinite(stitchedLogits), nonFinite(backLogits)];
  const sums = torch.stack(rows).sum(1).cpu().toTypedArray() as Float64Array;
  const totals = Object.fromEntries(TERMS.map((t, i) => [t, sums[i]])) as Totals;
  return { totals, nonFiniteStitched: sums[TERMS.length], nonFiniteBack: sums[TERMS.length + 1] };
}
