// SimCLR, the cross-supervision front: the NT-Xent loss and the colour jitters against PyTorch
// and torchvision on the same inputs, and a SimCLR model trained end to end whose backbone the
// second phase leaves alone.
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { COLOR_JITTERS, colorDistort, colorJitter } from "../data/color.js";
import { loadDataset, normalizationFor, Rng } from "../data/index.js";
import { loadCheckpoint } from "../models/checkpoint.js";
import { createModel } from "../models/registry.js";
import { greyStem } from "../nn/init.js";
import * as torch from "../torch/index.js";
import { trainConfig } from "../train/config.js";
import { ntXentLoss, pretrainSimclr } from "../train/simclr.js";
import { trainModel } from "../train/trainer.js";
import { runCli } from "./helpers/cli.js";
import { runReference, skipUnlessPytorch, skipUnlessTorchvision } from "./helpers/pytorch.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";

const skip = skipUnlessFashionMnist();
const tmp = mkdtempSync(join(tmpdir(), "stitchlab-simclr-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

test("NT-Xent equals the reference's infoNCE_loss in PyTorch on the same embeddings", {
  skip: skipUnlessPytorch(),
}, () => {
  torch.manualSeed(3);
  const z = torch.keep(torch.randn([8, 16]));
  // training/losses.py, written out: normalise, cosine over the temperature, -inf on the
  // diagonal, cross-entropy towards the other view (i + N, i - N).
  const expr =
    "(lambda x: F.cross_entropy((x @ x.T / 0.5).fill_diagonal_(float('-inf')), torch.cat([torch.arange(4) + 4, torch.arange(4)])))(F.normalize(z))";
  const ref = runReference([{ name: "nt", expr, inputs: ["z"] }], { "nt/z": z });
  assert.deepEqual(ref.errors, {});
  const ours = ntXentLoss(z, 0.5).item();
  const theirs = ref.outputs.nt?.item() ?? Number.NaN;
  assert.ok(Math.abs(ours - theirs) < 1e-5, `${ours} vs ${theirs}`);
  // An odd number of rows has no pairs of views.
  assert.throws(() => ntXentLoss(torch.randn([3, 4]), 0.5), /two views of at least 2 images/);
  z.dispose();
});

test("the colour jitters equal torchvision's adjust_brightness, _contrast, _saturation and _hue", {
  skip: skipUnlessTorchvision(),
}, () => {
  torch.manualSeed(4);
  const x = torch.keep(torch.rand([4, 3, 8, 8]));
  const factor: Record<(typeof COLOR_JITTERS)[number], number> = {
    brightness: 1.3,
    contrast: 0.7,
    saturation: 1.35,
    hue: 0.07,
  };
  const tvf = "__import__('torchvision.transforms.functional', fromlist=['f'])";
  const ref = runReference(
    COLOR_JITTERS.map((j) => ({ name: j, expr: `${tvf}.adjust_${j}(x, ${factor[j]})`, inputs: ["x"] })),
    Object.fromEntries(COLOR_JITTERS.map((j) => [`${j}/x`, x])),
  );
  assert.deepEqual(ref.errors, {});
  for (const j of COLOR_JITTERS) {
    const ours = colorJitter(x, j, torch.full([4, 1, 1, 1], factor[j]));
    const diff = ours
      .sub(ref.outputs[j] as torch.Tensor)
      .abs()
      .max()
      .item();
    assert.ok(diff < 1e-5, `${j}: max difference ${diff}`);
    ours.dispose();
  }
  // The whole distortion: seeded, in [0, 1], and it changes some images and leaves others.
  const a = colorDistort(x, new Rng(1));
  const b = colorDistort(x, new Rng(1));
  assert.equal(a.sub(b).abs().max().item(), 0, "the same draws give the same images");
  assert.ok(a.min().item() >= 0 && a.max().item() <= 1);
  torch.dispose([a, b, x]);
});

test("SimCLR pre-trains the backbone (the loss falls), then trains the classifier alone; the CLI refuses a bad temperature", {
  skip,
}, async () => {
  const train = await loadDataset("fashion-mnist", { split: "train", limit: 256, pad32: true, rgb: true });
  torch.manualSeed(0);
  const model = createModel("resnet18", { width: 0.125 });
  const fcBefore = model.head.parameters().map((p) => p.clone());
  // A constant lr over 5 short epochs: the reference's steps would cut it after the first.
  const losses = pretrainSimclr(model, train, {
    epochs: 5,
    temperature: 0.5,
    batchSize: 64,
    lr: 0.1,
    momentum: 0.9,
    nesterov: true,
    weightDecay: 1e-4,
    milestones: [],
    lrDecay: 0.1,
    seed: 0,
    normalization: normalizationFor("fashion-mnist"),
    device: "cpu",
  });
  assert.equal(losses.length, 5);
  // Chance is ln(127) = 4.84 for 64 images (127 candidates per view).
  assert.ok(
    (losses[4] as number) < (losses[0] as number) - 0.1,
    `NT-Xent per epoch ${losses.map((l) => l.toFixed(3))}`,
  );
  for (const [i, p] of model.head.parameters().entries())
    assert.equal(
      p
        .sub(fcBefore[i] as torch.Tensor)
        .abs()
        .max()
        .item(),
      0,
      "pre-training leaves the classifier",
    );
  torch.dispose(fcBefore);
  model.dispose();
  train.images.dispose();
  train.labels.dispose();

  // The whole recipe: pre-training, then the classifier on the frozen backbone.
  const r = await trainModel(
    {
      ...trainConfig({ arch: "resnet18" }, { dataset: "fashion-mnist" }),
      model: "resnet18",
      modelOptions: { width: 0.125 },
      dataset: "fashion-mnist",
      limit: 512,
      testLimit: 200,
      epochs: 2,
      batchSize: 64,
      lr: 0.1,
      robustEval: null,
      simclr: { epochs: 2, temperature: 0.5 },
    },
    join(tmp, "simclr"),
  );
  const { model: trained, meta } = loadCheckpoint(r.checkpoint);
  assert.equal(meta.method, "simclr");
  assert.deepEqual(meta.simclr, { epochs: 2, temperature: 0.5 });
  // Better than chance beyond the test set's sampling error: a classifier that learnt nothing scores
  // 0.1 +- sqrt(0.1 * 0.9 / 200) = 0.021 on 200 images; three standard errors above that is 0.164.
  // (A fixed 0.2 held on one CPU and failed at 0.195 on another: two epochs on 512 images learn
  // little, and how little depends on the CPU's rounding.)
  const chance = 0.1;
  const bar = chance + 3 * Math.sqrt((chance * (1 - chance)) / 200);
  assert.ok(
    (r.accuracies.clean ?? 0) > bar,
    `a linear classifier on SimCLR features: ${r.accuracies.clean}, bar ${bar}`,
  );
  // The classifier phase left the pre-trained convolutions as they were: the same pre-training
  // done here again gives the checkpoint's weights exactly.
  const again = await loadDataset("fashion-mnist", { split: "train", limit: 512, pad32: true, rgb: true });
  torch.manualSeed(0);
  const twin = createModel("resnet18", { numClasses: 10, imageSize: 32, width: 0.125 });
  // As the trainer starts a model of grey data (train/config.ts greyStem).
  greyStem(twin);
  pretrainSimclr(twin, again, {
    epochs: 2,
    temperature: 0.5,
    batchSize: 64,
    lr: 0.1,
    momentum: trainConfig({ arch: "resnet18" }, { dataset: "fashion-mnist" }).momentum,
    nesterov: trainConfig({ arch: "resnet18" }, { dataset: "fashion-mnist" }).nesterov,
    weightDecay: trainConfig({ arch: "resnet18" }, { dataset: "fashion-mnist" }).weightDecay,
    milestones: trainConfig({ arch: "resnet18" }, { dataset: "fashion-mnist" }).milestones,
    lrDecay: trainConfig({ arch: "resnet18" }, { dataset: "fashion-mnist" }).lrDecay,
    seed: 0,
    normalization: normalizationFor("fashion-mnist"),
    device: "cpu",
  });
  for (const k of ["conv1.weight", "layer2.1.conv2.weight", "layer4.1.conv2.weight"]) {
    const d = (twin.stateDict()[k] as torch.Tensor)
      .sub(trained.stateDict()[k] as torch.Tensor)
      .abs()
      .max()
      .item();
    assert.equal(d, 0, `${k} changed in the classifier phase by ${d}`);
  }
  twin.dispose();
  again.images.dispose();
  again.labels.dispose();
  trained.dispose();

  const trainCli = (...flags: string[]) =>
    runCli(["train", "--model", "resnet18", "--dataset", "fashion-mnist", ...flags]);
  const bad = trainCli("--method", "simclr", "--temperature", "0", "--out", join(tmp, "bad"));
  assert.equal(bad.status, 1);
  assert.match(bad.stderr, /'--temperature <x>' argument '0' is invalid\. Too small/);
  const noMethod = trainCli("--method", "byol", "--out", join(tmp, "bad2"));
  assert.equal(noMethod.status, 1);
  assert.match(
    noMethod.stderr,
    /'--method <name>' argument 'byol' is invalid\. Allowed choices are supervised, simclr/,
  );
});
