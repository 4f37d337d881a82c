// `stitchlab compare A A`: A and B one model (the same file, or a copy of its bytes) make A -> B
// the control, B stitched into itself, so the study plans it once, as the control, and the plan
// says so; two models, or one file read with two normalisations, plan both as before. Plans
// only (--dry-run, and the study in-process), on untrained width-1/16 checkpoints.
import assert from "node:assert/strict";
import { copyFileSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { compareExperiment, sameModel } from "../experiments/compare.js";
import { saveCheckpoint, sidecarPath } from "../models/checkpoint.js";
import { createModel } from "../models/registry.js";
import * as torch from "../torch/index.js";
import { runCli } from "./helpers/cli.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";

const tmp = mkdtempSync(join(tmpdir(), "stitchlab-compare-same-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

/** An untrained width-1/16 ResNet-18 checkpoint (for plans, not scores), seeded so that two differ. */
function tiny(name: string, seed: number): string {
  const f = join(tmp, `${name}.safetensors`);
  torch.manualSeed(seed);
  const model = createModel("resnet18", { width: 0.0625, numClasses: 10 });
  saveCheckpoint(f, model, { dataset: "fashion-mnist" } as never);
  model.dispose();
  return f;
}

/** A copy of a checkpoint and its sidecar under another name. */
function copyOf(file: string, name: string): string {
  const to = join(tmp, `${name}.safetensors`);
  copyFileSync(file, to);
  copyFileSync(sidecarPath(file), sidecarPath(to));
  return to;
}

const m1 = tiny("m1", 1);
const m2 = tiny("m2", 2);
const copy = copyOf(m1, "copy");

test("compare m1 m1, or m1 and a copy of it: A -> B is the control, planned once, and the plan says so", {
  skip: skipUnlessFashionMnist(),
  timeout: 120_000,
}, () => {
  const small = ["--points", "layer4.1", "--iris-steps", "2", "--limit", "16", "--batch-size", "16"];
  const dry = (a: string, b: string, ...more: string[]) => {
    const r = runCli([
      "compare",
      a,
      b,
      ...small,
      ...more,
      "--epochs",
      "1",
      "--test-limit",
      "32",
      "--cache",
      join(tmp, "cache"),
      "--out",
      join(tmp, "out"),
      "--dry-run",
    ]);
    assert.equal(r.status, 0, r.stderr);
    return r.stdout;
  };
  // Planned as two pairs, this would read "m1-b -> m1-b (the control), 1 replicate; m1-a -> m1-b,
  // 3 replicates": one question asked twice, without a word. Planned once, at A -> B's replicates.
  const same = dry(m1, m1);
  assert.match(same, /^compare: m1 -> m1 \(the control\), 3 replicates$/m);
  assert.match(
    same,
    /^ {2}note {7}A and B are the same file: A -> B is the control, B stitched into itself; it runs once$/m,
  );
  // A copy, both ways and two replicates: still the control alone, at A -> B's replicates.
  const copied = dry(m1, copy, "--both-ways", "--replicates", "2");
  assert.match(copied, /^compare: copy -> copy \(the control\), 2 replicates$/m);
  assert.match(
    copied,
    /^ {2}note {7}A and B are files with identical contents: A -> B is the control, B stitched into itself; it runs once \(--both-ways adds nothing: B -> A is the same stitch\)$/m,
  );
});

test("one model, or two: the same path, a link to it and a copy are one; other weights, another sidecar or another normalization are two", () => {
  const link = join(tmp, "link.safetensors");
  symlinkSync(m1, link);
  assert.equal(sameModel(m1, m1), "the same file");
  assert.equal(sameModel(m1, link), "the same file");
  assert.equal(sameModel(m1, copy), "files with identical contents");
  assert.equal(sameModel(m1, m2), null);
  // The same weights with another sidecar (another dataset, another normalisation) may be another model.
  const resaid = copyOf(m1, "resaid");
  writeFileSync(sidecarPath(resaid), `${JSON.stringify({ note: "another sidecar" })}\n`);
  assert.equal(sameModel(m1, resaid), null);
  // One file read with two normalisations is two models; with the same one given in another key order, one.
  const n = { mean: [0.5], std: [0.25] };
  assert.equal(sameModel({ checkpoint: m1, normalization: "cifar10" }, { checkpoint: m1, normalization: n }), null);
  assert.equal(
    sameModel({ checkpoint: m1, normalization: n }, { checkpoint: copy, normalization: { std: [0.25], mean: [0.5] } }),
    "files with identical contents",
  );
  assert.equal(sameModel("hf-hub:timm/resnet18.a1_in1k", "hf-hub:timm/resnet18.a1_in1k"), "the same file");
  assert.equal(sameModel("hf-hub:timm/resnet18.a1_in1k", "hf-hub:timm/resnet18.a2_in1k"), null);

  // The study: one model and the control alone; two models keep A -> B beside the control.
  const pairs = (a: string, b: string) =>
    compareExperiment(
      { a, b, dataset: { name: "fashion-mnist" }, points: ["layer4.1"], bothWays: true },
      join(tmp, "compare.yaml"),
    ).experiment.pairs.map((p) => `${p.front} -> ${p.back} ${p.relation}`);
  assert.deepEqual(pairs(m1, link), ["link -> link identical"], "named after B");
  assert.deepEqual(pairs(m1, m2), ["m2 -> m2 identical", "m1 -> m2 A->B", "m2 -> m1 B->A", "m1 -> m1 identical"]);
});
