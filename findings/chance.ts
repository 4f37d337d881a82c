// A pair's scores against its null fronts' (experiments/nulls.ts makes the nulls; their pairs'
// relations start "null:"): where a score is beyond chance, and above what the label alone buys,
// by a seed-level test (metrics/welch.ts). The reading words it (chanceLines, here) and the report
// draws the nearest null's band (report/charts.ts).
import type { Interval } from "../metrics/interval.js";
import { holm, type WelchTest, welchMoments } from "../metrics/welch.js";
import { stitchModeWords } from "../stitch/modes.js";
import { formatInterval, type SummaryRow } from "./summary.js";

export const NULL_PREFIX = "null:";
export const isNullRelation = (relation: string): boolean => relation.startsWith(NULL_PREFIX);

/** A null's band: its 95% interval, or its mean alone where it has one replicate (no interval). */
export function nullBand(x: Interval): { lo: number; hi: number } {
  return Number.isFinite(x.halfWidth) ? { lo: x.lo, hi: x.hi } : { lo: x.mean, hi: x.mean };
}

/** The nulls' two families: chance (untrained, permuted fronts) and the label alone (the noise sender). */
export type NullFamily = "chance" | "labels";

/**
 * The noise-cluster null is a sender with the test label and nothing of the image (stitch/noise.ts,
 * after Smith et al. 2025): its score is what a stitch makes of the label alone, a ceiling of label
 * information and not a chance level, so it is tested apart from the untrained and permuted fronts.
 */
export const nullFamily = (relation: string): NullFamily => (isNoiseNull(relation) ? "labels" : "chance");

/** The noise-cluster null's pairs (relation "null:noise"): their stitches send the label alone. */
export const isNoiseNull = (relation: string): boolean => relation === `${NULL_PREFIX}noise`;

/** A null's name in the reading: "untrained", "permuted", "labels only (Smith et al.)". */
export const nullWords = (relation: string): string =>
  nullFamily(relation) === "labels" ? "labels only (Smith et al.)" : relation.slice(NULL_PREFIX.length);

/** The level of every seed-level statement: "beyond chance", "above the label alone", "told apart". */
export const SEED_TEST_ALPHA = 0.05;

/** The seed-level rule in words, printed under the lines that use it. */
export const SEED_TEST_RULE = `one-sided Welch t test over replicates (seeds), Holm-corrected across the comparisons a statement makes, at ${SEED_TEST_ALPHA * 100}% family-wise`;

/** One null's test: the pair's replicates against the null's. */
export interface NullTest {
  pair: string;
  /** The null's agreement over its replicates (each its own initialisation, training run or draw). */
  interval: Interval;
  /** The pair's mean minus the null's, with its p and 95% interval; null where either has one replicate. */
  test: WelchTest | null;
  /** Rejected "the pair is not above this null" after Holm's correction across the family's nulls. */
  rejected: boolean;
}

/** One pair's standing against one family of nulls at one point, mode and objective. */
export interface ChanceRow {
  pair: string;
  front: string;
  back: string;
  test_data: string;
  point: string;
  mode: string;
  objective: string;
  family: NullFamily;
  /** The pair's agreement over its replicates (seeds: the unit of the test). */
  score: Interval;
  nulls: NullTest[];
  /** The null the pair stands nearest (the largest p; an untested one first), and its interval. */
  null: Interval & { pair: string; test: WelchTest | null };
  /** Above every null of the family by the seed-level rule (SEED_TEST_RULE). */
  beyond: boolean;
  /** Why no test could be made (one replicate of the pair or a null); null when tested. */
  untested: string | null;
}

/**
 * Each real pair's agreement against its nulls (the nulls with its back, at its point, mode,
 * objective and test data), family by family: above every null of the family when a one-sided
 * Welch test over replicates rejects "not above" for each, Holm-corrected across them. Seeds are
 * the unit on both sides: the pair's replicates differ in their fronts or their IRI and stitching
 * seeds, a null's in its initialisation or draw; the test images are shared, so their error is
 * not the spread another run would show (docs/method.md, "Against chance").
 */
export function beyondChance(summary: SummaryRow[]): ChanceRow[] {
  const nulls = summary.filter((s) => isNullRelation(s.pair));
  const out: ChanceRow[] = [];
  for (const s of summary) {
    if (isNullRelation(s.pair) || s.pair === "identical") continue;
    const score = s.scores.agreement_prob;
    if (!Number.isFinite(score.mean)) continue;
    const mine = nulls.filter(
      (n) =>
        n.back === s.back &&
        n.point === s.point &&
        n.mode === s.mode &&
        n.objective === s.objective &&
        n.test_data === s.test_data &&
        Number.isFinite(n.scores.agreement_prob.mean),
    );
    for (const family of ["chance", "labels"] as const) {
      const these = mine.filter((n) => nullFamily(n.pair) === family);
      if (!these.length) continue;
      const tests = these.map((n) => ({
        pair: n.pair,
        interval: n.scores.agreement_prob,
        test: welchMoments(score, n.scores.agreement_prob),
      }));
      const untested = tests.filter((t) => t.test === null).map((t) => t.pair);
      const rejected = untested.length
        ? tests.map(() => false)
        : holm(
            tests.map((t) => (t.test as WelchTest).p),
            SEED_TEST_ALPHA,
          );
      const withRejected = tests.map((t, i) => ({ ...t, rejected: rejected[i] as boolean }));
      const nearest = [...withRejected].sort((a, b) => (b.test?.p ?? 2) - (a.test?.p ?? 2))[0] as NullTest;
      out.push({
        pair: s.pair,
        front: s.front,
        back: s.back,
        test_data: s.test_data,
        point: s.point,
        mode: s.mode,
        objective: s.objective,
        family,
        score,
        nulls: withRejected,
        null: { ...nearest.interval, pair: nearest.pair, test: nearest.test },
        beyond: !untested.length && withRejected.every((t) => t.rejected),
        untested: untested.length
          ? score.n < 2
            ? `${s.pair} has ${score.n} replicate`
            : `${untested.map(nullWords).join(", ")}: fewer than two replicates, or no spread over them on either side`
          : null,
      });
    }
  }
  return out;
}

/** "0.40 [0.33, 0.47], p 0.001": a difference with its 95% interval and one-sided p. */
export function differenceWords(t: WelchTest): string {
  const p = t.p < 0.001 ? "p < 0.001" : `p ${t.p.toFixed(3)}`;
  return `${t.diff >= 0 ? "+" : ""}${t.diff.toFixed(2)} [${t.lo.toFixed(2)}, ${t.hi.toFixed(2)}], ${p}`;
}

/**
 * The reading's lines against chance and against the label alone, one per pair, mode, objective
 * and family: "beyond chance" (above the label alone) at the points where the seed-level rule
 * holds against every null of the family, with the pair's and the nearest null's means and the
 * difference's interval, and the rule once at the end.
 */
export function chanceLines(summary: SummaryRow[]): string[] {
  const rows = beyondChance(summary);
  const groups = new Map<string, ChanceRow[]>();
  for (const r of rows) {
    const k = `${r.pair}\u0000${r.mode}\u0000${r.objective}\u0000${r.family}`;
    groups.set(k, [...(groups.get(k) ?? []), r]);
  }
  // Per pair: against chance before against the label alone, standard before invariance-aware.
  const order = (g: ChanceRow[]) => {
    const r = g[0] as ChanceRow;
    return [rows.findIndex((x) => x.pair === r.pair), r.family === "chance" ? 0 : 1, r.mode === "standard" ? 0 : 1];
  };
  const sorted = [...groups.values()].sort((a, b) => {
    const [x, y] = [order(a), order(b)];
    return (
      (x[0] as number) - (y[0] as number) || (x[1] as number) - (y[1] as number) || (x[2] as number) - (y[2] as number)
    );
  });
  const lines: string[] = [];
  for (const group of sorted) {
    const first = group[0] as ChanceRow;
    const at = (rs: ChanceRow[]) => rs.map((r) => r.point).join(", ");
    const yes = group.filter((r) => r.beyond);
    const no = group.filter((r) => !r.beyond);
    const [is, not, against] =
      first.family === "chance"
        ? ["beyond chance", "not beyond chance", "Against chance"]
        : ["above the label alone", "not above the label alone", "Against the label alone"];
    const word = no.length === 0 ? is : yes.length === 0 ? not : `${is} at ${at(yes)}, not at ${at(no)}`;
    const detail = group
      .map(
        (r) =>
          `${r.point} ${formatInterval(r.score, 2)} vs ${nullWords(r.null.pair)} ${formatInterval(r.null, 2)}` +
          (r.null.test ? `, difference ${differenceWords(r.null.test)}` : `, untested: ${r.untested}`),
      )
      .join("; ");
    lines.push(
      `${against}, ${first.pair} (${stitchModeWords(first.mode)} ${first.objective.toUpperCase()}): ${word} (${detail}; the nearest null at each point).`,
    );
  }
  if (lines.length) lines.push(`Rule against the nulls: ${SEED_TEST_RULE}.`);
  return lines;
}
