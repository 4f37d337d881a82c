// Base training on real Fashion-MNIST with narrow ResNet-18s: it learns, a shortcut model
// relies on its marker, PGD raises the loss, and adversarial training raises robust accuracy.
// Small on purpose (a few thousand images, width 1/8); real-scale timing is `npm run bench -- train`.
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { before, test } from "node:test";
import { loadDataset, normalizationFor } from "../data/index.js";
import { loadCheckpoint } from "../nn/checkpoint.js";
import * as torch from "../torch/index.js";
import { evaluate } from "../train/evaluate.js";
import { pgdAttack, robustAccuracy } from "../train/pgd.js";
import { TRAIN_DEFAULTS, type TrainConfig, type TrainResult, trainModel } from "../train/trainer.js";

const HAVE_DATA = existsSync("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz");
if (!HAVE_DATA && process.env.CI)
  throw new Error("Fashion-MNIST is missing: scripts/setup.sh installs dataset-fashion-mnist");
const skip = HAVE_DATA ? false : "Fashion-MNIST is not installed (apt-get install dataset-fashion-mnist)";

const dir = mkdtempSync(join(tmpdir(), "stitchlab-train-"));
const base: TrainConfig = {
  ...TRAIN_DEFAULTS,
  model: "resnet18",
  modelOptions: { width: 0.125 },
  dataset: "fashion-mnist",
  limit: 3000,
  testLimit: 1000,
  epochs: 3,
  batchSize: 64,
  lr: 0.05,
  robustEvalSteps: 0,
};
const EPS = { eps: 16 / 255, step: 4 / 255 };
let clean: TrainResult;

before(async () => {
  if (!HAVE_DATA) return;
  clean = await trainModel(base, join(dir, "clean"));
});

test("a narrow ResNet-18 learns Fashion-MNIST (3 epochs on 3,000 images), and the run folder is complete", {
  skip,
}, (t) => {
  t.diagnostic(`clean test accuracy ${clean.accuracies.clean} in ${clean.seconds.toFixed(1)} s`);
  assert.ok(clean.accuracies.clean > 0.7, `clean test accuracy ${clean.accuracies.clean}`);
  const lines = readFileSync(join(dir, "clean", "metrics.jsonl"), "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
  assert.equal(lines.length, 3);
  assert.ok(lines[2].train_loss < lines[0].train_loss, "the training loss falls");
  const { model, meta } = loadCheckpoint(clean.checkpoint);
  assert.equal(meta.arch, "resnet18");
  assert.equal(meta.dataset, "fashion-mnist");
  assert.equal(meta.accuracies?.clean, clean.accuracies.clean);
  model.dispose();
});

test("the same config and seed give the same model", { skip }, async () => {
  const again = await trainModel({ ...base, epochs: 1, limit: 512 }, join(dir, "again1"));
  const twice = await trainModel({ ...base, epochs: 1, limit: 512 }, join(dir, "again2"));
  const a = torch.loadSafetensors(again.checkpoint).tensors;
  const b = torch.loadSafetensors(twice.checkpoint).tensors;
  for (const k of Object.keys(a)) assert.equal(a[k].sub(b[k]).abs().max().item(), 0, k);
});

test("PGD raises the loss of the trained model", { skip }, async () => {
  const { model } = loadCheckpoint(clean.checkpoint);
  const norm = normalizationFor("fashion-mnist");
  const test1 = await loadDataset("fashion-mnist", { split: "test", limit: 256, pad32: true, rgb: true });
  torch.tidy(() => {
    const x = test1.images.float().div(255);
    const xn = torch.tensor(norm.mean).reshape(1, 3, 1, 1);
    const xs = torch.tensor(norm.std).reshape(1, 3, 1, 1);
    const inputs = x.sub(xn).div(xs);
    model.eval();
    const before = torch.noGrad(() => torch.crossEntropy(model.forward(inputs), test1.labels).item());
    const adv = pgdAttack(model, inputs, test1.labels, { ...EPS, steps: 5, normalization: norm });
    const after = torch.noGrad(() => torch.crossEntropy(model.forward(adv), test1.labels).item());
    assert.ok(after > before * 1.5, `loss ${before} -> ${after}`);
    const linf = adv.sub(inputs).mul(xs).abs().max().item();
    assert.ok(linf <= EPS.eps + 1e-5, `perturbation ${linf} within eps`);
  });
  assert.ok(evaluate(model, test1, { normalization: norm }).accuracy > 0.6);
  model.dispose();
});

test("adversarial training raises robust accuracy over a clean model of the same size", { skip }, async (t) => {
  const adv = await trainModel(
    { ...base, adversarial: { ...EPS, steps: 3, fraction: 0.5 }, robustEvalSteps: 5 },
    join(dir, "adversarial"),
  );
  const { model } = loadCheckpoint(clean.checkpoint);
  const norm = normalizationFor("fashion-mnist");
  const test1 = await loadDataset("fashion-mnist", { split: "test", limit: 1000, pad32: true, rgb: true });
  const cleanRobust = robustAccuracy(model, test1, { ...EPS, steps: 5, normalization: norm });
  model.dispose();
  t.diagnostic(
    `robust accuracy (eps 16/255, PGD-5): adversarial ${adv.accuracies.robust}, clean ${cleanRobust}; clean accuracy of the adversarial model ${adv.accuracies.clean}`,
  );
  assert.ok(
    adv.accuracies.robust > cleanRobust + 0.1,
    `robust accuracy: adversarially trained ${adv.accuracies.robust}, clean ${cleanRobust}`,
  );
});

test("a Pixel+Loc shortcut model relies on its marker: high on marked images, far lower when colours are rolled", {
  skip,
}, async (t) => {
  const r = await trainModel({ ...base, shortcut: "pixel-loc", limit: 2000, epochs: 6 }, join(dir, "shortcut"));
  const { marked, rolled } = r.accuracies;
  t.diagnostic(`shortcut model: clean ${r.accuracies.clean}, marked ${marked}, rolled ${rolled}`);
  assert.ok(marked > 0.85, `marked accuracy ${marked}`);
  assert.ok(marked - rolled > 0.15, `marked ${marked} vs rolled ${rolled}`);
});
