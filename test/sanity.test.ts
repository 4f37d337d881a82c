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
import { nearChance } from "../experiments/reading.js";
import {
  betterNormalization,
  normalizationScores,
  normalizationWarnings,
  SANITY_IMAGES,
} from "../experiments/sanity.js";
import { saveCheckpoint } from "../models/checkpoint.js";
import { createModel } from "../models/registry.js";
import * as torch from "../torch/index.js";
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
