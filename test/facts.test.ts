// A model's facts (models/facts.ts): read once per file and kept, read again when the file is
// written again, and the same as the loaded model's own (its points with their shapes, its head,
// its classes); a zoo recipe's are built once per recipe.
import assert from "node:assert/strict";
import { mkdirSync, mkdtempSync, rmSync, utimesSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { loadCheckpoint, saveCheckpoint } from "../models/checkpoint.js";
import { builtModelFacts, loadedModelFacts } from "../models/facts.js";
import { createModel } from "../models/registry.js";
import { HEAD_POINT } from "../models/stitchable.js";
import * as torch from "../torch/index.js";

const tmp = mkdtempSync(join(tmpdir(), "stitchlab-facts-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

test("a checkpoint's facts: its loaded model's own, read once per file, read again when the file changes", () => {
  const path = join(tmp, "a", "model.safetensors");
  mkdirSync(join(tmp, "a"));
  torch.manualSeed(0);
  const m = createModel("resnet18", { width: 0.0625, numClasses: 7 });
  saveCheckpoint(path, m, { dataset: "fashion-mnist" });
  m.dispose();
  const facts = loadedModelFacts(path);
  const { model } = loadCheckpoint(path);
  try {
    assert.equal(facts.arch, "resnet18");
    assert.equal(facts.numClasses, 7);
    assert.deepEqual(facts.points, model.stitchPoints);
    assert.deepEqual(facts.head, model.stitchPoint(HEAD_POINT));
    assert.equal(facts.headRefused, null);
  } finally {
    model.dispose();
  }
  assert.equal(loadedModelFacts(path), facts, "kept: the same record, not a second load");
  // Written again (a later time): read again.
  const later = new Date(Date.now() + 5000);
  utimesSync(path, later, later);
  assert.notEqual(loadedModelFacts(path), facts);
  assert.deepEqual(loadedModelFacts(path), facts);
});

test("a zoo recipe's facts are built once per recipe, and differ with its options", () => {
  const narrow = builtModelFacts("resnet18", { width: 0.0625 });
  assert.equal(builtModelFacts("resnet18", { width: 0.0625 }), narrow);
  const wider = builtModelFacts("resnet18", { width: 0.125 });
  const channels = (f: typeof narrow) => f.points.find((p) => p.name === "layer4.1")?.channels;
  assert.equal(channels(wider), 2 * (channels(narrow) as number));
});
