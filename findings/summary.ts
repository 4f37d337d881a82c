// The replicate summary of an experiment's results: per pair, point, objective, mode and test
// data, the mean, standard deviation and 95% Student-t interval of every score over replicates
// (summary.csv, the report's table and figures' bands).
import { type Interval, interval } from "../metrics/interval.js";
import type { StitchRow } from "./rows.js";

/** The scores summarised over replicates (columns of results.csv). */
export const SUMMARY_SCORES = [
  "agreement_prob",
  "accuracy",
  "hard_agreement",
  "soft_error_consistency",
  "hard_error_consistency",
  "cka",
  "excess_agreement",
  "robust_accuracy",
  "robust_agreement_prob",
] as const;
export type SummaryScore = (typeof SUMMARY_SCORES)[number];

export interface SummaryRow {
  pair: string;
  front: string;
  back: string;
  point: string;
  pointIndex: number;
  objective: string;
  mode: string;
  test_data: string;
  /** Replicates in the group (each score's interval says how many had a finite value: its n). */
  n: number;
  scores: Record<SummaryScore, Interval>;
  /**
   * agreement_prob's standard error over the test images: a replicate's own, or the mean of the
   * replicates' (null where one was not recorded). Replicates are scored on the same test images,
   * so averaging them does not shrink the test sample's error. What compare's intervals add to the
   * seeds' spread (seedAndImageInterval).
   */
  agreementProbSe: number | null;
}

/** Points in network order. */
export function pointsOf(rows: StitchRow[]): string[] {
  return [...new Map(rows.map((r) => [r.point, r.pointIndex])).entries()].sort((a, b) => a[1] - b[1]).map(([p]) => p);
}

/** The key of a run's summary row: its group and point. */
export const rowKey = (r: Record<"pair" | "front" | "back" | "objective" | "mode" | "test_data" | "point", string>) =>
  `${groupKey(r)}\t${r.point}`;

export const groupKey = (r: Record<"pair" | "front" | "back" | "objective" | "mode" | "test_data", string>) =>
  [r.pair, r.front, r.back, r.objective, r.mode, r.test_data].join("\t");

/** Items grouped by key, groups in order of first appearance (Map.groupBy, which Node 20 lacks). */
export function groupBy<T, K>(items: Iterable<T>, key: (item: T) => K): Map<K, T[]> {
  const groups = new Map<K, T[]>();
  for (const item of items) {
    const k = key(item);
    const group = groups.get(k);
    if (group) group.push(item);
    else groups.set(k, [item]);
  }
  return groups;
}

/** One summary row per (pair, front, back, point, objective, mode, test data), over replicates and seeds. */
export function summarize(rows: StitchRow[]): SummaryRow[] {
  const out: SummaryRow[] = [];
  for (const rs of groupBy(rows, rowKey).values()) {
    const r = rs[0];
    const scores = Object.fromEntries(
      SUMMARY_SCORES.map((s) => [
        s,
        interval(perReplicate(rs, (x) => (x[s] === null ? Number.NaN : (x[s] as number)))),
      ]),
    ) as Record<SummaryScore, Interval>;
    out.push({
      pair: r.pair,
      front: r.front,
      back: r.back,
      point: r.point,
      pointIndex: r.pointIndex,
      objective: r.objective,
      mode: r.mode,
      test_data: r.test_data,
      n: new Set(rs.map((x) => x.replicate)).size,
      scores,
      agreementProbSe: testImageSe(rs),
    });
  }
  return out.sort((a, b) => groupKey(a).localeCompare(groupKey(b)) || a.pointIndex - b.pointIndex);
}

/** The mean of the replicates' test-image standard errors of agreement_prob (null where any lacks one). */
function testImageSe(rows: StitchRow[]): number | null {
  const per = perReplicate(rows, (r) => r.agreement_prob_se ?? Number.NaN);
  return per.length && per.every(Number.isFinite) ? per.reduce((a, b) => a + b, 0) / per.length : null;
}

/**
 * One value per replicate: the mean over its stitching seeds of the finite values (NaN when it
 * has none). Seeds within a replicate share their front model, so they are not independent
 * replicates and never count as such.
 */
export function perReplicate(rows: StitchRow[], value: (r: StitchRow) => number): number[] {
  return [...groupBy(rows, (r) => r.replicate).entries()]
    .sort((a, b) => a[0] - b[0])
    .map(([, rs]) => {
      const ok = rs.map(value).filter(Number.isFinite);
      return ok.length ? ok.reduce((a, b) => a + b, 0) / ok.length : Number.NaN;
    });
}

/** "0.912 ± 0.031" (or "0.912" for one replicate, "-" for none). */
export function formatInterval(i: Interval | undefined, digits = 3): string {
  if (!i || i.n === 0) return "-";
  return Number.isFinite(i.halfWidth)
    ? `${i.mean.toFixed(digits)} ± ${i.halfWidth.toFixed(digits)}`
    : i.mean.toFixed(digits);
}

/** The normal quantile of a two-sided 95% interval over the test images. */
const Z_975 = 1.959964;

/**
 * A summary row's agreement with its interval: over replicates where there are several; with one,
 * mean +- 1.96 standard errors over the test images (what another draw of test images would give).
 * The band a null front is read with (findings/chance.ts).
 */
export function agreementInterval(row: SummaryRow): Interval {
  const over = row.scores.agreement_prob;
  const se = row.agreementProbSe ?? Number.NaN;
  if (row.n > 1 || !Number.isFinite(se) || !Number.isFinite(over.mean)) return over;
  const halfWidth = Z_975 * se;
  return { ...over, halfWidth, lo: over.mean - halfWidth, hi: over.mean + halfWidth };
}

/** What an interval of seedAndImageInterval is over. */
export type IntervalSources = "seeds and test images" | "seeds" | "test images" | "none";

/**
 * A summary row's agreement with an interval over both sources that move a score of fixed models
 * (compare's verdict): the replicates' IRI and stitching seeds, Student t over replicates, and the
 * test sample, 1.96 standard errors (the replicates' mean: they share the test images). The two
 * half-widths add in quadrature, as the errors of independent sources do: the mean of R replicates
 * on one test sample has variance seeds^2 / R + test^2. One replicate: the test images' alone
 * (another seed may land outside it: the verdict says so); no standard error recorded: the seeds'.
 */
export function seedAndImageInterval(row: SummaryRow): Interval & { over: IntervalSources } {
  const seeds = row.scores.agreement_prob;
  const se = row.agreementProbSe ?? Number.NaN;
  const hasSeeds = Number.isFinite(seeds.halfWidth);
  if (!Number.isFinite(seeds.mean) || !Number.isFinite(se)) return { ...seeds, over: hasSeeds ? "seeds" : "none" };
  const images = Z_975 * se;
  const halfWidth = hasSeeds ? Math.hypot(seeds.halfWidth, images) : images;
  return {
    ...seeds,
    halfWidth,
    lo: seeds.mean - halfWidth,
    hi: seeds.mean + halfWidth,
    over: hasSeeds ? "seeds and test images" : "test images",
  };
}
