// Seed-level tests (metrics/welch.ts): Student's t at real degrees of freedom against closed forms
// and the t table, Welch's test against a case worked by hand, Holm's correction, and the test's
// error rates by simulation: at about its nominal level when there is no difference, and at the
// power its calculation gives when the replicates are 0.1 apart with the demo's spread.
import assert from "node:assert/strict";
import { test } from "node:test";
import { Rng } from "../data/rng.js";
import { tQuantile975 } from "../metrics/interval.js";
import { holm, tCdf, tQuantile, welch, welchPower } from "../metrics/welch.js";
import { normals } from "./helpers/normals.js";

const close = (a: number, b: number, tol: number, what: string) =>
  assert.ok(Math.abs(a - b) <= tol, `${what}: ${a} against ${b}`);

test("Student's t: its distribution function in closed form at 1 and 2 degrees of freedom, its quantiles as the table's", () => {
  for (const t of [-30, -2.5, -0.3, 0, 0.7, 4.3, 50]) {
    close(tCdf(t, 1), 0.5 + Math.atan(t) / Math.PI, 1e-12, `df 1, t ${t}`);
    close(tCdf(t, 2), 0.5 + t / (2 * Math.sqrt(2 + t * t)), 1e-12, `df 2, t ${t}`);
  }
  // Symmetric, and whole degrees of freedom give the table's 0.975 quantiles (4 decimals).
  close(tCdf(-1.3, 3.7) + tCdf(1.3, 3.7), 1, 1e-12, "symmetry");
  for (let df = 1; df <= 30; df++) close(tQuantile(0.975, df), tQuantile975(df), 6e-5, `df ${df}`);
  close(tQuantile(0.025, 5.5), -tQuantile(0.975, 5.5), 1e-10, "the lower tail");
  close(tCdf(tQuantile(0.9, 2.7), 2.7), 0.9, 1e-10, "quantile and distribution invert each other");
});

test("Welch's test on a case worked by hand, and none where a side has one value or neither spreads", () => {
  // a: mean 2, variance 1 over 3; b: mean 0.5, variance 0.5 over 2. se^2 = 1/3 + 1/4.
  const w = welch([1, 2, 3], [0, 1]);
  assert.ok(w);
  close(w.diff, 1.5, 1e-12, "difference");
  close(w.se, Math.sqrt(1 / 3 + 1 / 4), 1e-12, "standard error");
  const df = (1 / 3 + 1 / 4) ** 2 / ((1 / 3) ** 2 / 2 + (1 / 4) ** 2 / 1);
  close(w.df, df, 1e-12, "Welch-Satterthwaite df");
  close(w.p, 1 - tCdf(1.5 / Math.sqrt(7 / 12), df), 1e-12, "one-sided p");
  close(w.hi - w.diff, tQuantile(0.975, df) * w.se, 1e-12, "the interval's half-width");
  assert.equal(welch([1], [0, 1]), null);
  assert.equal(welch([0.5, 0.5], [0.2, 0.2]), null, "no spread: no test");
  assert.equal(welch([1, 2, Number.NaN, 3], [0, 1])?.diff, 1.5, "a non-finite value is left out");
});

test("Holm's correction steps down the sorted p values and stops at the first it keeps", () => {
  assert.deepEqual(holm([0.01, 0.04, 0.03]), [true, false, false]);
  assert.deepEqual(holm([0.01, 0.02, 0.04]), [true, true, true]);
  assert.deepEqual(holm([0.2, 0.001]), [false, true]);
  assert.deepEqual(holm([]), []);
});

test("by simulation: 'above' at no more than its level where there is no difference, and at its calculated power at 0.1 apart", () => {
  const rng = new Rng(54);
  const trials = 4000;
  const rate = (delta: number, sd: number, n: number) => {
    let above = 0;
    for (let i = 0; i < trials; i++) {
      const w = welch(normals(rng, n, 0.5 + delta, sd), normals(rng, n, 0.5, sd));
      if (w && w.p < 0.05) above++;
    }
    return above / trials;
  };
  const se = (p: number) => Math.sqrt((p * (1 - p)) / trials);
  // One distribution, three replicates each (the nulls'): Welch is a little conservative there.
  const none = rate(0, 0.05, 3);
  assert.ok(none <= 0.05 + 3 * se(0.05), `said 'above' in ${none} of trials with no difference`);
  // 0.1 apart at the demo's spread (replicates' sd about 0.08 at layer2.1, six each): the power
  // calculation (equal spreads, df 2n - 2) says 0.645; Welch, which estimates the df, a little less.
  const power = welchPower(0.1, 0.08, 6);
  close(power, 0.6445, 5e-4, "the calculated power");
  const found = rate(0.1, 0.08, 6);
  assert.ok(found <= power + 3 * se(power) && found >= power - 0.04, `found in ${found} of trials, power ${power}`);
});
