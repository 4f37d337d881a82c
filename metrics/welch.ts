// Seed-level tests: whether one set of replicate values lies above another, with the replicates
// (seeds: fronts, or IRI and stitching seeds) as the unit, as comparisons of trained networks take
// them (Mehrer et al. 2020; Ding et al. 2021). Welch's t test on the replicate values, one-sided,
// with the difference's 95% interval, and Holm's correction where one pair is tested against
// several others (a pair against each of its nulls). Student's t distribution at real degrees of
// freedom (Welch's df are rarely whole) from the regularised incomplete beta function.

/** ln Γ(x) for x > 0 (Lanczos' approximation, g = 7, nine terms: about 15 digits). */
function logGamma(x: number): number {
  const c = [
    0.9999999999998099, 676.5203681218851, -1259.1392167224028, 771.3234287776531, -176.6150291621406,
    12.507343278686905, -0.13857109526572012, 9.984369578019572e-6, 1.5056327351493116e-7,
  ];
  if (x < 0.5) return Math.log(Math.PI / Math.sin(Math.PI * x)) - logGamma(1 - x);
  const z = x - 1;
  let a = c[0] as number;
  const t = z + 7.5;
  for (let i = 1; i < 9; i++) a += (c[i] as number) / (z + i);
  return 0.5 * Math.log(2 * Math.PI) + (z + 0.5) * Math.log(t) - t + Math.log(a);
}

/** The continued fraction of the incomplete beta function (modified Lentz), for x < (a + 1) / (a + b + 2). */
function betaFraction(x: number, a: number, b: number): number {
  const tiny = 1e-300;
  let c = 1;
  let d = 1 - ((a + b) * x) / (a + 1);
  d = 1 / (Math.abs(d) < tiny ? tiny : d);
  let h = d;
  for (let m = 1; m <= 300; m++) {
    const m2 = 2 * m;
    // The even step, then the odd one.
    for (const num of [
      (m * (b - m) * x) / ((a + m2 - 1) * (a + m2)),
      (-(a + m) * (a + b + m) * x) / ((a + m2) * (a + m2 + 1)),
    ]) {
      d = 1 + num * d;
      d = 1 / (Math.abs(d) < tiny ? tiny : d);
      c = 1 + num / c;
      if (Math.abs(c) < tiny) c = tiny;
      h *= d * c;
    }
    if (Math.abs(d * c - 1) < 1e-15) break;
  }
  return h;
}

/** The regularised incomplete beta function I_x(a, b). */
export function betaIncomplete(x: number, a: number, b: number): number {
  if (x <= 0) return 0;
  if (x >= 1) return 1;
  const front = Math.exp(logGamma(a + b) - logGamma(a) - logGamma(b) + a * Math.log(x) + b * Math.log(1 - x));
  return x < (a + 1) / (a + b + 2) ? (front * betaFraction(x, a, b)) / a : 1 - (front * betaFraction(1 - x, b, a)) / b;
}

/** P(T <= t) for Student's t with df degrees of freedom (df > 0, not necessarily whole). */
export function tCdf(t: number, df: number): number {
  if (!(df > 0)) throw new RangeError(`degrees of freedom must be positive, got ${df}`);
  if (!Number.isFinite(t)) return t > 0 ? 1 : 0;
  const tail = betaIncomplete(df / (df + t * t), df / 2, 0.5) / 2;
  return t > 0 ? 1 - tail : tail;
}

/** The p quantile of Student's t with df degrees of freedom (bisection on tCdf, to 1e-12). */
export function tQuantile(p: number, df: number): number {
  if (!(p > 0 && p < 1)) throw new RangeError(`a quantile's probability is in (0, 1), got ${p}`);
  if (p < 0.5) return -tQuantile(1 - p, df);
  let [lo, hi] = [0, 1];
  while (tCdf(hi, df) < p) hi *= 2;
  for (let i = 0; i < 200 && hi - lo > 1e-12 * Math.max(1, hi); i++) {
    const mid = (lo + hi) / 2;
    if (tCdf(mid, df) < p) lo = mid;
    else hi = mid;
  }
  return (lo + hi) / 2;
}

/** Welch's test of a against b on their replicate values. */
export interface WelchTest {
  /** mean(a) - mean(b). */
  diff: number;
  /** The difference's standard error, sqrt(var a / n_a + var b / n_b). */
  se: number;
  /** Welch-Satterthwaite degrees of freedom. */
  df: number;
  t: number;
  /** One-sided p of "a lies above b" (small: a is above). */
  p: number;
  /** The difference's two-sided 95% interval. */
  lo: number;
  hi: number;
}

const mean = (xs: readonly number[]) => xs.reduce((s, v) => s + v, 0) / xs.length;
const variance = (xs: readonly number[]) => {
  const m = mean(xs);
  return xs.reduce((s, v) => s + (v - m) ** 2, 0) / (xs.length - 1);
};

/** A sample's moments: its mean, standard deviation (n - 1 in the denominator) and size. */
export interface Moments {
  mean: number;
  std: number;
  n: number;
}

/**
 * Welch's t test that a's replicates lie above b's (non-finite values left out), or null where
 * either has fewer than two values or both have no spread at all (no test can be made).
 */
export function welch(a: readonly number[], b: readonly number[]): WelchTest | null {
  const moments = (xs: readonly number[]): Moments => {
    const ok = xs.filter(Number.isFinite);
    return {
      mean: ok.length ? mean(ok) : Number.NaN,
      std: ok.length > 1 ? Math.sqrt(variance(ok)) : Number.NaN,
      n: ok.length,
    };
  };
  return welchMoments(moments(a), moments(b));
}

/** The same test from each sample's moments (a replicate summary's mean, std and n). */
export function welchMoments(a: Moments, b: Moments): WelchTest | null {
  if (a.n < 2 || b.n < 2 || ![a.mean, a.std, b.mean, b.std].every(Number.isFinite)) return null;
  const [va, vb] = [a.std ** 2 / a.n, b.std ** 2 / b.n];
  const se = Math.sqrt(va + vb);
  if (!(se > 0)) return null;
  const df = (va + vb) ** 2 / (va ** 2 / (a.n - 1) + vb ** 2 / (b.n - 1));
  const diff = a.mean - b.mean;
  const t = diff / se;
  const half = tQuantile(0.975, df) * se;
  return { diff, se, df, t, p: 1 - tCdf(t, df), lo: diff - half, hi: diff + half };
}

/**
 * Holm's step-down correction: which of the hypotheses with these p values are rejected at
 * family-wise level alpha (in the order given).
 */
export function holm(ps: readonly number[], alpha = 0.05): boolean[] {
  const order = ps.map((p, i) => [p, i] as const).sort((x, y) => x[0] - y[0]);
  const rejected = ps.map(() => false);
  for (const [k, [p, i]] of order.entries()) {
    if (!(p <= alpha / (ps.length - k))) break;
    rejected[i] = true;
  }
  return rejected;
}

/** The standard normal distribution function, from erfc: its Taylor series near 0, its continued fraction in the tails. */
function normalCdf(z: number): number {
  const x = Math.abs(z) / Math.SQRT2;
  let erfc: number;
  if (x < 3) {
    // erf by its Taylor series.
    let sum = x;
    let term = x;
    for (let n = 1; n < 200; n++) {
      term *= (-x * x) / n;
      sum += term / (2 * n + 1);
      if (Math.abs(term) < 1e-17) break;
    }
    erfc = 1 - (2 / Math.sqrt(Math.PI)) * sum;
  } else {
    // erfc by its continued fraction (Lentz).
    let f = x;
    for (let n = 60; n >= 1; n--) f = x + n / 2 / f;
    erfc = Math.exp(-x * x) / Math.sqrt(Math.PI) / f;
  }
  return z >= 0 ? 1 - erfc / 2 : erfc / 2;
}

/**
 * The power of the one-sided Welch test at level alpha: the probability that it finds b's mean
 * below a's when they differ by delta, n replicates each, each with standard deviation sd (normal
 * values). Taken at equal spreads, where Welch's df is 2n - 2: the noncentral t's tail,
 * P(Z + ncp > c sqrt(V / df)) over V ~ chi-square(df), integrated numerically (Simpson).
 */
export function welchPower(delta: number, sd: number, n: number, alpha = 0.05): number {
  const df = 2 * n - 2;
  const c = tQuantile(1 - alpha, df);
  const ncp = delta / (sd * Math.sqrt(2 / n));
  const logNorm = (df / 2) * Math.log(2) + logGamma(df / 2);
  const density = (v: number) => (v <= 0 ? 0 : Math.exp((df / 2 - 1) * Math.log(v) - v / 2 - logNorm));
  const top = df + 40 * Math.sqrt(2 * df) + 40;
  const steps = 4000;
  const h = top / steps;
  let sum = 0;
  for (let i = 0; i <= steps; i++) {
    const v = i * h;
    const w = i === 0 || i === steps ? 1 : i % 2 ? 4 : 2;
    sum += w * density(v) * (1 - normalCdf(c * Math.sqrt(v / df) - ncp));
  }
  return (sum * h) / 3;
}
