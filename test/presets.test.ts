// The presets that follow the reference's configs pair for pair (issue 27): the unseen-information
// study's three marker panels with its two fronts (configs/backdoor_stitching), and adversarial
// stitching's four pair types at attack ratios 0 and 1 (configs/adversarial_stitching), planned at
// each scale; and a pair's own adversarial stitching, which lets one file hold both ratios. That
// every preset plans at all: experiments.test.ts; which data the presets mark: fidelity.test.ts.
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { parse as parseYaml } from "yaml";
import { type Plan, planExperiment, type StitchTask, type Task, type TrainTask } from "../experiments/plan.js";
import { settingsLines } from "../experiments/plan-words.js";
import { ExperimentError, parseExperiment, readExperiment } from "../experiments/spec.js";
import type { TrainConfig } from "../train/config.js";

const root = join(import.meta.dirname, "..");
const presetPlan = (name: string, scale: string): Plan => {
  const path = join(root, "presets", `${name}.yaml`);
  return planExperiment(readExperiment(path, scale), path);
};

/** Each planned stitch with its task's config and its front's and back's training configs. */
function stitchesOf(plan: Plan) {
  const byKey = new Map<string, Task>(plan.tasks.map((t) => [t.key, t]));
  const trained = (ref: StitchTask["front"]): TrainConfig => {
    assert.ok("task" in ref, "a trained model");
    const spec = byKey.get(ref.task)?.spec;
    assert.ok(spec?.kind === "train");
    return (spec as TrainTask).config;
  };
  return plan.stitches.map((s) => {
    const task = byKey.get(s.key)?.spec as StitchTask;
    return { ...s, config: task.config, front: trained(task.front), back: trained(task.back) };
  });
}

const sorted = (xs: Iterable<string>) => [...new Set(xs)].sort();

test("unseen information: the Pixel+Loc, Pixel and Rand panels, each with a front from LS-ImageNet-10 and one of another CIFAR-10 seed, as the reference's backdoor-stitching configs", () => {
  const paper = stitchesOf(presetPlan("unseen-information", "paper"));
  // Front (its dataset) x markers: the reference's ls_imagenet_cifar_0 and cifar_cifar_0, each
  // with pixel_specific, pixel_rand and rand_rand; the back is CIFAR-10's of seed 0.
  assert.deepEqual(
    sorted(paper.map((s) => `${s.front.dataset} ${s.config.shortcut}`)),
    sorted(["imagefolder", "cifar10"].flatMap((d) => ["pixel-loc", "pixel", "rand"].map((k) => `${d} ${k}`))),
  );
  assert.deepEqual(sorted(paper.map((s) => `${s.back.dataset} seed ${s.back.seed}`)), ["cifar10 seed 0"]);
  for (const s of paper) {
    // Clean models; only the stitching data are marked, and scored on their own markers.
    assert.equal(s.front.shortcut, null);
    assert.equal(s.back.shortcut, null);
    assert.equal(s.config.excess, s.config.shortcut, s.relation);
    assert.equal(s.front.seed, 1 + 1000 * s.replicate, "fronts of seeds 1-3, one per replicate");
  }
  assert.deepEqual(sorted(paper.filter((s) => s.front.dataset === "imagefolder").map((s) => s.front.root ?? "")), [
    "data/ls-imagenet-10",
  ]);
  assert.deepEqual(sorted(paper.map((s) => s.objective)), ["dm", "fula", "hlm", "slm"]);
  assert.deepEqual(sorted(paper.map((s) => s.mode)), ["iris", "standard"]);
  assert.deepEqual(sorted(paper.map((s) => String(s.replicate))), ["0", "1", "2"]);
  // Six pairs, each under its own name (the paper's values are quoted for the cross-task ones).
  assert.deepEqual(sorted(paper.map((s) => s.relation)), [
    "cross-seed-pixel",
    "cross-seed-pixel-loc",
    "cross-seed-rand-control",
    "pixel",
    "pixel-loc",
    "rand-control",
  ]);

  // Small: no second dataset, so the cross-seed panels only, on Fashion-MNIST files of its own
  // (no model inherits the LS-ImageNet folder), every front model trained once.
  const smallPlan = presetPlan("unseen-information", "small");
  const small = stitchesOf(smallPlan);
  assert.deepEqual(sorted(small.map((s) => s.config.shortcut ?? "")), ["pixel", "pixel-loc", "rand"]);
  for (const t of smallPlan.tasks.filter((t) => t.kind === "train")) {
    const c = (t.spec as TrainTask).config;
    assert.equal(c.dataset, "fashion-mnist", t.label);
    assert.equal(c.root, null, t.label);
  }
  assert.equal(smallPlan.tasks.filter((t) => t.kind === "train").length, 4, "one back and three fronts");
  assert.deepEqual(sorted(small.map((s) => String(s.front.seed))), ["1", "1001", "2001"]);
});

test("adversarial stitching: the reference's four pair types at attack ratios 0 and 1, scored with the reference's robust evaluation", () => {
  for (const scale of ["small", "paper"]) {
    const plan = presetPlan("adversarial-stitching", scale);
    const stitches = stitchesOf(plan);
    const kind = (c: TrainConfig) => (c.adversarial ? "robust" : "clean");
    // robust->robust, robust->clean, clean->robust, clean->clean, each at ratio 0 and 1.
    assert.deepEqual(
      sorted(stitches.map((s) => `${kind(s.front)}->${kind(s.back)} ratio ${s.config.adversarial?.fraction ?? 0}`)),
      sorted(
        ["robust->robust", "robust->clean", "clean->robust", "clean->clean"].flatMap((p) => [
          `${p} ratio 0`,
          `${p} ratio 1`,
        ]),
      ),
      scale,
    );
    for (const s of stitches) {
      assert.equal(s.mode, "standard");
      assert.equal(s.back.seed, 0);
      assert.equal(s.front.seed % 1000, 1);
      // Ratio 0 is no adversarial example at all (the reference's attack_ratio 0.0).
      if (s.relation.endsWith("ratio-0")) assert.equal(s.config.adversarial, null, s.relation);
      else assert.equal(s.config.adversarial?.fraction, 1, s.relation);
      assert.ok(s.config.robustEval, "every stitched model is scored on adversarial test images");
    }
    if (scale === "paper")
      // The reference's evaluation: APGD-CE and APGD-DLR through ART, 20 iterations from a first step of 2/255.
      for (const s of stitches)
        assert.deepEqual(s.config.robustEval, { attack: "apgd", eps: 8 / 255, steps: 20, stepSize: 2 / 255 });
    // The same models as robust.yaml's, so that the two presets train them once.
    const robust = presetPlan("robust", scale);
    const trainKeys = (p: Plan) => sorted(p.tasks.filter((t) => t.kind === "train").map((t) => t.key));
    const shared = new Set(trainKeys(robust));
    const models = Object.values(plan.models).map((m) => ("task" in m ? m.task : ""));
    for (const key of models) assert.ok(shared.has(key), `${scale}: ${key} is robust.yaml's`);
  }
});

test("a pair's own adversarial stitching overrides the experiment's: one file holds the same models at attack ratios 0 and 1", () => {
  const file = (pairs: string) => `
name: ratios
dataset: { name: fashion-mnist, limit: 1024, testLimit: 256 }
models:
  a: { arch: resnet18, width: 0.125, seed: 0, epochs: 4 }
  b: { arch: resnet18, width: 0.125, seed: 1, epochs: 4 }
pairs:
${pairs}
points: [layer1.0]
objectives: [slm]
modes: [standard, iris]
stitch: { adversarial: { eps: 0.0627451, steps: 3 } }
`;
  const plan = (pairs: string) => planExperiment(parseExperiment(file(pairs), "r.yaml"), join(root, "r.yaml"));
  const p = plan(
    [
      "  - { front: b, back: a, relation: ratio-1 }",
      "  - { front: b, back: a, relation: ratio-0, adversarial: null }",
      "  - { front: b, back: a, relation: ratio-half, adversarial: { eps: 0.0627451, steps: 3, fraction: 0.5 } }",
    ].join("\n"),
  );
  const byRelation = new Map<string, StitchTask[]>();
  for (const s of p.stitches) {
    const spec = p.tasks.find((t) => t.key === s.key)?.spec as StitchTask;
    byRelation.set(`${s.relation} ${s.mode}`, [...(byRelation.get(`${s.relation} ${s.mode}`) ?? []), spec]);
  }
  const adv = (name: string) => byRelation.get(name)?.[0].config.adversarial ?? null;
  assert.equal(adv("ratio-1 standard")?.fraction, 1, "the experiment's");
  assert.equal(adv("ratio-0 standard"), null, "none");
  assert.equal(adv("ratio-half standard")?.fraction, 0.5, "the pair's own");
  // Invariance-aware runs have none either way: one stitch, shared by the three pairs.
  for (const r of ["ratio-1", "ratio-0", "ratio-half"]) assert.equal(adv(`${r} iris`), null);
  assert.equal(new Set(p.stitches.filter((s) => s.mode === "iris").map((s) => s.key)).size, 1);
  // The same models with the same adversarial stitching twice would be counted twice: refused.
  assert.throws(
    () =>
      plan(
        [
          "  - { front: b, back: a, relation: ratio-1 }",
          "  - { front: b, back: a, relation: again, adversarial: { eps: 0.0627451, steps: 3 } }",
        ].join("\n"),
      ),
    (e: unknown) => e instanceof ExperimentError && /pairs\[1\]: the same as pairs\[0\]/.test(e.message),
  );
});

test("the reading's settings name each pair's adversarial stitching when pairs differ (ratio 1 and ratio 0 in one file)", () => {
  const lines = settingsLines(presetPlan("adversarial-stitching", "small")).join("\n");
  const clause = lines.match(/Adversarial stitching \(standard runs\): T on PGD examples, ([^\n]*?)\. Replicates/)?.[1];
  assert.ok(clause, lines);
  const parts = clause.split("; ");
  assert.equal(parts.length, 2, clause);
  assert.match(
    parts[0],
    /^eps 0\.\d{4}, \d+ steps, fraction 1 for robust-to-robust-ratio-1, robust-to-clean-ratio-1, clean-to-robust-ratio-1, clean-to-clean-ratio-1$/,
  );
  assert.equal(
    parts[1],
    "none for robust-to-robust-ratio-0, robust-to-clean-ratio-0, clean-to-robust-ratio-0, clean-to-clean-ratio-0",
  );
});

test("no preset pairs a front with a back of its own seed, unless the pair is an identical-model control (issue 36)", () => {
  // A front trained with its back's seed shares its initialisation, batch order and crops, which
  // can inflate that pair's similarity: the reference's fronts have seeds 1-3 against a back of
  // seed 0 (configs/adversarial_stitching, configs/backdoor_stitching). Checked on the planned
  // tasks, so at every scale and in every replicate (replicate r adds 1000 r to a front's seed).
  const presets = readdirSync(join(root, "presets")).filter((f) => f.endsWith(".yaml"));
  assert.ok(presets.includes("robust.yaml"), "the presets folder is read");
  for (const file of presets) {
    const name = file.replace(/\.yaml$/, "");
    const scales = Object.keys((parseYaml(readFileSync(join(root, "presets", file), "utf8")).scales ?? {}) as object);
    for (const scale of scales.length ? scales : [undefined]) {
      const path = join(root, "presets", file);
      const plan = planExperiment(readExperiment(path, scale), path);
      const byKey = new Map<string, Task>(plan.tasks.map((t) => [t.key, t]));
      const seedOf = (ref: StitchTask["front"]): number | null => {
        const spec = "task" in ref ? byKey.get(ref.task)?.spec : undefined;
        return spec?.kind === "train" ? spec.config.seed : null;
      };
      for (const s of plan.stitches) {
        const task = byKey.get(s.key)?.spec as StitchTask;
        const where = `${name} --scale ${scale}: ${s.relation} (${s.front} -> ${s.back}, replicate ${s.replicate})`;
        const same = "task" in task.front && "task" in task.back && task.front.task === task.back.task;
        if (same) {
          assert.match(s.relation, /identical/, `${where}: a model stitched with itself is the identical control`);
          continue;
        }
        const [front, back] = [seedOf(task.front), seedOf(task.back)];
        if (front === null || back === null) continue; // a checkpoint: its seed is not the file's to choose
        assert.notEqual(front, back, `${where}: front and back share seed ${front}`);
      }
    }
  }
});
