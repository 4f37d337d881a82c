// Null fronts (issue 40, experiments/nulls.ts): an experiment's `nulls` become models and pairs
// of their own (the front's recipe at epoch 0; on labels shuffled across images), shared where
// recipes coincide; each real pair is read against them ("beyond chance" only where its lower
// bound clears the highest null's upper bound); and the two training settings they rest on.
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { type Dataset, datasetSize, permuteLabels } from "../data/index.js";
import { withNulls } from "../experiments/nulls.js";
import { type Plan, planExperiment, type TrainTask } from "../experiments/plan.js";
import { irisSummaries } from "../experiments/results.js";
import { parseExperiment } from "../experiments/spec.js";
import { beyondChance, chanceLines } from "../findings/chance.js";
import { type StitchRow, summarize } from "../findings/index.js";
import { reading, warnings } from "../findings/reading.js";
import { loadCheckpoint } from "../models/checkpoint.js";
import { createModel } from "../models/registry.js";
import { greyStem } from "../nn/init.js";
import { reportFigures } from "../report/index.js";
import * as torch from "../torch/index.js";
import { trainConfig } from "../train/config.js";
import { trainModel } from "../train/trainer.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";
import { stitchRow } from "./helpers/rows.js";

const dir = mkdtempSync(join(tmpdir(), "stitchlab-nulls-"));
after(() => rmSync(dir, { recursive: true, force: true }));

const DEMO_LIKE = `
name: nulls
dataset: { name: fashion-mnist, limit: 300, testLimit: 100 }
models:
  clean-s0: { arch: resnet18, width: 0.0625, seed: 0, epochs: 1 }
  clean-s1: { arch: resnet18, width: 0.0625, seed: 1, epochs: 1 }
  pixel-s1: { arch: resnet18, width: 0.0625, seed: 1, epochs: 1, shortcut: pixel }
pairs:
  - { front: clean-s0, back: clean-s0, relation: identical, replicates: 1 }
  - { front: clean-s1, back: clean-s0, relation: cross-seed }
  - { front: pixel-s1, back: clean-s0, relation: cross-bias, shortcut: pixel }
points: [layer2.1]
objectives: [slm]
replicates: 2
nulls: [untrained, permuted]
iris: { limit: 32, steps: 3, batchSize: 32 }
stitch: { limit: 32, epochs: 1, batchSize: 32 }
`;

test("nulls become models and pairs: one model per recipe (the Pixel front's is the clean one's), stitched once per stitching data", () => {
  const exp = parseExperiment(DEMO_LIKE, join(dir, "nulls.yaml"));
  const { experiment, notes } = withNulls(exp);
  assert.deepEqual(notes, []);
  assert.deepEqual(Object.keys(experiment.models), [
    "clean-s0",
    "clean-s1",
    "pixel-s1",
    "clean-s1~untrained",
    "clean-s1~permuted",
  ]);
  const untrained = experiment.models["clean-s1~untrained"] as Record<string, unknown>;
  assert.equal(untrained.epochs, 0);
  assert.equal(untrained.shortcut, null);
  assert.equal(untrained.seed, 1, "the very initialisation clean-s1 was trained from");
  assert.equal((experiment.models["clean-s1~permuted"] as Record<string, unknown>).labels, "permuted");
  assert.deepEqual(
    experiment.pairs.slice(3).map((p) => [p.front, p.back, p.relation, p.shortcut ?? "clean"]),
    [
      ["clean-s1~untrained", "clean-s0", "null:untrained", "clean"],
      ["clean-s1~permuted", "clean-s0", "null:permuted", "clean"],
      ["clean-s1~untrained", "clean-s0", "null:untrained", "pixel"],
      ["clean-s1~permuted", "clean-s0", "null:permuted", "pixel"],
    ],
  );
  assert.equal(withNulls({ ...exp, nulls: { kinds: [] } }).experiment.pairs.length, 3, "none asked, none made");
  assert.equal(withNulls(experiment).experiment, experiment, "expanded once");
  // Two pairs of one front and back with overlapping points: one null pair holding every point,
  // so that no null replicate is counted twice at a shared point.
  const overlapping = withNulls(
    parseExperiment(
      DEMO_LIKE.replace(
        "  - { front: pixel-s1, back: clean-s0, relation: cross-bias, shortcut: pixel }",
        "  - { front: clean-s1, back: clean-s0, relation: cross-seed-deep, points: [layer2.1, layer4.1] }",
      ),
      join(dir, "nulls.yaml"),
    ),
  ).experiment;
  assert.deepEqual(
    overlapping.pairs.slice(3).map((p) => [p.relation, p.points]),
    [
      ["null:untrained", ["layer2.1", "layer4.1"]],
      ["null:permuted", ["layer2.1", "layer4.1"]],
    ],
  );
  const adversarial = parseExperiment(
    DEMO_LIKE.replace("relation: cross-seed }", "relation: cross-seed, adversarial: null }"),
    join(dir, "nulls.yaml"),
  );
  assert.throws(
    () => withNulls(adversarial),
    /pairs\[1\]\.adversarial: nulls are stitched as the experiment's stitch section says/,
  );

  const plan = planExperiment(exp, join(dir, "nulls.yaml"));
  const trains = plan.tasks.filter((t) => t.kind === "train").map((t) => (t.spec as TrainTask).config);
  // clean-s0, then per replicate clean-s1, pixel-s1 and the two nulls (replicate 1 at seed + stride).
  assert.equal(trains.length, 1 + 2 * 4);
  assert.equal(trains.filter((c) => c.epochs === 0).length, 2);
  assert.equal(trains.filter((c) => c.labels === "permuted").length, 2);
  assert.ok(
    trains.every((c) => c.labels === "permuted" || !("labels" in c)),
    "true labels leave the key as it was",
  );

  const loaded = parseExperiment(
    DEMO_LIKE.replace(
      "clean-s1: { arch: resnet18, width: 0.0625, seed: 1, epochs: 1 }",
      "clean-s1: { checkpoint: x.safetensors }",
    ),
    join(dir, "nulls.yaml"),
  );
  assert.deepEqual(withNulls(loaded).notes, [
    "clean-s1: no untrained null, since a model loaded from a file has no recipe to start or retrain it from",
    "clean-s1: no permuted null, since a model loaded from a file has no recipe to start or retrain it from",
  ]);
});

test("nulls as {kinds, modes, replicates}: the null pairs take those, and a pair's own modes plan only those", () => {
  const exp = parseExperiment(
    DEMO_LIKE.replace(
      "nulls: [untrained, permuted]",
      "nulls: { kinds: [untrained], modes: [standard], replicates: 3 }",
    ),
    join(dir, "nulls.yaml"),
  );
  const { experiment } = withNulls(exp);
  const nulls = experiment.pairs.filter((p) => p.relation.startsWith("null:"));
  assert.deepEqual(
    nulls.map((p) => [p.relation, p.modes, p.replicates, p.shortcut ?? "clean"]),
    [
      ["null:untrained", ["standard"], 3, "clean"],
      ["null:untrained", ["standard"], 3, "pixel"],
    ],
  );
  const plan = planExperiment(exp, join(dir, "nulls.yaml"));
  const nullStitches = plan.stitches.filter((s) => s.relation.startsWith("null:"));
  // Two stitching data x three replicates x one point, standard only; no IRI set for a null.
  assert.equal(nullStitches.length, 2 * 3);
  assert.ok(nullStitches.every((s) => s.mode === "standard" && s.irisKey === null));
  assert.equal(plan.tasks.filter((t) => t.kind === "iris" && t.label.includes("~")).length, 0);
  // The real pairs keep both modes.
  assert.deepEqual([...new Set(plan.stitches.filter((s) => s.relation === "cross-seed").map((s) => s.mode))].sort(), [
    "iris",
    "standard",
  ]);
  assert.throws(
    () =>
      parseExperiment(
        DEMO_LIKE.replace("nulls: [untrained, permuted]", "nulls: { kinds: [untrained], modes: [fast] }"),
        join(dir, "n.yaml"),
      ),
    /nulls/,
  );
});

test("nulls of a graded-marker front and of pairs with their own modes: one plain null, the modes' union", () => {
  const exp = parseExperiment(
    DEMO_LIKE.replace(
      "pixel-s1: { arch: resnet18, width: 0.0625, seed: 1, epochs: 1, shortcut: pixel }",
      "pixel-s1: { arch: resnet18, width: 0.0625, seed: 1, epochs: 1, shortcut: pixel, markerAgreement: 0.5 }",
    )
      .replace("relation: cross-seed }", "relation: cross-seed, modes: [standard] }")
      .replace("relation: cross-bias, shortcut: pixel }", "relation: cross-bias, shortcut: pixel, modes: [iris] }")
      .replace(
        "  - { front: clean-s0",
        "  - { front: pixel-s1, back: clean-s0, relation: graded-clean, modes: [iris] }\n  - { front: clean-s0",
      ),
    join(dir, "nulls.yaml"),
  );
  const { experiment } = withNulls(exp);
  // The graded front's null sets its marker aside with its shortcut: one null per kind for all three fronts.
  const nulls = Object.entries(experiment.models).filter(([m]) => m.includes("~"));
  assert.equal(nulls.length, 2);
  for (const [, spec] of nulls) {
    assert.equal((spec as Record<string, unknown>).shortcut, null);
    assert.equal((spec as Record<string, unknown>).markerAgreement, 1);
  }
  // On clean data, the null stands beside a standard-only and an iris-only pair: both modes.
  const clean = experiment.pairs.filter((p) => p.relation === "null:untrained" && p.shortcut === undefined);
  assert.deepEqual(
    clean.map((p) => [...(p.modes ?? [])].sort()),
    [["iris", "standard"]],
  );
  assert.doesNotThrow(() => planExperiment(exp, join(dir, "nulls.yaml")));
});

/** Rows of a pair (or a null) with `values[replicate][point]` at layer2.1 and layer4.1, invariance-aware SLM. */
function rows(pair: string, values: number[][], front = pair, points = ["layer2.1", "layer4.1"]): StitchRow[] {
  return values.flatMap((perPoint, replicate) =>
    perPoint.map((v, i) =>
      stitchRow({
        front,
        pair,
        point: points[i],
        pointIndex: ["layer2.1", "layer4.1"].indexOf(points[i] as string) + 4,
        objective: "slm",
        mode: "iris",
        hard_agreement: v,
        agreement_prob: v,
        replicate,
      }),
    ),
  );
}

test("beyond chance by a one-sided Welch test over seeds against every null, Holm-corrected, and the reading says so", () => {
  const seed = rows("cross-seed", [
    [0.8, 0.5],
    [0.82, 0.45],
    [0.84, 0.55],
  ]);
  const untrained = rows(
    "null:untrained",
    [
      [0.3, 0.3],
      [0.32, 0.35],
      [0.34, 0.4],
    ],
    "clean-s1~untrained",
  );
  const permuted = rows(
    "null:permuted",
    [
      [0.4, 0.45],
      [0.42, 0.5],
      [0.44, 0.55],
    ],
    "clean-s1~permuted",
  );
  const summary = summarize([...seed, ...untrained, ...permuted]);
  const chance = beyondChance(summary);
  assert.deepEqual(
    chance.map((c) => [c.pair, c.point, c.family, c.null.pair, c.beyond, c.nulls.map((n) => n.rejected)]),
    [
      ["cross-seed", "layer2.1", "chance", "null:permuted", true, [true, true]],
      ["cross-seed", "layer4.1", "chance", "null:permuted", false, [false, true]],
    ],
    "the permuted null is the nearest at both points; at layer4.1 the pair lies above the untrained null only",
  );
  // The difference and its interval by hand: 0.40 apart, se sqrt(2 * 0.02^2 / 3), df 4, t_{0.975,4} 2.776.
  const t = chance[0]?.null.test;
  assert.ok(
    t && Math.abs(t.diff - 0.4) < 1e-9 && Math.abs(t.hi - t.diff - 2.7764451 * Math.sqrt((2 * 0.0004) / 3)) < 1e-6,
  );
  const [line, rule] = chanceLines(summary);
  assert.match(
    line as string,
    /^Against chance, cross-seed \(invariance-aware SLM\): beyond chance at layer2\.1, not at layer4\.1 \(layer2\.1 0\.82 ± 0\.05 vs permuted 0\.42 ± 0\.05, difference \+0\.40 \[0\.35, 0\.45\], p < 0\.001; layer4\.1 0\.50 ± 0\.12 vs permuted 0\.50 ± 0\.12, difference \+0\.00 \[-0\.11, 0\.11\], p 0\.500; the nearest null at each point\)\.$/,
  );
  assert.match(
    rule as string,
    /^Rule against the nulls: one-sided Welch t test over replicates \(seeds\), Holm-corrected/,
  );

  // Overlapping 95% intervals (the pair's lower bound 0.526 under the null's upper 0.624) are no
  // evidence of chance: the seed-level test finds the pair above (scipy's ttest_ind, Welch,
  // one-sided: t 3.674, df 4, p 0.01066).
  const mid = rows("cross-seed", [[0.6], [0.65], [0.7]], "clean-s1", ["layer4.1"]);
  const low = rows("null:permuted", [[0.45], [0.5], [0.55]], "clean-s1~permuted", ["layer4.1"]);
  const [midRow] = beyondChance(summarize([...mid, ...low]));
  assert.ok(midRow?.beyond, "above by the test, though the intervals overlap");
  assert.ok(Math.abs((midRow?.null.test?.p ?? 0) - 0.010655820564378351) < 1e-9, String(midRow?.null.test?.p));
  // Against two such nulls Holm asks p <= 0.025 of the smaller p and 0.05 of the larger: still beyond.
  const low2 = rows("null:untrained", [[0.45], [0.5], [0.55]], "clean-s1~untrained", ["layer4.1"]);
  assert.equal(beyondChance(summarize([...mid, ...low, ...low2]))[0]?.beyond, true);
  // The label-only sender is its own family: tested and worded apart from chance.
  const labels = rows("null:noise", [[0.7], [0.72], [0.74]], "clean-s1~noise", ["layer4.1"]);
  const both = beyondChance(summarize([...mid, ...low, ...labels]));
  assert.deepEqual(
    both.map((c) => [c.family, c.beyond]),
    [
      ["chance", true],
      ["labels", false],
    ],
  );
  assert.match(
    chanceLines(summarize([...mid, ...low, ...labels]))[1] as string,
    /^Against the label alone, cross-seed \(invariance-aware SLM\): not above the label alone \(layer4\.1 0\.65 ± 0\.12 vs labels only \(Smith et al\.\) 0\.72 ± 0\.05, difference -0\.07/,
  );
  const text = reading([...seed, ...untrained, ...permuted]).join("\n");
  assert.ok(text.includes(line as string), "the reading carries the line");
  assert.doesNotMatch(text, /Verdict, null:/, "a null is never a pair compared with cross-seed");
  const nearChance = rows("null:untrained", [[0.3, 0.3]], "clean-s1~untrained").map((r) => ({
    ...r,
    front_accuracy: 0.1,
  }));
  assert.deepEqual(
    warnings(nearChance).filter((w) => w.tag === "front near chance"),
    [],
    "a null front is near chance by design: no warning",
  );
  assert.equal(
    warnings(nearChance.map((r) => ({ ...r, pair: "cross-seed" }))).filter((w) => w.tag === "front near chance").length,
    1,
    "a real front near chance is warned of",
  );

  // Clear at both points; and one replicate has no spread over seeds, so it is never tested.
  const far = rows("cross-seed", [
    [0.8, 0.8],
    [0.81, 0.81],
    [0.82, 0.82],
  ]);
  assert.match(chanceLines(summarize([...far, ...untrained]))[0] as string, /: beyond chance \(layer2\.1 /);
  const one = rows("cross-seed", [[0.99, 0.99]]);
  assert.match(
    chanceLines(summarize([...one, ...untrained]))[0] as string,
    /: not beyond chance \(.*untested: cross-seed has 1 replicate/,
  );
  assert.deepEqual(chanceLines(summarize(seed)), [], "no nulls, no line");

  // The report's agreement figure draws the nearest null's interval in the pair's panel.
  const [agreement] = reportFigures([...seed, ...untrained, ...permuted]);
  const spec = agreement?.spec as unknown as {
    data: { values: Record<string, unknown>[] };
    spec: { layer: { mark: { color?: string } }[] };
  };
  const band = spec.data.values.find((v) => String(v.panel).startsWith("cross-seed") && v.point === "layer2.1");
  assert.ok(band && Math.abs((band.null_hi as number) - (0.42 + 0.0497)) < 0.002, JSON.stringify(band));
  assert.ok(
    spec.spec.layer.some((l) => l.mark.color === "#888"),
    "a grey band layer",
  );
  assert.match(agreement?.caption ?? "", /the grey band in a pair's panel is the 95% interval of the highest null/);
});

test("permuteLabels shuffles the labels across images once: the same multiset, most changed, the same for the same seed", () => {
  const make = (): Dataset => ({
    images: torch.zeros([1000, 1, 2, 2], { dtype: "uint8" }),
    labels: torch.tensor(BigInt64Array.from({ length: 1000 }, (_, i) => BigInt(i % 10))),
    classes: Array.from({ length: 10 }, (_, i) => String(i)),
    name: "toy",
  });
  const labels = (d: Dataset) => Array.from(d.labels.toTypedArray() as BigInt64Array, Number);
  const [a, b, c] = [make(), make(), make()];
  const before = labels(a);
  permuteLabels(a, 7);
  permuteLabels(b, 7);
  permuteLabels(c, 8);
  assert.deepEqual([...labels(a)].sort(), [...before].sort());
  const changed = labels(a).filter((v, i) => v !== before[i]).length;
  assert.ok(changed > 800, `${changed} of 1000 changed (chance keeps about 100)`);
  assert.deepEqual(labels(a), labels(b));
  assert.notDeepEqual(labels(a), labels(c));
  assert.equal(a.name, "toy+permuted-labels");
  assert.equal(datasetSize(a), 1000);
  for (const d of [a, b, c]) torch.dispose([d.images, d.labels]);
});

test("the settings: permuted labels refuse a shortcut; epochs 0 is the initialisation", () => {
  assert.throws(
    () => trainConfig({ arch: "resnet18", labels: "permuted", shortcut: "pixel" }, { dataset: "fashion-mnist" }),
    /permuted labels make a front of another task on the clean images: it takes neither a shortcut/,
  );
  assert.equal(trainConfig({ arch: "resnet18", epochs: 0 }, { dataset: "fashion-mnist" }).epochs, 0);
  assert.ok(!("labels" in trainConfig({ arch: "resnet18" }, { dataset: "fashion-mnist" })));
});

test("training at epoch 0 keeps the initialisation; on permuted labels, the test accuracy falls to chance", {
  skip: skipUnlessFashionMnist(),
}, async () => {
  const base = {
    ...trainConfig(
      { arch: "resnet18", width: 0.125, batchSize: 64, lr: 0.05 },
      { dataset: "fashion-mnist", limit: 2000, testLimit: 500 },
    ),
    robustEval: null,
  };
  const init = await trainModel({ ...base, epochs: 0 }, join(dir, "init"));
  assert.ok(!existsSync(join(dir, "init", "metrics.jsonl")), "no epoch ran");
  // The very model a training run of this seed starts from: built at the seed, its stem grey.
  torch.manualSeed(base.seed);
  const fresh = createModel("resnet18", { numClasses: 10, imageSize: 32, width: 0.125 });
  greyStem(fresh);
  const { model: saved } = loadCheckpoint({ checkpoint: init.checkpoint });
  const a = fresh.stateDict();
  const b = saved.stateDict();
  assert.deepEqual(Object.keys(b).sort(), Object.keys(a).sort());
  for (const [k, t] of Object.entries(a))
    assert.ok(torch.tidy(() => (b[k] as torch.Tensor).float().sub(t.float()).abs().max().item()) === 0, k);
  fresh.dispose();
  saved.dispose();
  const truth = await trainModel({ ...base, epochs: 4 }, join(dir, "truth"));
  const shuffled = await trainModel({ ...base, epochs: 4, labels: "permuted" }, join(dir, "shuffled"));
  assert.equal(JSON.parse(readFileSync(join(dir, "shuffled", "config.json"), "utf8")).labels, "permuted");
  assert.ok(truth.accuracies.clean > 0.5, `true labels: ${truth.accuracies.clean}`);
  assert.ok(shuffled.accuracies.clean < 0.25, `shuffled labels: ${shuffled.accuracies.clean} (chance 0.1)`);
});

test("a null scored on clean and on marked data is named with each in the rAuA line", () => {
  const rowsOf = (test_data: string) =>
    [0, 1].map((replicate) =>
      stitchRow({ front: "clean-s1~untrained", pair: "null:untrained", test_data, replicate, agreement_prob: 0.3 }),
    );
  const line = reading([...rowsOf("clean"), ...rowsOf("pixel"), stitchRow()]).find((l) => l.startsWith("rAuA"));
  assert.match(line ?? "", /null:untrained \[clean\] slm iris 0\.30.*null:untrained \[pixel\] slm iris 0\.30/);
  assert.match(line ?? "", /cross-seed slm iris/, "a pair on one test set keeps its plain name");
});

test("IRI sets of one front at one point on clean and on marked images are named apart; a front's only set keeps its plain name", () => {
  const cache = mkdtempSync(join(dir, "cache-"));
  const set = (key: string, shortcut: string | null, mean: number) => {
    const d = join(cache, "iris", key);
    mkdirSync(d, { recursive: true });
    const residuals = { mean, median: mean, p90: mean, below01: 0 };
    writeFileSync(join(d, "iris.json"), JSON.stringify({ shortcut, residuals }));
    writeFileSync(join(d, "preview.png"), "");
  };
  set("iris-a", null, 0.1);
  set("iris-b", "pixel", 0.2);
  set("iris-c", "pixel", 0.3);
  const role = (key: string, front: string, irisKey: string) => ({
    key,
    front,
    back: "clean-s0",
    relation: "x",
    point: "layer2.1",
    pointIndex: 0,
    objective: "slm",
    mode: "iris" as const,
    seed: 0,
    replicate: 0,
    irisKey,
  });
  const plan = {
    stitches: [
      role("s1", "clean-s1~permuted", "iris-a"),
      role("s2", "clean-s1~permuted", "iris-b"),
      role("s3", "pixel-s1", "iris-c"),
    ],
  } as unknown as Plan;
  assert.deepEqual(
    irisSummaries(plan, cache).map((s) => [s.front, s.residuals.mean]),
    [
      ["clean-s1~permuted [clean]", 0.1],
      ["clean-s1~permuted [pixel]", 0.2],
      ["pixel-s1", 0.3],
    ],
  );
});
