// Stitching a model with itself, every objective, at an early, a middle and the last point:
// agreement probability at least 0.99 (the paper: identical models about 0.95-1.0).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { type Dataset, disposeDataset, loadDataset, normalizationFor } from "../data/index.js";
import { loadCheckpoint } from "../models/checkpoint.js";
import type { StitchableModel } from "../models/stitchable.js";
import { OBJECTIVES, parseObjective } from "../stitch/config.js";
import { evaluateStitch } from "../stitch/evaluate.js";
import { StitchedModel } from "../stitch/stitched.js";
import { trainStitch } from "../stitch/train.js";
import { trainConfig } from "../train/config.js";
import { trainModel } from "../train/trainer.js";
import { settledMemory } from "./helpers/memory.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";
import { stitchTrainOptions } from "./helpers/stitch.js";

const skip = skipUnlessFashionMnist();
const HAVE_DATA = !skip;
const norm = normalizationFor("fashion-mnist");
let model: StitchableModel;
let train: Dataset;
let testSet: Dataset;

before(async () => {
  if (!HAVE_DATA) return;
  const dir = mkdtempSync(join(tmpdir(), "stitchlab-stitching-"));
  after(() => rmSync(dir, { recursive: true, force: true }));
  const r = await trainModel(
    {
      ...trainConfig({ arch: "resnet18" }, { dataset: "fashion-mnist" }),
      model: "resnet18",
      modelOptions: { width: 0.125 },
      dataset: "fashion-mnist",
      limit: 3000,
      testLimit: 200,
      epochs: 3,
      batchSize: 64,
      lr: 0.05,
      robustEval: null,
    },
    dir,
  );
  model = loadCheckpoint(r.checkpoint).model;
  train = await loadDataset("fashion-mnist", { split: "train", limit: 256, pad32: true, rgb: true });
  testSet = await loadDataset("fashion-mnist", { split: "test", limit: 256, pad32: true, rgb: true });
});

for (const point of ["stem", "layer2.0", "layer4.1"]) {
  for (const objective of OBJECTIVES) {
    test(`self-stitching at ${point} with ${objective}: agreement probability near 1`, { skip }, (t) => {
      const s = new StitchedModel(model, model, point);
      const { epochLosses, initResidual } = trainStitch(
        s,
        train,
        train,
        stitchTrainOptions({
          objective: parseObjective(objective),
          normalization: norm,
          epochs: 4,
          batchSize: 128,
          bnMode: "eval",
          initImages: 128,
        }),
      );
      assert.ok(initResidual !== null && initResidual < 1e-3, `init residual ${initResidual}`);
      assert.ok(Number.isFinite(epochLosses[0]));
      const r = evaluateStitch(s, testSet, { normalization: norm });
      t.diagnostic(
        `agreement probability ${r.agreementProbability.toFixed(4)}, hard agreement ${r.hardAgreement.toFixed(4)}`,
      );
      // HLM fits the labels, not B: from T = I it moves towards whatever raises B's tail's
      // accuracy, which for this small B costs agreement (measured 0.96-0.98 with torchvision's
      // initialisation). Its bar is the paper's own for identical models (about 0.95-1.0). The
      // others target B itself, so T = I is their optimum; only Adam's weight decay (an L2 term
      // Adam normalises to lr-sized steps where the loss gradient is zero) moves T off it:
      // measured 0.986-0.9995.
      // Hard agreement (both right or both wrong, on 256 images) moves more under HLM: every test
      // image T's label-fitting turns from B's error into a right answer counts against it
      // (0.93 or more with PyTorch's initialisation of the stem, 0.92 with the grey stem's draw of B).
      const bar = objective === "hlm" ? 0.95 : 0.98;
      assert.ok(r.agreementProbability >= bar, `agreement probability ${r.agreementProbability} (bar ${bar})`);
      const hardBar = objective === "hlm" ? 0.9 : bar - 0.02;
      assert.ok(r.hardAgreement >= hardBar, `hard agreement ${r.hardAgreement} (bar ${hardBar})`);
      s.layer.dispose();
    });
  }
}

test("objectives parse, and a bad one is a clear error", () => {
  assert.deepEqual(parseObjective("fula"), { fula: 1 });
  assert.deepEqual(parseObjective("hlm:1,fula:0.5"), { hlm: 1, fula: 0.5 });
  assert.throws(() => parseObjective("kl"), /unknown objective 'kl'; objectives: hlm, slm, dm, fula/);
});

test("cleanup: a stitched evaluation leaves no tensor behind; disposing frees the model's and the data's", {
  skip,
}, () => {
  const s = new StitchedModel(model, model, "layer2.0");
  s.init("identity");
  evaluateStitch(s, testSet, { normalization: norm }); // warm-up: whatever is made once per process
  const before = settledMemory().liveHandles;
  evaluateStitch(s, testSet, { normalization: norm });
  // Garbage of earlier tests may be finalised meanwhile, so the count can only fall.
  const after = settledMemory().liveHandles;
  assert.ok(after <= before, `${after - before} tensors made by evaluateStitch outlived it`);
  s.layer.dispose();
  const owned = Object.keys(model.stateDict()).length + 4; // the model's tensors, images and labels of two sets
  const held = settledMemory().liveHandles;
  model.dispose();
  disposeDataset(train);
  disposeDataset(testSet);
  const freed = held - settledMemory().liveHandles;
  assert.ok(freed >= owned, `disposing freed ${freed} handles, the model and the data hold ${owned}`);
});
