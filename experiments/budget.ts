// `stitchlab compare --budget 30m`: the largest settings whose estimate fits a time budget on this
// machine, from the one probe of the protocol's plan (the CLI costs each candidate with
// experiments/estimate.ts estimateFrom on its re-planned experiment). What may be reduced, in this
// order, each only as far as needed and never below its floor (BUDGET_FLOORS):
//   1. points, to 2 (relative depths 1/2 and 1, pointsAtDepths): the middle and the last are where
//      the paper's findings part; the points between place the parting more finely, they do not
//      decide whether there is one;
//   2. replicates, to 1: fewer IRI and stitching seeds widen the intervals honestly (Student t over
//      fewer), where fewer images would move the scores themselves; with one, the intervals cover the
//      test images only, and the verdict says another seed may land outside them (a seed moved a
//      full-width score at the last point by 0.043, twice the test images' half-width);
//   3. IRIs per set and T's real images, together (standard and invariance-aware T then see as
//      many images), to 32; T keeps at least the fast protocol's steps (its batch follows the
//      images, its epochs rise), since fewer leave T near its least-squares start;
//   4. test images, to 500: last, since they set the intervals' width that decides close or apart.
// A setting the user gave as a flag is never reduced.
import { COMPARE_DEFAULTS, pointsAtDepths } from "./compare.js";
import { formatDuration } from "./estimate.js";
import type { IrisTask, Plan, StitchTask } from "./plan.js";

/** What a compare runs at, as far as a budget reduces it (null: every image of the split). */
export interface CompareScale {
  replicates: number;
  points: string[];
  /** IRIs per front and point. */
  iris: number | null;
  /** T's real training images (standard mode; invariance-aware T trains on the IRI set). */
  images: number | null;
  /** T's batch and epochs, which follow its images (shrinkImages). */
  batch: number;
  epochs: number;
  /** Test images. */
  test: number | null;
}
export type ScaleKey = keyof CompareScale;

/**
 * How far a budget reduces each setting:
 * - points 2: the middle and the last;
 * - replicates 1: the intervals are then over the test images only;
 * - 32 images: at a 32 px ResNet-18's last point (4 x 4 positions of 512 channels) 32 images give T's
 *   least-squares start 512 samples, as many as T has inputs; fewer leave it under-determined;
 * - 500 test images: the 95% half-width over them is then about 0.03 (a standard error of about
 *   0.01 at 1,000), still inside the 0.05 margin by which two scores are close.
 */
export const BUDGET_FLOORS = { points: 2, replicates: 1, images: 32, test: 500 } as const;

/** The least steps a budget leaves T: the fast protocol's (120 steps of one batch of 48). */
export const BUDGET_MIN_STITCH_STEPS =
  Math.floor(COMPARE_DEFAULTS.stitch.limit / COMPARE_DEFAULTS.stitch.batchSize) * COMPARE_DEFAULTS.stitch.epochs;

/** Image counts are tried in steps of this (IRIs and T's images), and test images in steps of TEST_STEP. */
const IMAGE_STEP = 16;
const TEST_STEP = 100;

/** What a plan of `compare` runs at: its experiment's replicates and points, its first IRI and stitching tasks' sizes. */
export function scaleOf(plan: Plan): CompareScale {
  const e = plan.experiment;
  const specs = plan.tasks.map((t) => t.spec);
  const iris = specs.find((s): s is IrisTask => s.kind === "iris");
  const stitch = specs.find((s): s is StitchTask => s.kind === "stitch");
  if (!stitch) throw new Error("nothing to scale: the plan has no stitch task");
  const c = stitch.config;
  return {
    replicates: e.replicates,
    points: [...(e.points as string[])],
    iris: iris ? iris.limit : null,
    images: c.limit,
    batch: c.batchSize,
    epochs: c.epochs,
    test: c.testLimit,
  };
}

/** What the budget may not go past: the split sizes where a setting is null (all), and the settings the user gave. */
export interface BudgetBounds {
  /** Training images the tasks can read (the probe's trainCount). */
  trainCount: number;
  /** Test images where a plan scores on all (experiments/estimate.ts ALL_TEST_IMAGES). */
  testCount: number;
  /** Settings given as flags: never reduced. */
  fixed: ReadonlySet<ScaleKey>;
}

export interface BudgetFit {
  scale: CompareScale;
  seconds: number;
  fits: boolean;
}

/** Relative depths of k points spread to the last: 1/k, 2/k, ..., 1 (k = 2: the middle and the last). */
const spread = (k: number) => Array.from({ length: k }, (_, i) => (i + 1) / k);

/** Counts below `top` in steps of `step`, largest first, down to `floor` (included). */
function below(top: number, floor: number, step: number): number[] {
  const out: number[] = [];
  for (let n = Math.floor((top - 1) / step) * step; n > floor; n -= step) out.push(n);
  return top > floor ? [...out, floor] : [];
}

/**
 * IRIs per set and T's images at most n each (those not fixed; never below a batch given as a
 * flag), T's batch at most the fewer of the two (an invariance-aware T trains on the IRIs, a
 * standard one on the images: each needs one full batch), and its epochs raised so that it still
 * takes BUDGET_MIN_STITCH_STEPS steps (those not fixed).
 */
function shrinkImages(s: CompareScale, n: number, b: BudgetBounds): CompareScale {
  const fixed = (k: ScaleKey) => b.fixed.has(k);
  const m = fixed("batch") ? Math.max(n, s.batch) : n;
  const iris = fixed("iris") ? s.iris : Math.min(s.iris ?? b.trainCount, m);
  const images = fixed("images") ? s.images : Math.min(s.images ?? b.trainCount, m);
  const seen = Math.min(images ?? b.trainCount, iris ?? b.trainCount);
  const batch = fixed("batch") ? s.batch : Math.min(s.batch, seen);
  const perEpoch = Math.max(1, Math.floor(seen / batch));
  const epochs = fixed("epochs") ? s.epochs : Math.max(s.epochs, Math.ceil(BUDGET_MIN_STITCH_STEPS / perEpoch));
  return { ...s, iris, images, batch, epochs };
}

/** Each reduction stage's candidates from the scale it starts at, largest first (BUDGET_FLOORS's order). */
const STAGES: ((s: CompareScale, b: BudgetBounds) => CompareScale[])[] = [
  (s, b) => {
    if (b.fixed.has("points")) return [];
    const out: CompareScale[] = [];
    for (let k = s.points.length - 1; k >= BUDGET_FLOORS.points; k--) {
      const points = pointsAtDepths(s.points, spread(k));
      if (points.length < (out.at(-1)?.points ?? s.points).length) out.push({ ...s, points });
    }
    return out;
  },
  (s, b) =>
    b.fixed.has("replicates")
      ? []
      : below(s.replicates, BUDGET_FLOORS.replicates, 1).map((replicates) => ({ ...s, replicates })),
  (s, b) => {
    if (b.fixed.has("iris") && b.fixed.has("images")) return [];
    const top = Math.max(
      b.fixed.has("iris") ? 0 : (s.iris ?? b.trainCount),
      b.fixed.has("images") ? 0 : (s.images ?? b.trainCount),
    );
    return below(top, BUDGET_FLOORS.images, IMAGE_STEP).map((n) => shrinkImages(s, n, b));
  },
  (s, b) =>
    b.fixed.has("test")
      ? []
      : below(s.test ?? b.testCount, BUDGET_FLOORS.test, TEST_STEP).map((test) => ({ ...s, test })),
];

/**
 * The largest settings from `start` whose cost is within `budget` seconds, reducing stage by
 * stage (the header's order): within a stage, the largest candidate that fits (a binary search:
 * the cost falls along a stage's candidates); a stage that cannot fit ends at its floor and the
 * next one starts there. Not fitting at all: the smallest settings, with their cost.
 */
export function fitBudget(
  start: CompareScale,
  budget: number,
  cost: (s: CompareScale) => number,
  bounds: BudgetBounds,
): BudgetFit {
  let scale = start;
  let seconds = cost(start);
  if (seconds <= budget) return { scale, seconds, fits: true };
  for (const stage of STAGES) {
    const candidates = stage(scale, bounds);
    if (!candidates.length) continue;
    // The first candidate that fits: lo..hi brackets it (hi = length: none fits).
    const costs = new Map<number, number>();
    const at = (i: number) => costs.get(i) ?? (costs.set(i, cost(candidates[i])).get(i) as number);
    let [lo, hi] = [0, candidates.length];
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (at(mid) <= budget) hi = mid;
      else lo = mid + 1;
    }
    if (lo < candidates.length) return { scale: candidates[lo], seconds: at(lo), fits: true };
    scale = candidates[candidates.length - 1];
    seconds = at(candidates.length - 1);
  }
  return { scale, seconds, fits: false };
}

const count = (n: number | null, unit = "") => (n === null ? "all" : `${n}${unit}`);

/** What differs between two scales, in words: "replicates 3 -> 1", "points 9 -> 2 (layer2.1, layer4.1)", ... */
export function reductions(from: CompareScale, to: CompareScale): string[] {
  const out: string[] = [];
  if (to.replicates !== from.replicates) out.push(`replicates ${from.replicates} -> ${to.replicates}`);
  if (to.points.length !== from.points.length)
    out.push(`points ${from.points.length} -> ${to.points.length} (${to.points.join(", ")})`);
  const iris = to.iris !== from.iris;
  const images = to.images !== from.images;
  if (iris && images && to.iris === to.images && from.iris === from.images)
    out.push(`IRIs and T's images ${count(from.iris)} -> ${to.iris} per set`);
  else {
    if (iris) out.push(`IRIs ${count(from.iris)} -> ${count(to.iris)} per set`);
    if (images) out.push(`T's images ${count(from.images)} -> ${count(to.images)}`);
  }
  const t: string[] = [];
  if (to.batch !== from.batch) t.push(`batch ${from.batch} -> ${to.batch}`);
  if (to.epochs !== from.epochs) t.push(`epochs ${from.epochs} -> ${to.epochs}`);
  if (t.length) out.push(`T's ${t.join(", ")} (at least ${BUDGET_MIN_STITCH_STEPS} steps)`);
  if (to.test !== from.test) out.push(`test images ${count(from.test)} -> ${count(to.test)}`);
  return out;
}

/** The line a fitted budget prints: "budget 30m: replicates 3 -> 1, ...; estimate 27 min 3 s". */
export function budgetLine(budget: string, start: CompareScale, fit: BudgetFit): string {
  const cut = reductions(start, fit.scale);
  return `budget ${budget}: ${cut.length ? cut.join(", ") : "nothing reduced"}; estimate ${formatDuration(fit.seconds)}`;
}

/** A scale in words: "1 replicate, 2 points, 32 IRIs per set, T 120 epochs of 32 images (batch 32), 500 test images". */
export function scaleWords(s: CompareScale): string {
  return (
    `${s.replicates} replicate${s.replicates === 1 ? "" : "s"}, ${s.points.length} point${s.points.length === 1 ? "" : "s"}, ` +
    `${count(s.iris)} IRIs per set, T ${s.epochs} epochs of ${count(s.images)} images (batch ${s.batch}), ${count(s.test)} test images`
  );
}

/** The flag that gives each setting (a setting given is never reduced). */
export const SCALE_FLAGS: Record<ScaleKey, string> = {
  replicates: "--replicates",
  points: "--points",
  iris: "--iris-limit",
  images: "--stitch-limit",
  batch: "--batch-size",
  epochs: "--epochs",
  test: "--test-limit",
};

/** The refusal when even the smallest settings do not fit: what they are and their estimate. */
export function budgetRefusal(budget: string, fit: BudgetFit, fixed: ReadonlySet<ScaleKey>): string {
  const given = [...new Set([...fixed].map((k) => SCALE_FLAGS[k]))];
  return (
    `--budget ${budget}: even the smallest settings it may pick (${scaleWords(fit.scale)}` +
    `${given.length ? `; ${given.join(", ")} as given` : ""}) are estimated at ${formatDuration(fit.seconds)} on this machine. ` +
    `Give a larger budget${given.length ? ` or fewer of ${given.join(", ")}` : ""}, or run on a GPU (--device cuda)`
  );
}

/** A plan longer than this on the CPU says how to cut it (longPlanAdvice). */
export const LONG_PLAN_S = 3600;

/**
 * For a plan estimated over an hour on the CPU: how to cut it (--budget, or the flags that bring
 * each setting down to the fast protocol's size) and that a GPU runs it as planned. Empty otherwise.
 */
export function longPlanAdvice(seconds: number, device: string, s: CompareScale): string[] {
  if (!(seconds > LONG_PLAN_S) || device !== "cpu") return [];
  const f = COMPARE_DEFAULTS;
  const over = (n: number | null, fast: number) => n === null || n > fast;
  const flags = [
    ...(s.replicates > f.replicates ? [`--replicates ${f.replicates}`] : []),
    ...(s.points.length > f.depths.length ? [`--points ${pointsAtDepths(s.points, f.depths).join(",")}`] : []),
    ...(over(s.iris, f.iris.limit) && over(s.images, f.stitch.limit) && f.iris.limit === f.stitch.limit
      ? [`--limit ${f.iris.limit}`]
      : [
          ...(over(s.iris, f.iris.limit) ? [`--iris-limit ${f.iris.limit}`] : []),
          ...(over(s.images, f.stitch.limit) ? [`--stitch-limit ${f.stitch.limit}`] : []),
        ]),
    ...(over(s.images, f.stitch.limit) && s.batch > f.stitch.batchSize
      ? [`--batch-size ${f.stitch.batchSize} --epochs ${f.stitch.epochs}`]
      : []),
    ...(over(s.test, f.testLimit) ? [`--test-limit ${f.testLimit}`] : []),
  ];
  return [
    `too long   ${formatDuration(seconds)} is over an hour on the CPU. To cut it: --budget 45m picks the largest settings that fit ` +
      "(fewer points first, then replicates, then IRIs and T's images, then test images)" +
      (flags.length ? `, or give the fast protocol's sizes yourself: ${flags.join(" ")}` : "") +
      ". A GPU (--device cuda) runs it as planned.",
  ];
}

/**
 * A duration as a flag gives it: a number and a unit (s, m or min, h), or several (1h30m); in
 * seconds. Anything else, or zero, is an error that shows the forms.
 */
export function parseDuration(text: string): number {
  const t = text.trim().toLowerCase();
  const part = /(\d+(?:\.\d+)?)\s*(h|min|m|s)\s*/y;
  const unit: Record<string, number> = { h: 3600, min: 60, m: 60, s: 1 };
  let seconds = 0;
  let at = 0;
  while (at < t.length) {
    part.lastIndex = at;
    const m = part.exec(t);
    if (!m) break;
    seconds += Number(m[1]) * unit[m[2]];
    at = part.lastIndex;
  }
  if (!t || at < t.length || !(seconds > 0))
    throw new Error(`not a duration: '${text}' (give a number and a unit: 90s, 30m, 2h or 1h30m)`);
  return seconds;
}
