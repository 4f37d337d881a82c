// A pair's scores against its null fronts' (experiments/nulls.ts makes the nulls; their pairs'
// relations start "null:"): where a score is beyond chance. The reading words it
// (experiments/nulls.ts chanceLines) and the report draws the band (report/charts.ts).
import type { Interval } from "../metrics/interval.js";
import { agreementInterval, type SummaryRow } from "./summary.js";

export const NULL_PREFIX = "null:";
export const isNullRelation = (relation: string): boolean => relation.startsWith(NULL_PREFIX);

/** A null's band: its 95% interval, or its mean alone where it has one replicate (no interval). */
export function nullBand(x: Interval): { lo: number; hi: number } {
  return Number.isFinite(x.halfWidth) ? { lo: x.lo, hi: x.hi } : { lo: x.mean, hi: x.mean };
}

/** One pair's standing against chance at one point, mode and objective. */
export interface ChanceRow {
  pair: string;
  front: string;
  back: string;
  test_data: string;
  point: string;
  mode: string;
  objective: string;
  score: Interval;
  /** The null whose upper bound is highest there, and its interval. */
  null: Interval & { pair: string };
  /** The pair's lower bound clears the highest null's upper bound. */
  beyond: boolean;
}

/**
 * Intervals over replicates (summary.ts agreementInterval), or for a pair of one replicate whose
 * standard error was recorded, over the test images; a null's band is over its replicates, each
 * its own initialisation or training run. (compare's verdict adds the test sample to the seeds'
 * spread: summary.ts seedAndImageInterval.)
 * Each real pair's agreement against its nulls (the null pairs with its back, at its point, mode
 * objective and test data): beyond chance only where the pair's 95% lower bound clears the
 * highest null's upper bound.
 */
export function beyondChance(summary: SummaryRow[]): ChanceRow[] {
  const upper = (x: Interval) => nullBand(x).hi;
  const nulls = summary.filter((s) => isNullRelation(s.pair));
  const out: ChanceRow[] = [];
  for (const s of summary) {
    if (isNullRelation(s.pair) || s.pair === "identical") continue;
    const score = agreementInterval(s);
    if (!Number.isFinite(score.mean)) continue;
    const top = nulls
      .filter(
        (n) =>
          n.back === s.back &&
          n.point === s.point &&
          n.mode === s.mode &&
          n.objective === s.objective &&
          n.test_data === s.test_data &&
          Number.isFinite(n.scores.agreement_prob.mean),
      )
      .map((n) => ({ ...agreementInterval(n), pair: n.pair }))
      .sort((a, b) => upper(b) - upper(a))[0];
    if (!top) continue;
    out.push({
      pair: s.pair,
      front: s.front,
      back: s.back,
      test_data: s.test_data,
      point: s.point,
      mode: s.mode,
      objective: s.objective,
      score,
      null: top,
      // A pair without an interval (one replicate, no standard error) is not beyond anything: its spread is unknown.
      beyond: Number.isFinite(score.halfWidth) && score.mean - score.halfWidth > upper(top),
    });
  }
  return out;
}
