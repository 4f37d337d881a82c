// `compare --budget`: the duration a flag gives, the order in which settings are reduced to fit
// (on a constructed cost, so that which candidate fits is known), the line that says what was
// reduced, the refusal, and what a plan over an hour on the CPU says (on constructed estimates).
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  BUDGET_MIN_STITCH_STEPS,
  budgetLine,
  budgetRefusal,
  type CompareScale,
  fitBudget,
  longPlanAdvice,
  parseDuration,
  type ScaleKey,
} from "../experiments/budget.js";
import { COMPARE_DEFAULTS } from "../experiments/compare.js";

test("a duration is a number and a unit, or several; anything else names the forms", () => {
  const cases: [string, number][] = [
    ["90s", 90],
    ["30m", 1800],
    ["45min", 2700],
    ["2h", 7200],
    ["1h30m", 5400],
    ["1h 30m", 5400],
    ["1.5h", 5400],
    [" 2H ", 7200],
  ];
  for (const [text, seconds] of cases) assert.equal(parseDuration(text), seconds, text);
  for (const bad of ["", "30", "30x", "m", "0m", "-5m", "5m-", "h2", "1.h"])
    assert.throws(
      () => parseDuration(bad),
      (e: Error) => e.message === `not a duration: '${bad}' (give a number and a unit: 90s, 30m, 2h or 1h30m)`,
      bad,
    );
});

const POINTS = ["p0", "p1", "p2", "p3", "p4", "p5", "p6", "p7", "p8"];

/** The paper protocol's shape: every point, three replicates, every image. */
const PAPER: CompareScale = {
  replicates: 3,
  points: POINTS,
  iris: null,
  images: null,
  batch: 128,
  epochs: 30,
  test: null,
};

/** A cost whose fitting candidate is known by hand: replicates x points x (IRIs + T's images) / 100 + test images / 100. */
function cost(s: CompareScale): number {
  return (s.replicates * s.points.length * ((s.iris ?? 1000) + (s.images ?? 1000))) / 100 + (s.test ?? 10000) / 100;
}

const bounds = (fixed: ScaleKey[] = []) => ({ trainCount: 1000, testCount: 10000, fixed: new Set(fixed) });

test("a budget reduces points first, then replicates, then IRIs and T's images, then test images, each only as far as it must", () => {
  // The whole plan costs 3 x 9 x 2000 / 100 + 100 = 640.
  assert.deepEqual(fitBudget(PAPER, 640, cost, bounds()), { scale: PAPER, seconds: 640, fits: true });
  // k points cost 60 k + 100: six (relative depths 1/6 ... 1) for 500.
  const six = fitBudget(PAPER, 500, cost, bounds());
  assert.deepEqual(six.scale, { ...PAPER, points: ["p1", "p3", "p4", "p5", "p7", "p8"] });
  assert.equal(six.seconds, 460);
  // Two points (220) are not enough for 200: two replicates (180).
  const two = fitBudget(PAPER, 200, cost, bounds());
  assert.deepEqual(two.scale, { ...PAPER, replicates: 2, points: ["p4", "p8"] });
  assert.equal(two.seconds, 180);
  // One replicate (140) is not enough for 130: 4 n / 100 + 100 <= 130 gives n <= 750, tried in 16s: 736.
  const images = fitBudget(PAPER, 130, cost, bounds());
  assert.deepEqual(images.scale, { ...PAPER, replicates: 1, points: ["p4", "p8"], iris: 736, images: 736 });
  // n <= 125: 112 images, one batch of them, so T's epochs rise to keep its steps.
  const few = fitBudget(PAPER, 105, cost, bounds());
  assert.deepEqual(few.scale, {
    ...PAPER,
    replicates: 1,
    points: ["p4", "p8"],
    iris: 112,
    images: 112,
    batch: 112,
    epochs: BUDGET_MIN_STITCH_STEPS,
  });
  assert.equal(BUDGET_MIN_STITCH_STEPS, 120, "the fast protocol's 120 steps of one batch of 48");
  // 32 images (1.28) and then test images: t / 100 <= 48.72 gives 4800 (in 100s).
  const test = fitBudget(PAPER, 50, cost, bounds());
  assert.deepEqual(test.scale, { ...few.scale, iris: 32, images: 32, batch: 32, test: 4800 });
  // Not even the smallest fits: every setting at its floor, with its cost, and fits false.
  const none = fitBudget(PAPER, 5, cost, bounds());
  assert.equal(none.fits, false);
  assert.deepEqual(none.scale, { ...test.scale, test: 500 });
  assert.ok(Math.abs(none.seconds - 6.28) < 1e-9, `${none.seconds}`);
});

test("a setting given as a flag is never reduced, and candidates are searched, not all costed", () => {
  let calls = 0;
  const counted = (s: CompareScale) => {
    calls++;
    return cost(s);
  };
  // Three replicates kept: 3 x 2 points x 2 n / 100 + 100 <= 200 gives n <= 833: 832.
  const kept = fitBudget(PAPER, 200, counted, bounds(["replicates"]));
  assert.deepEqual(kept.scale, { ...PAPER, points: ["p4", "p8"], iris: 832, images: 832 });
  assert.ok(calls < 30, `${calls} costs for about 80 candidates`);
  // The IRIs given: only T's images are reduced, and only the test images after them.
  // Smallest: 1 x 9 x (256 + 32) / 100 + 500 / 100 = 30.92, over 20.
  const iris = fitBudget({ ...PAPER, iris: 256 }, 20, cost, bounds(["iris", "points", "epochs"]));
  assert.deepEqual(iris, {
    scale: { ...PAPER, replicates: 1, iris: 256, images: 32, batch: 32, test: 500 },
    seconds: 30.92,
    fits: false,
  });
});

test("every stitch keeps one full batch: T's batch follows the fewer of IRIs and images, and a batch given as a flag bounds both from below", () => {
  // T's images given (48): the IRIs are cut to 32 and T's batch with them, since an invariance-aware
  // T trains on the IRIs (a batch of 48 over 32 IRIs would be no batch at all).
  const images = fitBudget(PAPER, 5, cost, bounds(["images"])).scale;
  assert.equal(images.images, PAPER.images);
  assert.equal(images.iris, 32);
  assert.equal(images.batch, 32);
  // A batch of 64 given: neither the IRIs nor T's images go below it.
  const batch = fitBudget(PAPER, 5, cost, bounds(["batch"])).scale;
  assert.equal(batch.batch, PAPER.batch);
  assert.ok((batch.iris ?? 0) >= PAPER.batch && (batch.images ?? 0) >= PAPER.batch, JSON.stringify(batch));
});

test("the budget line says what it reduced, from what to what, and the estimate", () => {
  const fit = fitBudget(PAPER, 105, cost, bounds());
  assert.equal(
    budgetLine("30m", PAPER, fit),
    "budget 30m: replicates 3 -> 1, points 9 -> 2 (p4, p8), IRIs and T's images all -> 112 per set, " +
      "T's batch 128 -> 112, epochs 30 -> 120 (at least 120 steps); estimate 1 min 44 s",
  );
  assert.equal(
    budgetLine("2h", PAPER, fitBudget(PAPER, 640, cost, bounds())),
    "budget 2h: nothing reduced; estimate 10 min 40 s",
  );
  const refused = budgetRefusal("5s", fitBudget(PAPER, 5, cost, bounds(["replicates"])), new Set(["replicates"]));
  assert.equal(
    refused,
    "--budget 5s: even the smallest settings it may pick (3 replicates, 2 points, 32 IRIs per set, T 120 epochs of 32 images (batch 32), 500 test images; --replicates as given) " +
      "are estimated at 9 s on this machine. Give a larger budget or fewer of --replicates, or run on a GPU (--device cuda)",
  );
});

test("a plan over an hour on the CPU says how to cut it and that a GPU runs it as planned; not otherwise", () => {
  const [line, ...rest] = longPlanAdvice(3601, "cpu", PAPER);
  assert.equal(rest.length, 0);
  assert.equal(
    line,
    "too long   1 h 0 min is over an hour on the CPU. To cut it: --budget 45m picks the largest settings that fit " +
      "(fewer points first, then replicates, then IRIs and T's images, then test images), or give the fast protocol's sizes yourself: " +
      "--points p4,p8 --limit 48 --batch-size 48 --epochs 120 --test-limit 1000. A GPU (--device cuda) runs it as planned.",
  );
  // The fast protocol's replicates are the paper's three: nothing to cut there.
  assert.equal(COMPARE_DEFAULTS.replicates, PAPER.replicates);
  assert.deepEqual(longPlanAdvice(3600, "cpu", PAPER), [], "an hour is not over an hour");
  assert.deepEqual(longPlanAdvice(40_000, "cuda", PAPER), []);
  assert.deepEqual(longPlanAdvice(40_000, "cuda:1", PAPER), []);
  // At the fast protocol's sizes already (a slow machine): only the budget and the GPU are left to say.
  const fast: CompareScale = {
    replicates: COMPARE_DEFAULTS.replicates,
    points: ["p4", "p8"],
    iris: COMPARE_DEFAULTS.iris.limit,
    images: COMPARE_DEFAULTS.stitch.limit,
    batch: COMPARE_DEFAULTS.stitch.batchSize,
    epochs: COMPARE_DEFAULTS.stitch.epochs,
    test: COMPARE_DEFAULTS.testLimit,
  };
  const [slow] = longPlanAdvice(5000, "cpu", fast);
  assert.match(
    slow,
    /^too long {3}1 h 23 min is over an hour on the CPU\. To cut it: --budget 45m picks .*test images\)\. A GPU/,
  );
  assert.doesNotMatch(slow, /fast protocol's sizes/);
});
