// The check compare runs before anything else (experiments/sanity.ts): a model fed another
// normalisation than its training's is named, with the one that scores best.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { disposeDataset, loadDataset } from "../data/index.js";
import { FASHION_MNIST_NORMALIZATION } from "../data/transforms.js";
import { evaluate } from "../eval/evaluate.js";
import {
  ADAPT_CHECK_STEPS,
  adaptCheck,
  adaptDecision,
  betterNormalization,
  normalizationScores,
  normalizationWarnings,
  SANITY_IMAGES,
} from "../experiments/sanity.js";
import { nearChance } from "../findings/reading.js";
import { saveCheckpoint } from "../models/checkpoint.js";
import { createModel } from "../models/registry.js";
import * as torch from "../torch/index.js";
import { trainConfig } from "../train/config.js";
import { trainModel } from "../train/trainer.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";

test("a model far better served by another normalisation, or near chance, is named with what to check; a sane one is not", () => {
  const [wrong] = normalizationWarnings(
    [{ name: "resnet", accuracy: 0.33, better: { normalization: "fashion-mnist", accuracy: 0.82 } }],
    10,
  );
  assert.equal(
    wrong,
    `resnet scores 0.33 on ${SANITY_IMAGES} test images with the normalization it was given (chance 0.10), 0.82 with fashion-mnist's: is its normalization right (--normalization, or --front-/--back-normalization)? Every score stitched through it depends on it.`,
  );
  // Near chance (2/K) with no better normalisation: untrained, or a normalisation stitchlab has no name for.
  const [chance] = normalizationWarnings([{ name: "b", accuracy: 0.12, better: null }], 10);
  assert.match(
    chance,
    /^b scores 0\.12 on \d+ test images .*\(chance 0\.10\): is its normalization right, and is it trained\?/,
  );
  assert.deepEqual(normalizationWarnings([{ name: "ok", accuracy: 0.85, better: null }], 10), []);
  // Classes unknown (an image folder not there): only a better normalisation is told.
  assert.deepEqual(normalizationWarnings([{ name: "x", accuracy: 0.05, better: null }], null), []);
});

test("another normalisation is named only where it beats the model's own by the margin, the best of them", () => {
  assert.equal(
    betterNormalization(0.33, [
      ["cifar10", 0.5],
      ["none", 0.4],
    ]),
    null,
    "0.17 better: within the margin",
  );
  assert.deepEqual(
    betterNormalization(0.1, [
      ["cifar10", 0.5],
      ["fashion-mnist", 0.82],
      ["none", 0.3],
    ]),
    {
      normalization: "fashion-mnist",
      accuracy: 0.82,
    },
  );
  assert.equal(betterNormalization(0.8, []), null);
});

test("near chance is 2/K, and below 1 for few classes", () => {
  assert.equal(nearChance(0.2, 10), true);
  assert.equal(nearChance(0.21, 10), false);
  // Two classes: 2/K would be 1, every model; a quarter of the way from 0.5 to 1 instead.
  assert.equal(nearChance(0.6, 2), true);
  assert.equal(nearChance(0.7, 2), false);
});

test("each model of the dataset's classes is scored on the first test images with its own normalisation; one of other classes is left out", {
  skip: skipUnlessFashionMnist(),
}, async () => {
  const dir = mkdtempSync(join(tmpdir(), "stitchlab-sanity-"));
  try {
    torch.manualSeed(3);
    const save = (name: string, numClasses: number) => {
      const file = join(dir, `${name}.safetensors`);
      const model = createModel("resnet18", { width: 0.0625, numClasses });
      saveCheckpoint(file, model, { dataset: "fashion-mnist" } as never);
      return { file, model };
    };
    const ten = save("ten", 10);
    // A front of five classes (other data): cross-entropy against these labels would throw.
    const five = save("five", 5);
    const data = { dataset: "fashion-mnist", root: null, imageSize: null };
    const scores = await normalizationScores(
      [
        { name: "ten", source: ten.file },
        { name: "five", source: five.file },
      ],
      data,
      10,
      "cpu",
    );
    assert.deepEqual(
      scores.map((s) => s.name),
      ["ten"],
    );
    const test = await loadDataset("fashion-mnist", { split: "test", limit: SANITY_IMAGES });
    const expected = evaluate(ten.model, test, { normalization: FASHION_MNIST_NORMALIZATION }).accuracy;
    assert.equal(scores[0]?.accuracy, expected);
    disposeDataset(test);
    ten.model.dispose();
    five.model.dispose();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("the adapt check's decision: nothing where B keeps itself, augmentation off where only augmented images break it (unless asked for), a warning where adapt itself does", () => {
  const check = (augmented: number, plain: number | null) => ({
    augmented,
    plain,
    steps: ADAPT_CHECK_STEPS,
    images: 100,
  });
  assert.deepEqual(adaptDecision(check(0.99, null), "theirs", false), { augment: null, line: null });
  const off = adaptDecision(check(0.62, 0.99), "theirs", false);
  assert.equal(off.augment, false);
  assert.match(
    off.line ?? "",
    /^theirs, its batch norm re-estimated on augmented real images .* agrees with itself at 0\.620 on 100 test images \(a control needs 0\.95\), and at 0\.990 on the images as they are: it was likely trained without augmentation, so standard runs train on the images as they are \(stitch\.augment: false/,
  );
  const asked = adaptDecision(check(0.62, 0.99), "theirs", true);
  assert.equal(asked.augment, null, "--stitch-augment given: kept, and warned");
  assert.match(asked.line ?? "", /You asked for --stitch-augment: the control will likely fail/);
  const both = adaptDecision(check(0.6, 0.7), "theirs", false);
  assert.equal(both.augment, null);
  assert.match(both.line ?? "", /batch norm's adapt itself changes it.*stitch\.bnMode: \{standard: eval\}/);
});

test("the adapt check: a model trained with augmentation keeps itself; one whose statistics are not its data's is caught", {
  skip: skipUnlessFashionMnist(),
}, async () => {
  const dir = mkdtempSync(join(tmpdir(), "stitchlab-adapt-"));
  try {
    await trainModel(
      trainConfig(
        // Three epochs of 32 steps: batch norm's running statistics have caught up with the
        // weights (after one epoch of 8 steps they lag them, and adapt alone moves B: 0.91).
        { arch: "resnet18", width: 0.0625, epochs: 3, batchSize: 64, lr: 0.05, seed: 0 },
        { dataset: "fashion-mnist", limit: 2048, testLimit: 100 },
      ),
      join(dir, "trained"),
    );
    const file = join(dir, "trained", "model.safetensors");
    const data = { dataset: "fashion-mnist", root: null, imageSize: null };
    const opts = { limit: 256, batchSize: 48, device: "cpu" as const };
    // Trained with stitchlab's augmentation: adapting on augmented images leaves it as it was.
    const sane = await adaptCheck({ name: "trained", source: file }, data, opts);
    assert.ok(sane.augmented >= 0.95, `augmented ${sane.augmented}`);
    assert.equal(sane.plain, null, "the images as they are are tried only where the augmented check fails");
    // Its running statistics scaled away from its data's: adapt moves them back, and B no longer
    // agrees with the model as saved, augmented or not. A check that did not adapt would read 1.
    const loaded = (await import("../models/checkpoint.js")).loadCheckpoint(file);
    torch.noGrad(() => {
      for (const [name, t] of loaded.model.namedBuffers())
        if (name.endsWith("running_var")) t.mul_(50);
        else if (name.endsWith("running_mean")) t.add_(3);
    });
    const broken = join(dir, "broken.safetensors");
    saveCheckpoint(broken, loaded.model, loaded.record as never);
    loaded.model.dispose();
    const caught = await adaptCheck({ name: "broken", source: broken }, data, opts);
    assert.ok(caught.augmented < 0.95, `augmented ${caught.augmented}`);
    assert.ok(caught.plain !== null && caught.plain < 0.95, `plain ${caught.plain}`);
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
