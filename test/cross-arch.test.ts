// Stitching across architectures in experiments and compare (issue 39): a pair's frontPoints name
// the front's point for each of the back's, the planner makes the front's IRIs there and stitches
// frontPoint -> point, compare pairs two architectures' points by relative depth and says so.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { compareExperiment, pairByDepth, pairPoints } from "../experiments/compare.js";
import { type IrisTask, planExperiment, type StitchTask } from "../experiments/plan.js";
import { parseExperiment, readExperiment } from "../experiments/spec.js";
import { loadCheckpoint, saveCheckpoint } from "../models/checkpoint.js";
import { createModel } from "../models/registry.js";
import { runCli } from "./helpers/cli.js";
import { csvRows } from "./helpers/csv.js";
import { PYTHON, skipUnlessTorchvision } from "./helpers/pytorch.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";

const dir = mkdtempSync(join(tmpdir(), "stitchlab-cross-arch-"));
after(() => rmSync(dir, { recursive: true, force: true }));

/** A small ResNet-18 and a small ViT as stitchlab checkpoints (random weights; fashion-mnist's statistics). */
function savePair(): { cnn: string; vit: string } {
  const cnn = createModel("resnet18", { width: 0.125 });
  const vit = createModel("vit_tiny_patch4_32", { embedDim: 24, depth: 4 });
  const files = { cnn: join(dir, "cnn.safetensors"), vit: join(dir, "vit.safetensors") };
  saveCheckpoint(files.cnn, cnn, { dataset: "fashion-mnist" });
  saveCheckpoint(files.vit, vit, { dataset: "fashion-mnist" });
  cnn.dispose();
  vit.dispose();
  return files;
}
const files = savePair();

test("points are paired by relative depth: the back's i-th of n takes the front's nearest that depth", () => {
  const resnet = [
    "stem",
    "layer1.0",
    "layer1.1",
    "layer2.0",
    "layer2.1",
    "layer3.0",
    "layer3.1",
    "layer4.0",
    "layer4.1",
  ];
  const vit = ["blocks.0", "blocks.1", "blocks.2", "blocks.3"];
  const inResnet = pairByDepth(resnet, vit);
  assert.deepEqual(vit.map(inResnet), ["stem", "layer2.0", "layer3.0", "layer4.1"]);
  const inVit = pairByDepth(vit, resnet);
  assert.deepEqual(resnet.map(inVit), [
    "blocks.0",
    "blocks.0",
    "blocks.1",
    "blocks.1",
    "blocks.1",
    "blocks.2",
    "blocks.2",
    "blocks.3",
    "blocks.3",
  ]);
  assert.equal(inVit("head"), "head", "the head's input maps to the head's input");
  assert.throws(() => inVit("blocks.9"), /'blocks.9' is not a stitch point of the back model/);
});

test("compare on two architectures writes frontPoints, and the planner stitches frontPoint -> point", () => {
  const { experiment, text } = compareExperiment(
    // One replicate: each IRI set once (the default's three would make each three times).
    { a: files.cnn, b: files.vit, dataset: { name: "fashion-mnist" }, bothWays: true, replicates: 1 },
    join(dir, "compare.yaml"),
  );
  assert.match(
    text,
    /share no stitch point by name, so each of vit's points is paired with cnn's at the same relative depth/,
  );
  assert.deepEqual(experiment.points, ["blocks.2", "norm"], "B's middle and last points");
  const [control, aToB, bToA, controlA] = experiment.pairs;
  assert.equal(control?.frontPoints, undefined, "B into itself needs none");
  assert.deepEqual(aToB?.frontPoints, { "blocks.2": "layer3.0", norm: "head" }, "a vector pairs with a vector");
  assert.deepEqual(bToA?.points, ["layer3.0", "head"], "B -> A stitches at A's partners");
  assert.deepEqual(bToA?.frontPoints, { "layer3.0": "blocks.2", head: "norm" });
  assert.deepEqual(controlA?.points, ["layer3.0", "head"]);

  const plan = planExperiment(experiment, join(dir, "compare.yaml"));
  const specs = plan.tasks.map((t) => t.spec);
  const iris = specs.filter((s): s is IrisTask => s.kind === "iris").map((s) => s.point);
  assert.deepEqual(
    iris.sort(),
    ["blocks.2", "head", "layer3.0", "norm"],
    "each front's IRI set at each of its points once (B -> A shares the control's)",
  );
  const stitches = specs
    .filter((s): s is StitchTask => s.kind === "stitch")
    .map((s) => `${s.config.frontPoint}->${s.config.backPoint}`);
  for (const want of ["layer3.0->blocks.2", "head->norm", "blocks.2->layer3.0", "norm->head"])
    assert.ok(stitches.includes(want), `${want} in ${stitches.join(", ")}`);
  const labels = plan.tasks.map((t) => t.label);
  assert.ok(labels.includes("stitch cnn -> vit @ layer3.0 -> blocks.2 slm iris"), labels.join("\n"));
  const roles = plan.stitches.filter((r) => r.relation === "A->B" && r.mode === "iris");
  assert.deepEqual(
    roles.map((r) => [r.point, r.frontPoint]),
    [
      ["blocks.2", "layer3.0"],
      ["norm", "head"],
    ],
  );
});

test("an experiment file's frontPoints are checked against both models before any work", () => {
  const yaml = (frontPoints: string) => `
name: x
dataset: { name: fashion-mnist }
models:
  cnn: { checkpoint: ${files.cnn} }
  vit: { checkpoint: ${files.vit} }
pairs:
  - { front: cnn, back: vit, relation: cross-arch, frontPoints: ${frontPoints} }
points: [blocks.1]
objectives: [slm]
modes: [standard]
`;
  const file = join(dir, "x.yaml");
  const plan = (fp: string) => planExperiment(parseExperiment(yaml(fp), file), file);
  assert.throws(
    () => plan("{ blocks.1: layer9.9 }"),
    /pairs\[0\]\.frontPoints: no stitch point "layer9\.9" in resnet18/,
  );
  assert.throws(() => plan("{ blocks.2: layer2.0 }"), /"blocks\.2" is not among the pair's points \(blocks\.1\)/);
  assert.throws(
    () => plan("{}"),
    /no stitch point "blocks\.1" in resnet18/,
    "a point not listed is the front's of the same name",
  );
  assert.equal(plan("{ blocks.1: layer2.0 }").stitches.length, 1);
  // Names that exist but that T cannot join: a vector into a map of tokens.
  assert.throws(
    () => plan("{ blocks.1: head }"),
    /pairs\[0\]\.frontPoints: a vector \(a head's input\) stitches to a vector only \(A's head: vector of 64; B's blocks\.1: 65 tokens x 24\)/,
  );
});

test("compare runs a ResNet front into a ViT back end to end and says how the points were paired", {
  skip: skipUnlessFashionMnist(),
}, () => {
  const out = join(dir, "run");
  const r = runCli(
    [
      "compare",
      files.cnn,
      files.vit,
      "--out",
      out,
      "--cache",
      join(dir, "cache"),
      "--replicates",
      "1",
      "--iris-limit",
      "16",
      "--stitch-limit",
      "16",
      "--batch-size",
      "16",
      "--epochs",
      "4",
      "--iris-steps",
      "5",
      "--test-limit",
      "64",
      "--workers",
      "1",
    ],
    { cwd: dir },
  );
  assert.equal(r.status, 0, r.stderr.slice(-3000));
  assert.match(
    r.stdout + r.stderr,
    /paired by relative depth: cnn's layer3\.0 -> vit's blocks\.2, cnn's head -> vit's norm/,
  );
  assert.match(r.stdout, /^Verdict, cnn -> vit, SLM, 1 replicate: /m);
  // results.csv names both ends of each stitch: the back's point and the front's partner.
  const pairs = new Set(
    csvRows(join(out, "results.csv"))
      .filter((row) => row.front === "cnn")
      .map((row) => `${row.front_point} -> ${row.point}`),
  );
  assert.deepEqual([...pairs].sort(), ["head -> norm", "layer3.0 -> blocks.2"]);
});

test("the cross-architecture preset: its models train and export in plain PyTorch, and its frontPoints are pairPoints' by depth", {
  skip: skipUnlessTorchvision() || skipUnlessFashionMnist(),
}, () => {
  const preset = join(import.meta.dirname, "..", "presets", "cross-architecture");
  const study = join(dir, "preset");
  // The preset's own script at a tiny size (one epoch on 256 images): the architectures, not the accuracies.
  const r = spawnSync(
    PYTHON,
    [
      join(preset, "train_models.py"),
      "--out",
      join(study, "models"),
      "--epochs",
      "1",
      "--limit",
      "256",
      "--test-limit",
      "100",
      "--threads",
      "1",
    ],
    { encoding: "utf8", timeout: 300_000 },
  );
  assert.equal(r.status, 0, r.stderr);
  const accuracies = JSON.parse(readFileSync(join(study, "models", "accuracies.json"), "utf8"));
  assert.deepEqual(Object.keys(accuracies.models), ["resnet18-s0", "resnet18-s1", "convnext", "vit"]);
  copyFileSync(join(preset, "study.yaml"), join(study, "study.yaml"));
  const experiment = readExperiment(join(study, "study.yaml"));
  const points = (file: string) => {
    const { model } = loadCheckpoint({ checkpoint: join(study, "models", file), normalization: "fashion-mnist" });
    try {
      return model.stitchPoints.map((p) => ({ name: p.name, kind: p.kind }));
    } finally {
      model.dispose();
    }
  };
  const back = points("resnet18-s0.onnx");
  for (const [name, file] of [
    ["convnext", "convnext.onnx"],
    ["vit", "vit.onnx"],
  ] as const) {
    const pair = experiment.pairs.find((p) => p.front === name);
    const byDepth = pairPoints(points(file), back);
    assert.deepEqual(
      pair?.frontPoints,
      Object.fromEntries(experiment.points === "all" ? [] : experiment.points.map((p) => [p, byDepth(p)])),
      name,
    );
  }
  const plan = planExperiment(experiment, join(study, "study.yaml"));
  assert.equal(
    plan.stitches.filter((s) => s.frontPoint).length,
    2 * 2 * 2 * 3,
    "two fronts of other architectures, two points, two modes, three replicates",
  );

  // The README's command on two of these models trained in plain PyTorch (at the test's sizes).
  const models = join(study, "models");
  const r2 = runCli(
    [
      "compare",
      "convnext.onnx",
      "resnet18-s0.onnx",
      "--normalization",
      "fashion-mnist",
      "--dataset",
      "fashion-mnist",
      ...["--out", join(study, "compare"), "--cache", join(study, "cache"), "--json"],
      ...["--test-limit", "64", "--iris-limit", "16", "--iris-steps", "5", "--stitch-limit", "32"],
      ...["--epochs", "2", "--batch-size", "16", "--workers", "1"],
    ],
    { cwd: models },
  );
  assert.equal(r2.status, 0, r2.stderr.slice(-3000));
  const answer = JSON.parse(r2.stdout) as { verdicts: { relation: string; points: unknown[] }[] };
  assert.deepEqual(
    answer.verdicts.map((v) => [v.relation, v.points.length]),
    [
      ["A->B", 2],
      ["identical", 2],
    ],
    "a verdict at B's middle and last point, and the control's",
  );
  assert.match(r2.stderr, /paired by relative depth: convnext's \S+ -> resnet18-s0's layer/);
});
