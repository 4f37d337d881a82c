// The grounding study (issue 40; presets/grounding.yaml): fronts whose reliance on a Pixel marker
// is graded by construction (train setting markerAgreement), each stitched into one clean back.
// The answer is known: more reliance on the marker means less functional similarity to a back
// that never saw it. So a faithful measure ranks the fronts in the opposite order of their
// reliance, and its rank correlation with reliance is negative. This follows the design of
// ReSi's grounding tests (Klabunde et al., ICLR 2025: models made to differ by construction,
// each measure scored by how well it orders them), with the reliance measured on each front, not
// assumed from p: a front trained at a lower agreement may still rely on its marker.
//
// A front's reliance is its own accuracy on the test set with class-consistent markers minus that
// with rolled markers (every class carrying another class's), the measure the demo's reading
// uses (findings/reading.ts relianceLine). Spearman's rho is taken within each replicate, over
// the fronts of that replicate (each replicate trains its own fronts), and summarised over
// replicates with the Student-t interval every other score gets (metrics/interval.ts).
import { type Interval, interval } from "../metrics/interval.js";
import { stitchModeWords } from "../stitch/modes.js";
import { isNullRelation } from "./chance.js";
import type { StitchRow } from "./rows.js";

/** Fronts a replicate needs before its rank correlation means something (2 give only +-1). */
export const GROUNDING_MIN_FRONTS = 3;

/**
 * The least span of the fronts' measured reliance (largest minus smallest, accuracy points) for a
 * replicate to be read as a grounding study: a rank correlation over fronts whose reliance does
 * not differ ranks noise. Three Pixel fronts trained alike differ by about 0.03; the study's
 * graded fronts span 0.4 or more (docs/method.md, "Grounding").
 */
export const GROUNDING_MIN_RELIANCE_SPAN = 0.1;

/**
 * Baselines every measure is set beside: what a front scores alone, which needs no stitch. If a
 * measure ranks reliance no better than the front's own accuracy, it measures that accuracy.
 */
export const GROUNDING_BASELINES = ["front accuracy", "front alone"] as const;

/**
 * Fronts a replicate needs for a partial rank correlation: with three, holding one variable leaves
 * no freedom (it is +-1 or undefined whatever the scores).
 */
export const GROUNDING_MIN_FRONTS_PARTIAL = 4;

/** One measure's rank correlation with reliance at one point. */
export interface GroundingRow {
  back: string;
  point: string;
  pointIndex: number;
  test_data: string;
  /** "standard slm", "iris fula", ... or "cka". */
  measure: string;
  /** Fronts per replicate (the fewest over replicates). */
  fronts: number;
  /** Spearman's rho per replicate, in replicate order (NaN where a replicate's scores were all tied). */
  rhos: number[];
  rho: Interval;
  /**
   * The partial rank correlation with reliance, the fronts' accuracy held (partialSpearman), per
   * replicate and over them: what the measure says of reliance beyond what accuracy says. NaN for
   * the accuracy itself, or where a replicate has no accuracy.
   */
  partialRhos: number[];
  partial: Interval;
}

/** Ranks from 1, ties given their average rank. */
function ranks(xs: readonly number[]): number[] {
  const order = xs.map((v, i) => [v, i] as const).sort((a, b) => a[0] - b[0]);
  const r = new Array<number>(xs.length);
  for (let i = 0; i < order.length; ) {
    let j = i;
    while (j + 1 < order.length && order[j + 1]?.[0] === order[i]?.[0]) j++;
    for (let k = i; k <= j; k++) r[order[k]?.[1] as number] = (i + j) / 2 + 1;
    i = j + 1;
  }
  return r;
}

/** Spearman's rank correlation (Pearson's on average ranks); NaN when either side is all ties. */
export function spearman(a: readonly number[], b: readonly number[]): number {
  if (a.length !== b.length) throw new RangeError(`spearman: ${a.length} against ${b.length} values`);
  const ra = ranks(a);
  const rb = ranks(b);
  const mean = (a.length + 1) / 2;
  let sab = 0;
  let saa = 0;
  let sbb = 0;
  for (let i = 0; i < a.length; i++) {
    const da = (ra[i] as number) - mean;
    const db = (rb[i] as number) - mean;
    sab += da * db;
    saa += da * da;
    sbb += db * db;
  }
  return saa > 0 && sbb > 0 ? sab / Math.sqrt(saa * sbb) : Number.NaN;
}

/**
 * Spearman's partial correlation of x and y with z held: the partial correlation of their ranks,
 * (r_xy - r_xz r_yz) / sqrt((1 - r_xz^2) (1 - r_yz^2)); NaN where z orders x or y completely or a
 * side is all ties.
 */
export function partialSpearman(x: readonly number[], y: readonly number[], z: readonly number[]): number {
  const [xy, xz, yz] = [spearman(x, y), spearman(x, z), spearman(y, z)];
  const d = Math.sqrt((1 - xz * xz) * (1 - yz * yz));
  return d > 1e-12 ? (xy - xz * yz) / d : Number.NaN;
}

/** A Student-t interval over replicates, clipped to a correlation's range. */
const rhoInterval = (xs: number[]): Interval => {
  const t = interval(xs);
  return Number.isFinite(t.halfWidth) ? { ...t, lo: Math.max(-1, t.lo), hi: Math.min(1, t.hi) } : t;
};

/**
 * Each measure's rank correlation with the fronts' reliance, per back, point and test data, where
 * every replicate has at least GROUNDING_MIN_FRONTS fronts with a measured reliance (shortcut
 * fronts with a rolled accuracy). Null and identical pairs take no part. Empty where no group has
 * enough: an experiment that is not a grounding study gets no rows.
 */
export function groundingRows(rows: StitchRow[]): GroundingRow[] {
  const usable = rows.filter(
    (r) => !isNullRelation(r.pair) && r.pair !== "identical" && Number.isFinite(r.front_reliance ?? Number.NaN),
  );
  // (back, point, test data) -> measure -> replicate -> front -> reliance, accuracy and its scores
  type Front = { reliance: number; accuracy: number; scores: number[] };
  const groups = new Map<string, { row: StitchRow; measures: Map<string, Map<number, Map<string, Front>>> }>();
  const add = (r: StitchRow, measure: string, score: number | null) => {
    if (score === null || !Number.isFinite(score)) return;
    const key = JSON.stringify([r.back, r.point, r.test_data]);
    const g = groups.get(key) ?? { row: r, measures: new Map() };
    groups.set(key, g);
    const byRep = g.measures.get(measure) ?? new Map<number, Map<string, Front>>();
    g.measures.set(measure, byRep);
    const byFront = byRep.get(r.replicate) ?? new Map<string, Front>();
    byRep.set(r.replicate, byFront);
    // Accuracies are counts over the test images, and their difference is ranked: rounded so that
    // float noise (0.95 - 0.10 against 0.96 - 0.11) does not break a tie.
    const f = byFront.get(r.front) ?? {
      reliance: Math.round((r.front_reliance as number) * 1e9) / 1e9,
      accuracy: r.front_clean_accuracy ?? Number.NaN,
      scores: [],
    };
    byFront.set(r.front, f);
    f.scores.push(score);
  };
  for (const r of usable) {
    add(r, `${r.mode} ${r.objective}`, r.agreement_prob);
    // A front's CKA compares the two models, not T: the same in every row of its point (the mean of equal values).
    add(r, "cka", r.cka);
    // The baselines: the front's own accuracy on clean images (not the best of its accuracies,
    // which for a marker front is its marked one, half of reliance itself) and its agreement with
    // the back alone, no stitch.
    add(r, "front accuracy", r.front_clean_accuracy ?? null);
    add(r, "front alone", r.front_alone_agreement_prob);
  }
  const out: GroundingRow[] = [];
  for (const { row, measures } of groups.values()) {
    for (const [measure, byRep] of measures) {
      const reps = [...byRep.entries()].sort((a, b) => a[0] - b[0]);
      // A replicate with too few fronts (a failed task), or whose fronts barely differ in reliance
      // (no study was designed there), has no rho; the others stand.
      const span = (f: Map<string, Front>) => {
        const rel = [...f.values()].map((x) => x.reliance);
        return Math.max(...rel) - Math.min(...rel);
      };
      const usableRep = (f: Map<string, Front>) =>
        f.size >= GROUNDING_MIN_FRONTS && span(f) >= GROUNDING_MIN_RELIANCE_SPAN - 1e-9;
      const full = reps.filter(([, f]) => usableRep(f));
      if (full.length === 0) continue;
      const fronts = Math.min(...full.map(([, f]) => f.size));
      const per = reps.map(([, f]) => {
        if (!usableRep(f)) return { rho: Number.NaN, partial: Number.NaN };
        const v = [...f.values()];
        // Several rows of one front in a replicate (stitching seeds): their mean.
        const reliance = v.map((x) => x.reliance);
        const score = v.map((x) => x.scores.reduce((a, b) => a + b, 0) / x.scores.length);
        const accuracy = v.map((x) => x.accuracy);
        return {
          rho: spearman(reliance, score),
          partial:
            measure === "front accuracy" || v.length < GROUNDING_MIN_FRONTS_PARTIAL || !accuracy.every(Number.isFinite)
              ? Number.NaN
              : partialSpearman(reliance, score, accuracy),
        };
      });
      const rhos = per.map((x) => x.rho);
      const partialRhos = per.map((x) => x.partial);
      // rho lives in [-1, 1]: the Student-t interval is clipped to it.
      const rho = rhoInterval(rhos);
      const partial = rhoInterval(partialRhos);
      out.push({
        back: row.back,
        point: row.point,
        pointIndex: row.pointIndex,
        test_data: row.test_data,
        measure,
        fronts,
        rhos,
        rho,
        partialRhos,
        partial,
      });
    }
  }
  return out.sort((a, b) => a.pointIndex - b.pointIndex || a.measure.localeCompare(b.measure));
}

/** A measure in a reader's words: "standard SLM", "invariance-aware FuLA", "CKA", "front accuracy". */
export function measureWords(measure: string): string {
  if (measure === "cka") return "CKA";
  if (measure === "front alone") return "front-alone agreement";
  if ((GROUNDING_BASELINES as readonly string[]).includes(measure)) return measure;
  const [mode, objective] = measure.split(" ");
  const name = (objective ?? "").toUpperCase().replace("FULA", "FuLA");
  return `${stitchModeWords(mode ?? "")} ${name}`;
}

const f2 = (x: number) => (x >= 0 ? "+" : "") + x.toFixed(2);
const inWords = (x: Interval) =>
  Number.isFinite(x.halfWidth) ? `${f2(x.mean)} [${f2(x.lo)}, ${f2(x.hi)}]` : `${f2(x.mean)} (one replicate)`;

/**
 * The reading's lines: per point, each measure's rho with its interval and its partial rho with
 * the fronts' accuracy held, the baselines (front accuracy, front-alone agreement) beside them,
 * which measures order the fronts as the ground truth says (the interval wholly below 0) and which
 * rank best. None where there is no grounding study (fewer than three fronts, or fronts whose
 * reliance spans less than GROUNDING_MIN_RELIANCE_SPAN).
 */
export function groundingLines(rows: GroundingRow[]): string[] {
  if (rows.length === 0) return [];
  const reps = Math.max(...rows.map((r) => r.rho.n));
  const lines = [
    `Grounding: how each measure orders the fronts by their reliance on the marker (accuracy on marked minus rolled test images, measured on each front). The ground truth: more reliance, less similar, so a faithful measure's rank correlation is negative. Spearman's rho over the ${Math.min(...rows.map((r) => r.fronts))} or more fronts of each replicate, mean and 95% interval over ${reps} replicates; in brackets after "held", the partial rho with the fronts' accuracy held; the fronts' accuracy and their agreement with the back alone are the baselines a measure must beat:`,
  ];
  const where = (r: GroundingRow) => JSON.stringify([r.back, r.point, r.test_data]);
  const several = (k: keyof GroundingRow) => new Set(rows.map((r) => r[k])).size > 1;
  const [backs, data] = [several("back"), several("test_data")];
  const isBaseline = (r: GroundingRow) => (GROUNDING_BASELINES as readonly string[]).includes(r.measure);
  const words = (r: GroundingRow) =>
    `${measureWords(r.measure)} ${inWords(r.rho)}${Number.isFinite(r.partial.mean) ? ` (held ${inWords(r.partial)})` : ""}`;
  for (const key of [...new Set(rows.map(where))]) {
    const all = rows.filter((r) => where(r) === key).sort((a, b) => a.rho.mean - b.rho.mean);
    const at = all.filter((r) => !isBaseline(r));
    const baselines = all.filter(isBaseline);
    const first = all[0] as GroundingRow;
    const point = `${first.point}${backs ? ` into ${first.back}` : ""}${data ? ` (${first.test_data} data)` : ""}`;
    const right = at.filter((r) => r.rho.hi < 0).map((r) => measureWords(r.measure));
    const best = at[0];
    // The best is told apart from the runner-up only where their intervals do not overlap.
    const second = at[1];
    const apart = best && second !== undefined && Number.isFinite(best.rho.hi) && best.rho.hi < second.rho.lo;
    lines.push(
      `Grounding at ${point}: ${at.map(words).join("; ")}. ` +
        (baselines.length ? `Baselines: ${baselines.map(words).join("; ")}. ` : "") +
        (right.length
          ? `Reliance ordered as expected (interval below 0): ${right.join(", ")}. `
          : "No measure's interval lies below 0. ") +
        (best
          ? `Lowest: ${measureWords(best.measure)}${second ? (apart ? ", told apart from the next" : `, not told apart from ${measureWords(second.measure)}`) : ""}.`
          : ""),
    );
  }
  return lines;
}
