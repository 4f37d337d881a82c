// Issue 25, case 1: a back model whose head has another number of classes than the data is
// refused before any work. Before, a 100-class back on Fashion-MNIST "agreed" at 0.596 with
// accuracy 0 and exit 0, and a 5-class one failed only after training, in libtorch
// ("Target 6 is out of bounds"), while `run --dry-run` passed.
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { saveCheckpoint } from "../models/checkpoint.js";
import { createModel } from "../models/registry.js";
import { backClassesProblem } from "../stitch/config.js";
import * as torch from "../torch/index.js";
import { runCli } from "./helpers/cli.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";

const skip = skipUnlessFashionMnist();
const tmp = mkdtempSync(join(tmpdir(), "stitchlab-classes-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

/** A random narrow ResNet-18 with this many classes, saved as a stitchlab checkpoint. */
function save(name: string, numClasses: number, seed: number): string {
  const path = join(tmp, name, "model.safetensors");
  mkdirSync(join(tmp, name));
  torch.manualSeed(seed);
  const m = createModel("resnet18", { width: 0.0625, numClasses });
  saveCheckpoint(path, m, { dataset: "fashion-mnist" });
  m.dispose();
  return path;
}

test("backClassesProblem: equal counts and unknown ones pass; another count is named with both numbers", () => {
  assert.equal(backClassesProblem(10, "cifar10", 10), null);
  assert.equal(backClassesProblem(null, "imagefolder", 10), null);
  assert.equal(backClassesProblem(100, "imagefolder", null), null);
  assert.match(
    backClassesProblem(100, "fashion-mnist", 10) ?? "",
    /^has 100 classes, but the dataset fashion-mnist has 10:/,
  );
});

test("stitch refuses a back model with 100 or 5 classes on a 10-class dataset, for HLM and SLM, before training", {
  skip,
}, () => {
  const front = save("a", 10, 0);
  for (const n of [100, 5]) {
    const back = save(`b${n}`, n, 1);
    for (const objective of ["hlm", "slm"]) {
      const out = join(tmp, `s-${n}-${objective}`);
      const r = runCli([
        "stitch",
        "--front",
        front,
        "--back",
        back,
        "--dataset",
        "fashion-mnist",
        "--point",
        "layer1.0",
        "--objective",
        objective,
        "--mode",
        "standard",
        "--limit",
        "64",
        "--test-limit",
        "64",
        "--epochs",
        "1",
        "--out",
        out,
      ]);
      assert.equal(r.status, 1, `${n} classes, ${objective}: ${r.stdout}`);
      assert.match(
        r.stderr,
        new RegExp(`the back model \\(${back}\\) has ${n} classes, but the dataset fashion-mnist has 10`),
      );
      assert.doesNotMatch(r.stderr, /out of bounds|aten::/);
      assert.ok(!existsSync(join(out, "scores.json")), "nothing scored");
    }
  }
});

test("run and run --dry-run refuse a pair whose back has another class count, naming the pair; such a front is fine", {
  skip,
}, () => {
  const a = save("ea", 10, 0);
  const b = save("eb", 100, 1);
  const file = join(tmp, "classes.yaml");
  writeFileSync(
    file,
    `name: classes
dataset: { name: fashion-mnist, limit: 64, testLimit: 64 }
models:
  a: { checkpoint: ${a} }
  b: { checkpoint: ${b} }
  t: { arch: resnet18, width: 0.0625, epochs: 1 }
pairs:
  - { front: a, back: b, relation: cross-seed }
  - { front: b, back: a, relation: reverse }
  - { front: b, back: t, relation: trained }
points: [layer1.0]
objectives: [hlm]
modes: [standard]
stitch: { limit: 64, epochs: 1, batchSize: 32 }
`,
  );
  for (const extra of [["--dry-run"], []]) {
    const out = join(tmp, `run${extra.length}`);
    const r = runCli(["run", file, "--out", out, "--cache", join(tmp, "cache"), ...extra]);
    assert.equal(r.status, 1, r.stdout);
    assert.match(r.stderr, /pairs\[0\]\.back: model "b" has 100 classes, but the dataset fashion-mnist has 10/);
    assert.doesNotMatch(r.stderr, /pairs\[[12]\]/, "a 100-class front, and a back trained on the data, are fine");
    assert.ok(!existsSync(join(tmp, "cache", "train")), "no work was done");
  }
});

test("import refuses weights of 100 classes checked on a 10-class --dataset (it would record that data as theirs)", {
  skip,
}, () => {
  const weights = save("i100", 100, 3);
  const out = join(tmp, "imported");
  const r = runCli(["import", weights, "--arch", "resnet18", "--dataset", "fashion-mnist", "--out", out]);
  assert.equal(r.status, 1, r.stdout);
  assert.match(r.stderr, /has 100 classes, but --dataset fashion-mnist has 10: --dataset is recorded as the data/);
  assert.ok(!existsSync(join(out, "model.safetensors")), "nothing written");
});
