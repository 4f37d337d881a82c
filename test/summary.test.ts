// Replicates and intervals (issue 12): the Student-t interval against closed forms, the plan's
// replicate seeds, summary.csv, the reading's wording on made-up results ("apart" only where the
// intervals separate, "not told apart" otherwise) and the sanity warnings.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { planExperiment, REPLICATE_SEED_STRIDE, type TrainTask } from "../experiments/plan.js";
import { settingsLines } from "../experiments/plan-words.js";
import { parseExperiment } from "../experiments/spec.js";
import { type ModelRow, rowKey, type StitchRow, summarize } from "../findings/index.js";
import {
  agreementTable,
  contrast,
  curveSummaries,
  IRI_VERDICT_MAX_RESIDUAL,
  reading,
  relianceLine,
  relianceWarnings,
  T_SETTLED_MAX_FALL,
  verdictLines,
  warningLines,
  warnings,
} from "../findings/reading.js";
import { compareIntervals, interval, tQuantile975 } from "../metrics/interval.js";
import { summaryCsv } from "../report/index.js";
import { stitchRow } from "./helpers/rows.js";

const tmp = mkdtempSync(join(tmpdir(), "stitchlab-summary-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

test("Student t quantiles: closed forms for 1 and 2 degrees of freedom, the normal limit, monotone", () => {
  // df 1 (Cauchy): tan(pi (p - 1/2)); df 2: (2p - 1) / sqrt(2 p (1 - p)).
  assert.ok(Math.abs(tQuantile975(1) - Math.tan(Math.PI * 0.475)) < 1e-3);
  assert.ok(Math.abs(tQuantile975(2) - 0.95 / Math.sqrt(2 * 0.975 * 0.025)) < 1e-3);
  assert.ok(Math.abs(tQuantile975(100000) - 1.959964) < 1e-4);
  // The expansion beyond the table joins it smoothly (t_{0.975,40} = 2.0211, t_{0.975,120} = 1.9799).
  assert.ok(Math.abs(tQuantile975(40) - 2.0211) < 2e-4);
  assert.ok(Math.abs(tQuantile975(120) - 1.9799) < 2e-4);
  for (let df = 1; df < 200; df++) assert.ok(tQuantile975(df + 1) < tQuantile975(df), `monotone at ${df}`);
  assert.throws(() => tQuantile975(0), /positive integer/);
});

test("interval: mean, sample std and t half-width by hand; NaN left out and counted; one value has no interval", () => {
  const i = interval([0.5, 0.7, 0.9]);
  assert.equal(i.n, 3);
  assert.ok(Math.abs(i.mean - 0.7) < 1e-12);
  assert.ok(Math.abs(i.std - 0.2) < 1e-12);
  assert.ok(Math.abs(i.halfWidth - (4.3027 * 0.2) / Math.sqrt(3)) < 1e-4);
  const withNan = interval([0.5, Number.NaN, 0.7, 0.9]);
  assert.equal(withNan.dropped, 1);
  assert.equal(withNan.mean, i.mean);
  const one = interval([0.4]);
  assert.equal(one.mean, 0.4);
  assert.ok(Number.isNaN(one.halfWidth));
  assert.equal(compareIntervals(interval([0.9, 0.91, 0.92]), interval([0.5, 0.52, 0.51])), "higher");
  assert.equal(compareIntervals(interval([0.5, 0.9, 0.7]), interval([0.6, 0.65, 0.62])), "overlap");
  assert.equal(compareIntervals(one, interval([0.1, 0.2])), "unknown");
});

const EXP = `
name: reps
dataset: { name: fashion-mnist, limit: 300, testLimit: 100 }
models:
  clean-s0: { arch: resnet18, width: 0.0625, seed: 0, epochs: 1 }
  clean-s1: { arch: resnet18, width: 0.0625, seed: 1, epochs: 1 }
  pixel-s1: { arch: resnet18, width: 0.0625, seed: 1, epochs: 1, shortcut: pixel }
pairs:
  - { front: clean-s0, back: clean-s0, relation: identical }
  - { front: clean-s1, back: clean-s0, relation: cross-seed }
  - { front: pixel-s1, back: clean-s0, relation: cross-bias, shortcut: pixel }
points: [layer1.0]
objectives: [slm]
modes: [standard, iris]
replicates: 3
iris: { limit: 64, steps: 3, batchSize: 32 }
stitch: { limit: 64, epochs: 1, batchSize: 32 }
`;

test("replicates: each trains its own fronts (seed + 1000 r), shares the back, and has its own IRI and stitching seeds", () => {
  const plan = planExperiment(parseExperiment(EXP, "reps.yaml"), join(tmp, "reps.yaml"));
  const trains = plan.tasks.filter((t) => t.kind === "train").map((t) => (t.spec as TrainTask).config);
  const seedsOf = (shortcut: string | null) =>
    trains
      .filter((c) => c.shortcut === shortcut)
      .map((c) => c.seed)
      .sort((a, b) => a - b);
  // clean: s0 (the shared back, also the identical pair's front), s1 in three replicates.
  assert.deepEqual(seedsOf(null), [0, 1, 1 + REPLICATE_SEED_STRIDE, 1 + 2 * REPLICATE_SEED_STRIDE]);
  assert.deepEqual(seedsOf("pixel"), [1, 1 + REPLICATE_SEED_STRIDE, 1 + 2 * REPLICATE_SEED_STRIDE]);
  const stitches = plan.stitches;
  assert.equal(stitches.length, 3 * 3 * 2, "3 pairs x 2 modes x 3 replicates");
  assert.deepEqual([...new Set(stitches.map((s) => s.replicate))], [0, 1, 2]);
  // The identical pair's replicates: one model, three IRI sets (their own seeds), three stitch tasks.
  const identical = stitches.filter((s) => s.relation === "identical");
  const irisKeys = new Set(identical.filter((s) => s.mode === "iris").map((s) => s.irisKey));
  assert.equal(irisKeys.size, 3);
  assert.equal(new Set(identical.map((s) => s.key)).size, 6);
  const stitchSeeds = plan.tasks
    .filter((t) => t.kind === "stitch")
    .map((t) => (t.spec as { config: { seed: number } }).config.seed);
  assert.deepEqual(
    [...new Set(stitchSeeds)].sort((a, b) => a - b),
    [0, REPLICATE_SEED_STRIDE, 2 * REPLICATE_SEED_STRIDE],
  );
  // replicateBack: the back is retrained per replicate too.
  const withBack = planExperiment(parseExperiment(`${EXP}replicateBack: true\n`, "reps.yaml"), join(tmp, "reps.yaml"));
  const backSeeds = withBack.tasks
    .filter((t) => t.kind === "train")
    .map((t) => (t.spec as TrainTask).config)
    .filter((c) => c.shortcut === null && c.seed % REPLICATE_SEED_STRIDE === 0)
    .map((c) => c.seed);
  assert.deepEqual(
    backSeeds.sort((a, b) => a - b),
    [0, REPLICATE_SEED_STRIDE, 2 * REPLICATE_SEED_STRIDE],
  );
  // One replicate plans exactly what the file without the key plans.
  const one = planExperiment(parseExperiment(EXP.replace("replicates: 3", ""), "r.yaml"), join(tmp, "r.yaml"));
  const first = plan.tasks.filter((t) => !t.label.includes(" rep ")).map((t) => t.key);
  assert.deepEqual(one.tasks.map((t) => t.key).sort(), first.sort());
  // A pair's own replicates: the identical control once, the others three times.
  const control = planExperiment(
    parseExperiment(EXP.replace("relation: identical }", "relation: identical, replicates: 1 }"), "reps.yaml"),
    join(tmp, "reps.yaml"),
  );
  const byPair = (p: typeof control, relation: string) => [
    ...new Set(p.stitches.filter((x) => x.relation === relation).map((x) => x.replicate)),
  ];
  assert.deepEqual(byPair(control, "identical"), [0]);
  assert.deepEqual(byPair(control, "cross-seed"), [0, 1, 2]);
  assert.equal(
    control.tasks.filter((t) => t.kind === "iris").length,
    plan.tasks.filter((t) => t.kind === "iris").length - 2,
  );
});

/** A made-up row. */
function row(over: Partial<StitchRow>): StitchRow {
  return stitchRow({
    front: "f",
    back: "b",
    point: "layer1.0",
    pointIndex: 1,
    hard_agreement: 0.9,
    agreement_prob: 0.9,
    iri_residual: 0.05,
    epochs: 30,
    train_steps: 300,
    ...over,
  });
}

/** Rows of two pairs at two points over replicates with the given agreements. */
function rows(seed: number[][], bias: number[][]): StitchRow[] {
  const points = ["layer2.1", "layer4.1"];
  const out: StitchRow[] = [];
  for (const [pair, front, values, data] of [
    ["cross-seed", "clean-s1", seed, "clean"],
    ["cross-bias", "pixel-s1", bias, "pixel"],
  ] as const)
    for (const [replicate, perPoint] of values.entries())
      for (const [i, v] of perPoint.entries())
        out.push(
          row({
            pair,
            front,
            back: "clean-s0",
            point: points[i],
            pointIndex: i + 3,
            agreement_prob: v,
            replicate,
            test_data: data,
          }),
        );
  return out;
}

test("summary.csv: one row per group with n, mean, std and the t interval; the table prints mean ± half-width", () => {
  const rs = rows(
    [
      [0.8, 0.6],
      [0.82, 0.62],
      [0.84, 0.64],
    ],
    [
      [0.3, 0.2],
      [0.32, 0.22],
      [0.34, 0.24],
    ],
  );
  const summary = summarize(rs);
  assert.equal(summary.length, 4);
  const s = summary.find((x) => x.pair === "cross-seed" && x.point === "layer2.1")!;
  assert.equal(s.n, 3);
  assert.ok(Math.abs(s.scores.agreement_prob.mean - 0.82) < 1e-12);
  assert.ok(Math.abs(s.scores.agreement_prob.std - 0.02) < 1e-12);
  const csv = summaryCsv(summary).trim().split("\n");
  const head = csv[0].split(",");
  assert.deepEqual(head.slice(0, 8), ["pair", "front", "back", "point", "objective", "mode", "test_data", "n"]);
  const line = csv.find((l) => l.startsWith("cross-seed,clean-s1,clean-s0,layer2.1"))!.split(",");
  const col = (name: string) => Number(line[head.indexOf(name)]);
  assert.equal(col("n"), 3);
  assert.ok(Math.abs(col("agreement_prob_lo") - (0.82 - (4.3027 * 0.02) / Math.sqrt(3))) < 1e-4);
  assert.equal(line[head.indexOf("excess_agreement_mean")], "", "no excess: empty, not 0");
  assert.match(agreementTable(rs), /0\.820 ± 0\.050/);
  assert.match(agreementTable(rs), /cross-bias \[pixel\]/);
  // rAuA per replicate (mean over the two points), then over replicates.
  const curve = curveSummaries(rs).find((c) => c.pair === "cross-seed")!;
  assert.ok(Math.abs(curve.rAuA.mean - 0.72) < 1e-12);
  assert.equal(curve.robustRAuA, null, "no robust scores: no robust rAuA");
  // With robust agreement on every run: the same mean over points per replicate, then over replicates.
  const robust = rs.map((r) => ({ ...r, robust_agreement_prob: r.agreement_prob / 2 }));
  const rc = curveSummaries(robust).find((c) => c.pair === "cross-seed")!;
  assert.ok(Math.abs((rc.robustRAuA?.mean ?? Number.NaN) - 0.36) < 1e-12, JSON.stringify(rc.robustRAuA));
  assert.ok(
    reading(robust).some((l) => /^rAuA on adversarial test images .*cross-seed slm iris 0\.36/.test(l)),
    reading(robust).join("\n"),
  );
});

test("the reading's control line: passed, or FAILED with the likely cause where only standard runs fall short", () => {
  const control = (std: number, inv: number) => [
    stitchRow({ pair: "identical", front: "b", back: "b", mode: "standard", agreement_prob: std }),
    stitchRow({ pair: "identical", front: "b", back: "b", mode: "iris", agreement_prob: inv }),
  ];
  const line = (rs: StitchRow[], augmented = true) =>
    reading(rs, { recipe: { augmented, bnMode: "adapt" } }).find((l) => l.startsWith("Control")) ?? "";
  assert.match(line(control(0.98, 0.9995)), /^Control: the identical pair agrees at 0\.980 or more everywhere/);
  assert.match(
    line(control(0.926, 0.9995)),
    /^Control FAILED: the identical pair drops to 0\.926 \(below 0\.95\).*invariance-aware 0\.999 or more.*--no-stitch-augment/,
  );
  assert.match(line(control(0.926, 0.9995), false), /stitch\.bnMode: \{standard: eval\}/);
  assert.doesNotMatch(line(control(0.9, 0.9)), /Only standard runs/);
});

test("the run's verdict beside a failed identical control cannot be read, and says why; beside a passing one it reads as before", () => {
  const pairs = rows(
    [
      [0.8, 0.6],
      [0.81, 0.61],
      [0.79, 0.59],
    ],
    [
      [0.3, 0.2],
      [0.31, 0.21],
      [0.29, 0.19],
    ],
  );
  const control = (std: number) => [
    row({
      pair: "identical",
      front: "clean-s0",
      back: "clean-s0",
      point: "layer2.1",
      pointIndex: 3,
      mode: "standard",
      agreement_prob: std,
    }),
    row({
      pair: "identical",
      front: "clean-s0",
      back: "clean-s0",
      point: "layer2.1",
      pointIndex: 3,
      mode: "iris",
      agreement_prob: 0.999,
    }),
  ];
  const recipe = { augmented: true, bnMode: "adapt" };
  const failed = verdictLines([...pairs, ...control(0.62)], undefined, recipe);
  assert.equal(failed.length, 1);
  assert.match(
    failed[0] as string,
    /^Verdict, cross-bias vs cross-seed \(invariance-aware SLM, 3 replicates\): cannot be read: the identical control drops to 0\.620 \(below 0\.95\)\. Only standard runs fall short.*--no-stitch-augment/,
  );
  assert.doesNotMatch(failed[0] as string, /told apart/);
  assert.match(
    verdictLines([...pairs, ...control(0.98)], undefined, recipe)[0] as string,
    /: told apart: cross-bias is less similar/,
  );
});

test("the reading: 'apart' only where the 95% intervals separate, otherwise 'not told apart with N replicates'", () => {
  const apart = reading(
    rows(
      [
        [0.8, 0.6],
        [0.82, 0.62],
        [0.84, 0.64],
      ],
      [
        [0.3, 0.2],
        [0.32, 0.22],
        [0.34, 0.24],
      ],
    ),
  ).join("\n");
  assert.match(
    apart,
    /cross-seed agrees more than cross-bias, told apart at every point by the seed-level test \(.*difference \+/,
  );
  // Means differ (0.60 vs 0.50) but one replicate each way swings: the intervals overlap.
  const noisy = reading(
    rows(
      [
        [0.4, 0.6],
        [0.8, 0.3],
        [0.6, 0.9],
      ],
      [
        [0.5, 0.5],
        [0.3, 0.6],
        [0.7, 0.4],
      ],
    ),
  ).join("\n");
  assert.match(noisy, /not told apart with 3 replicates/);
  assert.doesNotMatch(noisy, /agrees more than/);
  // One replicate: no interval, so no difference is called however large.
  const single = reading(rows([[0.9, 0.9]], [[0.1, 0.1]])).join("\n");
  assert.match(single, /not told apart with 1 replicate/);
  assert.match(single, /one replicate: no interval/);
});

test("warnings: a back or front near chance, loose IRIs, too few steps, T still learning, non-finite scores", () => {
  const w = warnings([
    row({ back_accuracy: 0.11 }),
    row({ front: "g", front_accuracy: 0.12 }),
    row({ iri_residual: 0.4 }),
    row({ train_steps: 20 }),
    row({ t_loss_fall: 0.05 }),
    row({ agreement_prob: Number.NaN }),
  ]).map((x) => `${x.where}: ${x.what}`);
  assert.ok(
    w.some((x) =>
      /T still learning when its rate fell: its loss fell 5\.0% over the last quarter before \(more than 3%\)/.test(x),
    ),
  );
  // At the threshold, or not measured (a phase too short, a row made before it was recorded): no warning.
  for (const t_loss_fall of [T_SETTLED_MAX_FALL, null, undefined])
    assert.deepEqual(warnings([row({ t_loss_fall })]), [], `${t_loss_fall}`);
  assert.ok(
    w.some((x) => /^b: back model near chance/.test(x)),
    w.join("\n"),
  );
  assert.ok(w.some((x) => /^g: front model near chance/.test(x)));
  assert.ok(w.some((x) => /loose IRIs: mean residual 0\.400/.test(x)));
  assert.ok(w.some((x) => /only 20 optimiser steps/.test(x)));
  assert.ok(w.some((x) => /agreement_prob is not finite/.test(x)));
  assert.deepEqual(warnings([row({})]), [], "a healthy row warns of nothing");
  // Each warning names the rows it affects, for the report's table.
  const loose = warnings([row({ iri_residual: 0.4 }), row({ point: "layer4.1", iri_residual: 0.05 })]);
  assert.equal(loose.length, 1);
  assert.equal(loose[0].tag, "loose IRIs");
  assert.deepEqual(loose[0].rows, [rowKey(row({}))]);
  // NaN scores never enter a mean.
  const s = summarize([row({ agreement_prob: Number.NaN }), row({ replicate: 1, agreement_prob: 0.5 })]);
  assert.equal(s[0].scores.agreement_prob.mean, 0.5);
  assert.equal(s[0].scores.agreement_prob.dropped, 1);
});

test("stitching seeds within a replicate are averaged, never counted as replicates; seeds >= 1000 are refused", () => {
  // Two seeds in each of two replicates: n is 2, and each replicate's value is its seeds' mean.
  const s = summarize([
    row({ replicate: 0, seed: 0, agreement_prob: 0.5 }),
    row({ replicate: 0, seed: 1, agreement_prob: 0.7 }),
    row({ replicate: 1, seed: 0, agreement_prob: 0.8 }),
    row({ replicate: 1, seed: 1, agreement_prob: 0.8 }),
  ]);
  assert.equal(s[0].n, 2);
  assert.equal(s[0].scores.agreement_prob.n, 2);
  assert.ok(Math.abs(s[0].scores.agreement_prob.mean - 0.7) < 1e-12);
  assert.ok(Math.abs(s[0].scores.agreement_prob.std - Math.SQRT2 * 0.1) < 1e-12);
  assert.throws(
    () => planExperiment(parseExperiment(`${EXP}seeds: [0, 1000]\n`, "reps.yaml"), join(tmp, "reps.yaml")),
    /seeds\[1\]: seed 1000 must be below 1000 with replicates/,
  );
});

test("the settings line describes only the modes run, and adversarial stitching when asked for", () => {
  const base = [
    "name: s",
    "dataset: { name: fashion-mnist }",
    "models:",
    "  a: { arch: resnet18, epochs: 1 }",
    "pairs:",
    "  - { front: a, back: a, relation: identical }",
    "points: [layer1.0]",
  ];
  const settingsOf = (lines: string[]) =>
    settingsLines(planExperiment(parseExperiment(lines.join("\n"), "s.yaml"), join(tmp, "s.yaml"))).join(" ");
  const both = settingsOf(base);
  assert.match(both, /IRIs: /);
  assert.match(both, /batch norm adapt \(standard\) and eval \(invariance-aware\)/);
  const standard = settingsOf([
    ...base,
    "modes: [standard]",
    "stitch: { adversarial: { eps: 0.0313725, step: 0.0078431, steps: 10, fraction: 1 } }",
  ]);
  assert.doesNotMatch(standard, /IRIs|invariance-aware/);
  // The images' side where the file sets it, and the markers' size in pixels at that side.
  assert.doesNotMatch(both, / px/);
  const small = settingsOf([
    "name: s",
    "dataset: { name: fashion-mnist, imageSize: 28, markerScale: 2 }",
    ...base.slice(2),
  ]);
  assert.match(small, /^Settings: fashion-mnist at 28 px;/);
  assert.match(small, /Shortcut markers at 2x the protocol's cell size \(8 px squares at 28 px\)\./);
  assert.match(
    standard,
    /batch norm adapt \(standard\)\. Adversarial stitching \(standard runs\): .*10 steps, fraction 1/,
  );
});

test("IRIs too loose to judge: a point is judged on its tight replicates, or withheld, and a withheld point is neither apart nor not apart", () => {
  const apart = rows(
    [
      [0.8, 0.6],
      [0.82, 0.62],
      [0.84, 0.64],
    ],
    [
      [0.3, 0.2],
      [0.32, 0.22],
      [0.34, 0.24],
    ],
  );
  const c = contrast(apart, "cross-seed", "cross-bias", "slm");
  assert.ok(c?.apart, "tight IRIs: apart");
  const limit = IRI_VERDICT_MAX_RESIDUAL;
  const loosen = (pair: string, point: string, replicates: number[]) =>
    apart.map((r) =>
      r.pair === pair && r.point === point && replicates.includes(r.replicate)
        ? { ...r, iri_residual: limit + 0.016 }
        : r,
    );
  // One cross-bias IRI set of three at layer4.1 too loose: the point is judged on the other two,
  // and the headline names the set left out.
  const one = loosen("cross-bias", "layer4.1", [1]);
  const o = contrast(one, "cross-seed", "cross-bias", "slm");
  assert.equal(o?.apart, true);
  assert.deepEqual(
    o?.points.map((p) => [p.point, p.loose, p.apart, p.lower.n]),
    [
      ["layer2.1", false, true, 3],
      ["layer4.1", false, true, 2],
    ],
  );
  const oneLine = verdictLines(one)[0];
  assert.match(oneLine, /: told apart: cross-bias is less similar/);
  assert.ok(
    oneLine.includes(
      `layer4.1 judged without the too-loose IRI sets of pixel-s1 replicate 1 (residual ${(limit + 0.016).toFixed(3)})`,
    ),
    oneLine,
  );
  // Two of three loose at layer4.1: withheld (what is left would be a selection). The verdict is
  // on layer2.1 alone, and the withheld point is named with its sets, not counted as not apart.
  const most = loosen("cross-bias", "layer4.1", [0, 2]);
  const m = contrast(most, "cross-seed", "cross-bias", "slm");
  assert.deepEqual(
    m?.points.map((p) => [p.point, p.loose, p.apart]),
    [
      ["layer2.1", false, true],
      ["layer4.1", true, false],
    ],
  );
  assert.equal(m?.apart, true, "apart at every point judged");
  const line = verdictLines(most)[0];
  assert.match(
    line,
    /: told apart at layer2\.1: cross-bias is less similar .*\(layer2\.1 .* vs .*, layer4\.1 withheld\)/,
  );
  assert.match(
    line,
    /layer4\.1 withheld, its IRIs too loose to judge: pixel-s1 replicate 0 \(residual 0\.316\), pixel-s1 replicate 2/,
  );
  assert.doesNotMatch(line, /not told apart/);
  const text = reading(most).join("\n");
  assert.ok(
    text.includes(
      `layer4.1 withheld (IRIs too loose to judge: residual up to ${(limit + 0.016).toFixed(2)} > ${limit})`,
    ),
    text,
  );
  assert.match(text, /told apart at every point judged by the seed-level test/);
  // A withheld point beside one that is judged and not apart: "not told apart" at the judged one only.
  const closeAndLoose = apart.map((r) =>
    r.point === "layer2.1" && r.pair === "cross-bias"
      ? { ...r, agreement_prob: r.agreement_prob + 0.5 }
      : r.point === "layer4.1" && r.pair === "cross-seed"
        ? { ...r, iri_residual: limit + 0.2 }
        : r,
  );
  assert.match(verdictLines(closeAndLoose)[0], /: not told apart at layer2\.1 \(.*layer4\.1 withheld\)/);
  // Every point withheld: no verdict, whatever the intervals say.
  const all = apart.map((r) => ({ ...r, iri_residual: limit + 0.1 }));
  assert.equal(contrast(all, "cross-seed", "cross-bias", "slm")?.apart, false);
  assert.match(verdictLines(all)[0], /: no verdict: the IRIs are too loose to judge at every point \(/);
});

test("the reading: repeated warnings collapse into one line per kind; shortcut fronts' reliance is shown and a front that does not rely on its marker is named", () => {
  const ws = warnings([
    row({ point: "layer2.1", iri_residual: IRI_VERDICT_MAX_RESIDUAL + 0.02 }),
    row({ point: "layer4.1", iri_residual: IRI_VERDICT_MAX_RESIDUAL + 0.1 }),
    row({ point: "layer4.1", replicate: 1, iri_residual: IRI_VERDICT_MAX_RESIDUAL + 0.05 }),
    row({ train_steps: 20 }),
  ]);
  const lines = warningLines(ws);
  assert.equal(lines.length, 2, lines.join("\n"));
  const range = `(${(IRI_VERDICT_MAX_RESIDUAL + 0.02).toFixed(3)}-${(IRI_VERDICT_MAX_RESIDUAL + 0.1).toFixed(3)})`;
  assert.ok(lines[0].startsWith(`Warning, 3 times: mean IRI residual above ${IRI_VERDICT_MAX_RESIDUAL} `), lines[0]);
  assert.ok(lines[0].endsWith(`${range}: f @ layer2.1; f @ layer4.1; f (replicate 1) @ layer4.1.`), lines[0]);
  assert.match(lines[1], /^Warning: cross-seed slm iris: T trained for only 20 optimiser steps/);
  const model = (name: string, rolled: number): ModelRow => ({
    name,
    arch: "resnet18",
    dataset: "fashion-mnist",
    shortcut: "pixel",
    adversarial: false,
    seed: 1,
    accuracies: { clean: 0.8, marked: 0.98, rolled },
  });
  const models = [model("pixel-s1", 0.1), model("pixel-s1 rep 1", 0.45)];
  assert.match(
    relianceLine(models) ?? "",
    /pixel-s1 0\.80 \/ 0\.98 \/ 0\.10; pixel-s1 rep 1 0\.80 \/ 0\.98 \/ 0\.45\. 1 of 2 rely/,
  );
  const w = relianceWarnings(models);
  assert.deepEqual(
    w.map((x) => x.where),
    ["pixel-s1 rep 1"],
  );
  assert.match(w[0].what, /does not rely on its marker: rolled accuracy 0\.45 > 0\.3/);
  assert.equal(relianceLine([{ ...model("clean", 0), shortcut: null }]), null, "no shortcut fronts, no line");
});

test("the reading opens with the answer: one verdict line per pair against cross-seed, then the rest", () => {
  const apart = rows(
    [
      [0.8, 0.6],
      [0.82, 0.62],
      [0.84, 0.64],
    ],
    [
      [0.3, 0.2],
      [0.32, 0.22],
      [0.34, 0.24],
    ],
  );
  const text = reading(apart, { settings: ["Settings: ..."] });
  assert.match(
    text[0],
    /^Verdict, cross-bias vs cross-seed \(invariance-aware SLM, 3 replicates\): told apart: cross-bias is less similar .* \(layer2\.1 0\.82 ± 0\.05 vs 0\.32 ± 0\.05, layer4\.1 0\.62 ± 0\.05 vs 0\.22 ± 0\.05\)\.$/,
  );
  assert.equal(text[1], "Settings: ...");
  // Standard stitching's range: both ends, or one value where they agree to the digits shown.
  const standard = (pair: string, values: number[]) =>
    values.map((v, replicate) => row({ pair, mode: "standard", agreement_prob: v, replicate, point: "layer2.1" }));
  const withStandard = reading(
    [...apart, ...standard("cross-seed", [0.912, 0.914]), ...standard("cross-bias", [0.7, 0.8])],
    {
      settings: [],
    },
  );
  assert.ok(withStandard.includes("cross-seed: standard stitching agrees at 0.91 (it calls the pair similar)."));
  assert.ok(
    withStandard.some((l) => l.startsWith("cross-bias: standard stitching agrees at 0.75 ")),
    withStandard.join("\n"),
  );
  const close = rows(
    [
      [0.8, 0.6],
      [0.3, 0.2],
      [0.84, 0.64],
    ],
    [
      [0.3, 0.2],
      [0.82, 0.62],
      [0.34, 0.24],
    ],
  );
  assert.match(verdictLines(close)[0], /: not told apart \(/);
  const loose = apart.map((r) => ({ ...r, iri_residual: IRI_VERDICT_MAX_RESIDUAL + 0.1 }));
  assert.match(verdictLines(loose)[0], /: no verdict: the IRIs are too loose to judge at every point \(/);
});

test("an IRI set on which A's own head keeps x's class for under 90% of the x' is warned of; one at 90% or more is not", () => {
  const row = (kept: number | null) => stitchRow({ mode: "iris", iri_residual: 0.2, iri_front_agreement: kept });
  const tagged = (kept: number | null) => warnings([row(kept)]).filter((w) => w.tag === "A tells IRIs apart");
  assert.equal(tagged(0.9).length, 0);
  assert.equal(tagged(null).length, 0, "a set made before it was recorded");
  const [w] = tagged(0.75);
  assert.match(w?.what ?? "", /its own head keeps x's class on 75% of the x' \(less than 90%\)/);
  assert.match(
    warningLines(warnings([row(0.75), { ...row(0.6), replicate: 1 }])).join("\n"),
    /A tells IRIs apart|A's own head keeps x's class on less than 90%/,
  );
});
