// Excess agreement (docs/method.md, "Scores"): agreement probability on the test set whose
// shortcut markers are class-consistent minus that on the test set whose marker colours are
// rolled by one class. Positive: the stitched model agrees with B more when the markers point
// at the true class, i.e. the stitch carries B's (or A's) use of the shortcut. Larger = the
// two models agree more through the shortcut (more similar in shortcut use); 0: no excess.
import type { AgreementResult } from "./agreement.js";

type AgreementLike = Pick<AgreementResult, "agreementProbability"> | number;
const prob = (r: AgreementLike) => (typeof r === "number" ? r : r.agreementProbability);

/** agreementProbability(marked) - agreementProbability(rolled); takes meter results or the numbers. */
export function excessAgreement(marked: AgreementLike, rolled: AgreementLike): number {
  return prob(marked) - prob(rolled);
}

/** The summary over stitch points: the largest excess agreement and the index of its point. */
export function maxExcessAgreement(perPoint: readonly number[]): { value: number; index: number } {
  if (perPoint.length === 0) throw new RangeError("maxExcessAgreement: no stitch points");
  let index = 0;
  for (let i = 1; i < perPoint.length; i++) if (perPoint[i] > perPoint[index]) index = i;
  return { value: perPoint[index], index };
}
