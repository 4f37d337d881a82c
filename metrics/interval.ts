// Means with 95% intervals over replicates (Student t), and the rule by which two such intervals
// tell a difference: a conclusion such as "pair X is less similar than pair Y at point i" holds
// only when their intervals do not overlap (docs/method.md, "Replicates").

/**
 * The 0.975 quantile of Student's t with df degrees of freedom (df 1-30 from the table, beyond
 * that the Cornish-Fisher expansion around the normal quantile, within 1e-4 of the exact value).
 */
export function tQuantile975(df: number): number {
  if (!(Number.isInteger(df) && df >= 1))
    throw new RangeError(`degrees of freedom must be a positive integer, got ${df}`);
  const table = [
    12.7062, 4.3027, 3.1824, 2.7764, 2.5706, 2.4469, 2.3646, 2.306, 2.2622, 2.2281, 2.201, 2.1788, 2.1604, 2.1448,
    2.1314, 2.1199, 2.1098, 2.1009, 2.093, 2.086, 2.0796, 2.0739, 2.0687, 2.0639, 2.0595, 2.0555, 2.0518, 2.0484,
    2.0452, 2.0423,
  ];
  if (df <= table.length) return table[df - 1];
  const z = 1.959964;
  const g1 = (z ** 3 + z) / 4;
  const g2 = (5 * z ** 5 + 16 * z ** 3 + 3 * z) / 96;
  const g3 = (3 * z ** 7 + 19 * z ** 5 + 17 * z ** 3 - 15 * z) / 384;
  return z + g1 / df + g2 / df ** 2 + g3 / df ** 3;
}

export interface Interval {
  /** Replicates with a finite value (non-finite ones are never averaged: they are counted in `dropped`). */
  n: number;
  mean: number;
  /** Sample standard deviation (n - 1); NaN for one replicate. */
  std: number;
  /** Half-width of the 95% interval, t_{0.975, n-1} std / sqrt(n); NaN for one replicate. */
  halfWidth: number;
  lo: number;
  hi: number;
  /** Values that were not finite (NaN scores), left out. */
  dropped: number;
}

/** Mean and 95% Student-t interval of the finite values. */
export function interval(values: readonly number[]): Interval {
  const xs = values.filter((v) => Number.isFinite(v));
  const n = xs.length;
  const dropped = values.length - n;
  if (n === 0)
    return { n, mean: Number.NaN, std: Number.NaN, halfWidth: Number.NaN, lo: Number.NaN, hi: Number.NaN, dropped };
  const mean = xs.reduce((s, v) => s + v, 0) / n;
  if (n === 1) return { n, mean, std: Number.NaN, halfWidth: Number.NaN, lo: Number.NaN, hi: Number.NaN, dropped };
  const std = Math.sqrt(xs.reduce((s, v) => s + (v - mean) ** 2, 0) / (n - 1));
  const halfWidth = (tQuantile975(n - 1) * std) / Math.sqrt(n);
  return { n, mean, std, halfWidth, lo: mean - halfWidth, hi: mean + halfWidth, dropped };
}

/**
 * How two intervals compare: "higher" or "lower" when a's interval lies wholly above or below b's,
 * "overlap" when they overlap, "unknown" when either has no interval (fewer than two replicates).
 */
export function compareIntervals(a: Interval, b: Interval): "higher" | "lower" | "overlap" | "unknown" {
  if (!(Number.isFinite(a.halfWidth) && Number.isFinite(b.halfWidth))) return "unknown";
  if (a.lo > b.hi) return "higher";
  if (a.hi < b.lo) return "lower";
  return "overlap";
}
