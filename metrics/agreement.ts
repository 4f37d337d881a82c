// Streaming agreement scores between a stitched model and the back model B (PROTOCOL.md,
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
// - softErrorConsistency: (c_obs - c_exp) / (1 - c_exp) with PROTOCOL's
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
  hardErrorConsistency: number;
  /** Mean probability of the true class under the stitched model (q_s). */
  softAccuracy: number;
  /** Mean probability of the true class under B (q_B). */
  backSoftAccuracy: number;
  /** Mean over images of sum_k p_s(k) p_B(k), unnormalised (the soft c_obs is agreementProbability). */
  softObservedConsistency: number;
  softErrorConsistency: number;
}

/** (c_obs - c_exp) / (1 - c_exp); 1 where c_exp is 1 (the reference's convention, evaluation/metrics.py). */
export function kappa(cObs: number, cExp: number): number {
  const denom = 1 - cExp;
  return denom === 0 ? 1 : (cObs - cExp) / denom;
}

// Order of the per-batch sums computed by sums().
const N_SUMS = 8;
const [RIGHT_S, RIGHT_B, SAME_CORRECTNESS, SAME_LABEL, AGREE_PROB, TRUE_PROB_S, TRUE_PROB_B, DOT] = [
  0, 1, 2, 3, 4, 5, 6, 7,
];

/** Accumulates agreement statistics over batches; see the file comment for the definitions. */
export class AgreementMeter {
  private readonly totals = new Float64Array(N_SUMS);
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
    const batch = torch.tidy(() => sums(stitchedLogits, backLogits, labels).toTypedArray() as Float64Array);
    for (let i = 0; i < N_SUMS; i++) this.totals[i] += batch[i];
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
    const m = (i: number) => this.totals[i] / n;
    const aS = m(RIGHT_S);
    const aB = m(RIGHT_B);
    const hardAgreement = m(SAME_CORRECTNESS);
    const qS = m(TRUE_PROB_S);
    const qB = m(TRUE_PROB_B);
    const softObs = m(DOT);
    const softExp = qS * qB + (K > 1 ? ((1 - qS) * (1 - qB)) / (K - 1) : 0);
    return {
      n,
      numClasses: K,
      accuracy: aS,
      backAccuracy: aB,
      hardAgreement,
      labelAgreement: m(SAME_LABEL),
      agreementProbability: m(AGREE_PROB),
      hardErrorConsistency: kappa(hardAgreement, aS * aB + (1 - aS) * (1 - aB)),
      softAccuracy: qS,
      backSoftAccuracy: qB,
      softObservedConsistency: softObs,
      softErrorConsistency: kappa(m(AGREE_PROB), softExp),
    };
  }
}

/** The per-batch sums, float64 [N_SUMS] on the CPU (call inside tidy). */
function sums(stitchedLogits: torch.Tensor, backLogits: torch.Tensor, labels: torch.Tensor): torch.Tensor {
  const ps = stitchedLogits.double().softmax(1);
  const pb = backLogits.double().softmax(1);
  const y = labels.to(stitchedLogits.device).long();
  const rightS = ps.argmax(1).eq(y);
  const rightB = pb.argmax(1).eq(y);
  const dot = ps.mul(pb).sum(1);
  const norm = ps.square().sum(1).maximum(pb.square().sum(1));
  const yCol = y.unsqueeze(1);
  const parts = [
    rightS.double(),
    rightB.double(),
    rightS.eq(rightB).double(),
    ps.argmax(1).eq(pb.argmax(1)).double(),
    dot.div(norm),
    ps.gather(1, yCol).squeeze(1),
    pb.gather(1, yCol).squeeze(1),
    dot,
  ];
  return torch.stack(parts).sum(1).cpu();
}
