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
import { normalizationScores, normalizationWarnings, SANITY_IMAGES, SANITY_MARGIN } from "../experiments/sanity.js";
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

test("each model is scored on the first test images with its own normalisation, as evaluate() scores them", {
  skip: skipUnlessFashionMnist(),
}, async () => {
  const dir = mkdtempSync(join(tmpdir(), "stitchlab-sanity-"));
  try {
    const file = join(dir, "m.safetensors");
    torch.manualSeed(3);
    const model = createModel("resnet18", { width: 0.0625, numClasses: 10 });
    saveCheckpoint(file, model, { dataset: "fashion-mnist" } as never);
    const data = { dataset: "fashion-mnist", root: null, imageSize: null };
    const [s] = await normalizationScores([{ name: "m", source: file }], data, "cpu");
    const test = await loadDataset("fashion-mnist", { split: "test", limit: SANITY_IMAGES });
    const expected = evaluate(model, test, { normalization: FASHION_MNIST_NORMALIZATION }).accuracy;
    assert.equal(s?.accuracy, expected);
    // Another normalisation is named only where it scores SANITY_MARGIN more.
    if (s?.better) assert.ok(s.better.accuracy > expected + SANITY_MARGIN);
    disposeDataset(test);
    model.dispose();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});
