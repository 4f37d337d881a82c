// Base training on real Fashion-MNIST with narrow ResNet-18s: it learns, a shortcut model
// relies on its marker, PGD raises the loss, and adversarial training raises robust accuracy;
// the recipe (lr x0.1 at 1/3 and 2/3, the per-architecture lr, PGD from the clean image); and the
// robust evaluation's APGD-CE / APGD-DLR on tiny linear models where the truth is known.
// Small on purpose (a few thousand images, width 1/8); real-scale timing is `npm run bench -- train`.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { loadDataset, type Normalization, normalizationFor } from "../data/index.js";
import { apgdAttack, apgdCheckpoints, dlrLoss } from "../eval/apgd.js";
import { apgdFirstStep } from "../eval/config.js";
import { evaluate } from "../eval/evaluate.js";
import { pgdAttack, robustAccuracy } from "../eval/pgd.js";
import { cliCommand } from "../experiments/tasks.js";
import { loadSafetensors } from "../io/safetensors.js";
import { loadCheckpoint } from "../models/checkpoint.js";
import { createModel } from "../models/registry.js";
import { Flatten, Linear, Sequential } from "../nn/layers.js";
import type { Module } from "../nn/module.js";
import { stepScheduleMilestones } from "../nn/schedule.js";
import * as torch from "../torch/index.js";
import { trainConfig } from "../train/config.js";
import { type TrainConfig, type TrainResult, trainModel } from "../train/trainer.js";
import { assertLeavesNothing } from "./helpers/memory.js";
import { runReference, skipUnlessPytorch } from "./helpers/pytorch.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";

type Tensor = torch.Tensor;

// In CI a missing Fashion-MNIST is an error, not a skip (helpers/requirements.ts).
const skip = skipUnlessFashionMnist();
const HAVE_DATA = !skip;

const dir = mkdtempSync(join(tmpdir(), "stitchlab-train-"));
after(() => rmSync(dir, { recursive: true, force: true }));
const base: TrainConfig = {
  ...trainConfig({ arch: "resnet18" }, { dataset: "fashion-mnist" }),
  model: "resnet18",
  modelOptions: { width: 0.125 },
  dataset: "fashion-mnist",
  limit: 2000,
  testLimit: 1000,
  // Two epochs at each lr of the step schedule.
  epochs: 6,
  batchSize: 64,
  lr: 0.05,
  robustEval: null,
};
const EPS = { eps: 16 / 255, step: 4 / 255 };
let clean: TrainResult;

before(async () => {
  if (!HAVE_DATA) return;
  clean = await trainModel(base, join(dir, "clean"));
});

/** Normalised test images and labels of Fashion-MNIST (as the trainer feeds them). */
async function testBatch(limit: number, norm: Normalization): Promise<{ x: Tensor; y: Tensor }> {
  const ds = await loadDataset("fashion-mnist", { split: "test", limit, pad32: true, rgb: true });
  const x = torch.tidy(() =>
    ds.images
      .float()
      .div(255)
      .sub(torch.tensor(norm.mean).reshape(1, 3, 1, 1))
      .div(torch.tensor(norm.std).reshape(1, 3, 1, 1)),
  );
  ds.images.dispose();
  return { x, y: ds.labels };
}

const readLines = (file: string) =>
  readFileSync(file, "utf8")
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));

test("a narrow ResNet-18 learns Fashion-MNIST (6 epochs on 2,000 images), and the run folder is complete", {
  skip,
}, (t) => {
  t.diagnostic(`clean test accuracy ${clean.accuracies.clean} in ${clean.seconds.toFixed(1)} s`);
  assert.ok(clean.accuracies.clean > 0.7, `clean test accuracy ${clean.accuracies.clean}`);
  const lines = readLines(join(dir, "clean", "metrics.jsonl"));
  assert.equal(lines.length, 6);
  assert.ok(lines[5].train_loss < lines[0].train_loss, "the training loss falls");
  const { model, meta } = loadCheckpoint(clean.checkpoint);
  assert.equal(meta.arch, "resnet18");
  assert.equal(meta.dataset, "fashion-mnist");
  assert.equal(meta.accuracies?.clean, clean.accuracies.clean);
  assert.equal(meta.robustEval, undefined, "no robust evaluation was asked for");
  model.dispose();
});

test("the same config and seed give the same model", { skip }, async () => {
  const again = await trainModel({ ...base, epochs: 1, limit: 512 }, join(dir, "again1"));
  const twice = await trainModel({ ...base, epochs: 1, limit: 512 }, join(dir, "again2"));
  const a = loadSafetensors(again.checkpoint).tensors;
  const b = loadSafetensors(twice.checkpoint).tensors;
  for (const k of Object.keys(a)) assert.equal(a[k].sub(b[k]).abs().max().item(), 0, k);
});

test("the step schedule multiplies the lr by 0.1 at 1/3 and 2/3 of training, as the reference's int(epochs/3)", () => {
  assert.deepEqual(trainConfig({ arch: "resnet18" }, { dataset: "fashion-mnist" }).milestones, [1 / 3, 2 / 3]);
  assert.deepEqual(
    stepScheduleMilestones(trainConfig({ arch: "resnet18" }, { dataset: "fashion-mnist" }).milestones, 200),
    [66, 133],
  );
  assert.deepEqual(
    stepScheduleMilestones(trainConfig({ arch: "resnet18" }, { dataset: "fashion-mnist" }).milestones, 30),
    [10, 20],
  );
  assert.deepEqual(
    stepScheduleMilestones(trainConfig({ arch: "resnet18" }, { dataset: "fashion-mnist" }).milestones, 6),
    [2, 4],
  );
  // Stitching uses the same function (test/fidelity.test.ts checks its lr per epoch): 4 epochs drop after 1 and 2.
  assert.deepEqual(
    stepScheduleMilestones(trainConfig({ arch: "resnet18" }, { dataset: "fashion-mnist" }).milestones, 4),
    [1, 2],
  );
  assert.deepEqual(stepScheduleMilestones([0.57], 100), [57], "no floating-point undershoot");
  assert.throws(() => stepScheduleMilestones([1.5], 10), /fractions of training in \[0, 1\]/);
});

test("a 6-epoch run trains at lr, lr/10 and lr/100 for two epochs each", { skip }, async () => {
  const lrs: number[] = [];
  const r = await trainModel({ ...base, limit: 64, testLimit: 32, epochs: 6, lr: 0.05 }, join(dir, "schedule"), (p) => {
    if (p.step === 1) lrs.push(p.lr);
  });
  const expected = [0.05, 0.05, 0.005, 0.005, 0.0005, 0.0005];
  const logged = readLines(join(dir, "schedule", "metrics.jsonl")).map((l) => l.lr);
  for (const trace of [lrs, logged]) {
    assert.equal(trace.length, 6);
    for (const [i, lr] of trace.entries()) assert.ok(Math.abs(lr - expected[i]) < 1e-12, `epoch ${i + 1}: lr ${lr}`);
  }
  // The reported accuracy is the saved model's on the first 32 test images, counted here by hand.
  const { model } = loadCheckpoint(r.checkpoint);
  const { x, y } = await testBatch(32, normalizationFor("fashion-mnist"));
  const right = torch.noGrad(() => model.eval().forward(x).argmax(1).eq(y).sum().item());
  assert.equal(r.accuracies.clean, right / 32, `reported ${r.accuracies.clean}, counted ${right} of 32`);
  torch.dispose([x, y]);
  model.dispose();
});

test("the default lr follows the architecture: 0.1 for ResNets, 0.01 for VGG and ViTs (the reference's configs)", () => {
  const lr = (arch: string) => trainConfig({ arch }, { dataset: "fashion-mnist" }).lr;
  assert.equal(lr("resnet18"), 0.1);
  assert.equal(lr("resnet50"), 0.1);
  assert.equal(lr("vgg16_bn"), 0.01);
  assert.equal(lr("vit_tiny_patch4_32"), 0.01);
  assert.equal(lr("vit_base_patch16_224"), 0.01);
  assert.equal(lr("vit_small_patch16_224"), 0.01);
  assert.equal(trainConfig({ arch: "resnet18", lr: 0.05 }, { dataset: "fashion-mnist" }).lr, 0.05);
});

test("`stitchlab train` on VGG without --lr trains at 0.01; --random-start and --robust-eval-attack reach the run", {
  skip,
}, () => {
  const out = join(dir, "cli-vgg");
  const args = ["train", "--model", "vgg16_bn", "--width", "0.125", "--dataset", "fashion-mnist", "--limit", "64"];
  args.push("--test-limit", "32", "--epochs", "1", "--batch-size", "32", "--out", out, "--adversarial");
  args.push("--pgd-steps", "1", "--random-start", "--robust-eval-attack", "pgd", "--robust-eval-steps", "2");
  const r = spawnSync(process.execPath, cliCommand(...args), { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  const cfg = JSON.parse(readFileSync(join(out, "config.json"), "utf8"));
  assert.equal(cfg.lr, 0.01);
  assert.deepEqual(cfg.milestones, [1 / 3, 2 / 3]);
  assert.equal(cfg.adversarial.randomStart, true);
  const meta = JSON.parse(readFileSync(join(out, "model.json"), "utf8"));
  assert.equal(meta.robustEval.attack, "pgd");
  assert.deepEqual(meta.robustEval.attacks, ["pgd"]);
  assert.equal(meta.robustEval.steps, 2);
  assert.equal(meta.accuracies.robust, meta.accuracies.robust_pgd);
  assert.equal(meta.adversarial.randomStart, true);
});

// ---- attacks on tiny linear classifiers: 3 x 4 x 4 images, 5 classes ----

const NORM: Normalization = { mean: [0.5, 0.4, 0.6], std: [0.25, 0.2, 0.3] };
const normalise = (pixels: Tensor) =>
  pixels.sub(torch.tensor(NORM.mean).reshape(1, 3, 1, 1)).div(torch.tensor(NORM.std).reshape(1, 3, 1, 1));
const toPixels = (x: Tensor) =>
  x.mul(torch.tensor(NORM.std).reshape(1, 3, 1, 1)).add(torch.tensor(NORM.mean).reshape(1, 3, 1, 1));

function linearModel(seed: number): Module {
  torch.manualSeed(seed);
  return new Sequential(new Flatten(), new Linear(48, 5));
}

test("PGD starts from the clean image by default, deterministically: its first step is sign(grad) at x", () => {
  const model = linearModel(0);
  torch.tidy(() => {
    torch.manualSeed(1);
    const x = normalise(torch.rand([16, 3, 4, 4]));
    const y = torch.randint(0, 5, [16]);
    const opts = { eps: 8 / 255, step: 2 / 255, steps: 1, normalization: NORM };
    torch.manualSeed(2);
    const a = pgdAttack(model, x, y, opts);
    torch.manualSeed(3);
    const b = pgdAttack(model, x, y, { ...opts, randomStart: false });
    assert.equal(a.sub(b).abs().max().item(), 0, "the default is no random start, and it draws nothing");
    // By hand: x + step * sign(d CE / dx) per channel, clamped to the ball and the pixel range.
    const xg = x.detach().requiresGrad_(true);
    const [g] = torch.grad(torch.crossEntropy(model.forward(xg), y), xg);
    const pixels = toPixels(x);
    const expected = normalise(
      pixels
        .add(g!.sign().mul(2 / 255))
        .clamp(0, 1)
        .clamp(pixels.sub(8 / 255), pixels.add(8 / 255)),
    );
    assert.ok(a.sub(expected).abs().max().item() < 1e-5, "first step from x");
    torch.manualSeed(2);
    const r1 = pgdAttack(model, x, y, { ...opts, steps: 0, randomStart: true });
    torch.manualSeed(3);
    const r2 = pgdAttack(model, x, y, { ...opts, steps: 0, randomStart: true });
    assert.ok(r1.sub(r2).abs().max().item() > 0, "randomStart: true draws a start point");
    assert.ok(toPixels(r1).sub(pixels).abs().max().item() <= 8 / 255 + 1e-6);
  });
});

test("PGD and APGD leave batch-norm running statistics alone and give the model back in the mode it was in", () => {
  torch.manualSeed(12);
  const model = createModel("resnet18", { width: 0.125 });
  const stats = () =>
    Object.entries(model.stateDict())
      .filter(([k]) => /running_(mean|var)$/.test(k))
      .map(([k, t]) => [k, Float32Array.from(t.toTypedArray() as Float32Array)] as const);
  const modes = () => [...model.namedModules()].map(([, m]) => m.training);
  torch.tidy(() => {
    torch.manualSeed(13);
    const x = normalise(torch.rand([8, 3, 32, 32]));
    const y = torch.randint(0, 10, [8]);
    const start = stats();
    assert.equal(start.length, 2 * 20, "a ResNet-18 has 20 batch norms");
    for (const training of [true, false]) {
      model.train(training);
      const adv = pgdAttack(model, x, y, { eps: 8 / 255, step: 2 / 255, steps: 2, normalization: NORM });
      assert.ok(adv.sub(x).abs().max().item() > 0, "the attack moved the images");
      apgdAttack(model, x, y, {
        eps: 8 / 255,
        steps: 3,
        stepSize: apgdFirstStep(8 / 255),
        loss: "ce",
        normalization: NORM,
      });
      assert.deepEqual(
        stats(),
        start,
        `running statistics after the attacks on a model in ${training ? "train" : "eval"} mode`,
      );
      assert.ok(
        modes().every((m) => m === training),
        `every module is back in ${training ? "train" : "eval"} mode`,
      );
    }
    // The check can fail: one forward pass in training mode moves the statistics.
    model.train();
    torch.noGrad(() => model.forward(x));
    assert.notDeepEqual(stats(), start);
  });
  model.dispose();
});

test("the DLR loss: hand-computed values, invariance to shifting and scaling the logits", () => {
  torch.tidy(() => {
    // z = (1, 4, 2, 3): for y = 0, -(1 - 4) / (4 - 2) = 1.5; for y = 1 (the top class), -(4 - 3) / (4 - 2) = -0.5;
    // for y = 3, -(3 - 4) / (4 - 2) = 0.5.
    const z = torch.tensor([
      [1, 4, 2, 3],
      [1, 4, 2, 3],
      [1, 4, 2, 3],
    ]);
    const y = torch.tensor([0, 1, 3], { dtype: "int64" });
    const v = dlrLoss(z, y).tolist() as number[];
    for (const [i, e] of [1.5, -0.5, 0.5].entries()) assert.ok(Math.abs(v[i] - e) < 1e-6, `${v[i]} vs ${e}`);
    const w = dlrLoss(z.mul(3).add(7), y).tolist() as number[];
    for (const [i, e] of v.entries()) assert.ok(Math.abs(w[i] - e) < 1e-5);
    assert.throws(() => dlrLoss(torch.tensor([[1, 2]]), torch.tensor([0], { dtype: "int64" })), /at least 3 classes/);
  });
});

test("the DLR loss and its gradient match PyTorch's", { skip: skipUnlessPytorch() }, () => {
  torch.manualSeed(4);
  const z = torch.randn([64, 10]).mul(3);
  const y = torch.randint(0, 10, [64]);
  // Each image's true class is the top one for some: the max over the others is then the second.
  const oneHot = torch.arange(0, 10).reshape(1, 10).eq(y.reshape(64, 1)).float();
  const zt = torch.where(torch.arange(0, 64).lt(16).reshape(64, 1), z.add(oneHot.mul(20)), z);
  const zg = zt.detach().requiresGrad_(true);
  const ours = dlrLoss(zg, y);
  const [grad] = torch.grad(ours.sum(), zg);
  const dlr =
    "(lambda s, i: -(z.gather(1, y[:, None])[:, 0] - torch.where(i[:, 0] == y, s[:, 1], s[:, 0])) / (s[:, 0] - s[:, 2] + 1e-12))(*z.sort(1, descending=True))";
  const ref = runReference(
    [
      { name: "dlr", expr: dlr, inputs: ["z", "y"] },
      {
        name: "grad",
        expr: `(lambda z: torch.autograd.grad(${dlr}.sum(), z)[0])(z.clone().requires_grad_())`,
        inputs: ["z", "y"],
      },
    ],
    { "dlr/z": zt, "dlr/y": y, "grad/z": zt, "grad/y": y },
  );
  assert.deepEqual(ref.errors, {});
  assert.ok(ours.detach().sub(ref.outputs.dlr).abs().max().item() < 1e-5);
  assert.ok(grad!.sub(ref.outputs.grad).abs().max().item() < 1e-5);
});

test("APGD's checkpoints are the paper's: p_1 = 0.22, steps shrinking by 0.03 to at least 0.06", () => {
  assert.deepEqual(apgdCheckpoints(100), [0, 22, 41, 57, 70, 80, 87, 93, 99]);
  assert.deepEqual(apgdCheckpoints(20), [0, 5, 9, 12, 14, 16, 18, 19, 20]);
  assert.deepEqual(apgdCheckpoints(5), [0, 2, 3, 4, 5], "coinciding checkpoints count once");
});

test("APGD halves its step at every checkpoint when the loss cannot rise, and stays at x without a random start", () => {
  const model = linearModel(0);
  torch.noGrad(() => {
    for (const p of model.parameters()) p.zero_(); // constant logits: the loss is flat
  });
  torch.tidy(() => {
    const x = normalise(torch.rand([8, 3, 4, 4]));
    const y = torch.zeros([8], { dtype: "int64" }); // argmax of equal logits is class 0
    for (const loss of ["ce", "dlr"] as const) {
      const r = apgdAttack(model, x, y, {
        eps: 8 / 255,
        steps: 100,
        stepSize: apgdFirstStep(8 / 255),
        loss,
        randomStart: false,
        normalization: NORM,
      });
      // 8 checkpoints after the start: 2 eps / 2^8.
      assert.ok(
        r.stepSize
          .sub((2 * 8) / 255 / 256)
          .abs()
          .max()
          .item() < 1e-9,
        `${loss}: ${r.stepSize.tolist()}`,
      );
      assert.equal(r.adv.sub(x).abs().max().item(), 0, `${loss}: the best point is the start, x`);
      assert.ok(r.robust.all().item(), `${loss}: constant logits of the right class`);
    }
  });
});

/**
 * A linear classifier's exact robust accuracy under an L-inf ball that the pixel range does not
 * cut: image i is robust iff for every j != y, (w_y - w_j) x + b_y - b_j > eps * sum |w_y - w_j| / std.
 */
function exactLinearRobust(model: Module, x: Tensor, y: Tensor, eps: number): Tensor {
  return torch.tidy(() =>
    torch.noGrad(() => {
      const [w] = model.parameters();
      const logits = model.forward(x);
      const perInput = torch.tensor(NORM.std).reshape(3, 1).expand(3, 16).reshape(1, 48);
      const wy = w.indexSelect(0, y);
      const margins = [];
      for (let j = 0; j < 5; j++) {
        const m = logits.gather(1, y.reshape(-1, 1)).reshape(-1).sub(logits.select(1, j));
        const l1 = wy.sub(w.select(0, j).reshape(1, 48)).abs().div(perInput).sum(1).mul(eps);
        margins.push(torch.where(y.eq(j), Number.POSITIVE_INFINITY, m.sub(l1)));
      }
      return torch.stack(margins, 1).min(1)[0].gt(0);
    }),
  );
}

test("APGD on linear classifiers: inside the ball and the pixel range, never above clean accuracy, close to the exact robust accuracy", (t) => {
  const model = linearModel(5);
  torch.tidy(() => {
    torch.manualSeed(6);
    const n = 400;
    // Pixels within [0.2, 0.8]: the ball of 0.03 never meets the pixel range, so exact robustness is closed-form.
    const x = normalise(torch.rand([n, 3, 4, 4]).mul(0.6).add(0.2));
    const pred = torch.noGrad(() => model.forward(x).argmax(1));
    // A quarter of the labels wrong: those images are not robust whatever the attack does.
    const y = torch.where(torch.arange(0, n).lt(n / 4), torch.call("remainder.Scalar", pred.add(1), 5) as Tensor, pred);
    const exact = exactLinearRobust(model, x, y, 0.03).logicalAnd(pred.eq(y));
    const robust: Record<string, Tensor> = {};
    for (const loss of ["ce", "dlr"] as const) {
      torch.manualSeed(7);
      const r = apgdAttack(model, x, y, {
        eps: 0.03,
        steps: 100,
        stepSize: apgdFirstStep(0.03),
        loss,
        normalization: NORM,
      });
      robust[loss] = r.robust;
      assert.ok(toPixels(r.adv).sub(toPixels(x)).abs().max().item() <= 0.03 + 1e-6, `${loss}: within eps`);
      assert.equal(r.robust.logicalAnd(pred.ne(y)).sum().item(), 0, `${loss}: a misclassified image is never robust`);
      assert.equal(
        exact.logicalAnd(r.robust.logicalNot()).sum().item(),
        0,
        `${loss}: every image it breaks is breakable`,
      );
      const advRight = torch.noGrad(() => model.forward(r.adv).argmax(1).eq(y));
      assert.equal(advRight.ne(r.robust).sum().item(), 0, `${loss}: the returned examples are the ones that break`);
    }
    const worst = robust.ce.logicalAnd(robust.dlr);
    const acc = (b: Tensor) => b.sum().item() / n;
    t.diagnostic(
      `linear, eps 0.03: clean ${acc(pred.eq(y))}, exact robust ${acc(exact)}, APGD-CE ${acc(robust.ce)}, APGD-DLR ${acc(robust.dlr)}, worst ${acc(worst)}`,
    );
    assert.ok(acc(worst) <= acc(exact) + 0.02, `APGD worst case ${acc(worst)} vs exact ${acc(exact)}`);
  });
});

test("APGD stays inside the pixel range where the ball crosses it", () => {
  const model = linearModel(8);
  torch.tidy(() => {
    torch.manualSeed(9);
    // Half the pixels at 0 or 1 exactly.
    const u = torch.rand([64, 3, 4, 4]);
    const pixels = torch.where(torch.rand([64, 3, 4, 4]).lt(0.5), u.round(), u);
    const x = normalise(pixels);
    const y = torch.randint(0, 5, [64]);
    for (const loss of ["ce", "dlr"] as const) {
      const r = apgdAttack(model, x, y, {
        eps: 0.1,
        steps: 20,
        stepSize: apgdFirstStep(0.1),
        loss,
        normalization: NORM,
      });
      const p = toPixels(r.adv);
      assert.ok(p.min().item() >= -1e-6 && p.max().item() <= 1 + 1e-6, `${loss}: pixel range`);
      assert.ok(p.sub(pixels).abs().max().item() <= 0.1 + 1e-6, `${loss}: ball`);
    }
  });
});

test("PGD raises the loss of the trained model", { skip }, async () => {
  const { model } = loadCheckpoint(clean.checkpoint);
  const norm = normalizationFor("fashion-mnist");
  const { x: inputs, y } = await testBatch(256, norm);
  torch.tidy(() => {
    const xs = torch.tensor(norm.std).reshape(1, 3, 1, 1);
    model.eval();
    const before = torch.noGrad(() => torch.crossEntropy(model.forward(inputs), y).item());
    const adv = pgdAttack(model, inputs, y, { ...EPS, steps: 5, normalization: norm });
    const after = torch.noGrad(() => torch.crossEntropy(model.forward(adv), y).item());
    assert.ok(after > before * 1.5, `loss ${before} -> ${after}`);
    const linf = adv.sub(inputs).mul(xs).abs().max().item();
    assert.ok(linf <= EPS.eps + 1e-5, `perturbation ${linf} within eps`);
  });
  const test1 = await loadDataset("fashion-mnist", { split: "test", limit: 256, pad32: true, rgb: true });
  assert.ok(evaluate(model, test1, { normalization: norm }).accuracy > 0.6);
  model.dispose();
});

test("on a trained ResNet, APGD-CE breaks at least as many images as PGD with the same budget", { skip }, async (t) => {
  const { model } = loadCheckpoint(clean.checkpoint);
  model.eval();
  const norm = normalizationFor("fashion-mnist");
  const { x, y } = await testBatch(256, norm);
  torch.tidy(() => {
    const cleanAcc = torch.noGrad(() => model.forward(x).argmax(1).eq(y).sum().item()) / 256;
    for (const eps of [4 / 255, 8 / 255]) {
      const steps = 10;
      torch.manualSeed(10);
      const a = apgdAttack(model, x, y, { eps, steps, stepSize: apgdFirstStep(eps), loss: "ce", normalization: norm });
      const apgd = a.robust.sum().item() / 256;
      // PGD's usual step for a short budget: 2.5 eps / steps.
      const adv = pgdAttack(model, x, y, { eps, step: (2.5 * eps) / steps, steps, normalization: norm });
      const pgd = torch.noGrad(() => model.forward(adv).argmax(1).eq(y).sum().item()) / 256;
      t.diagnostic(`eps ${eps * 255}/255, ${steps} steps: clean ${cleanAcc}, PGD ${pgd}, APGD-CE ${apgd}`);
      assert.ok(apgd <= pgd, `APGD-CE ${apgd} vs PGD ${pgd}`);
      assert.ok(apgd <= cleanAcc);
    }
  });
  model.dispose();
});

test("adversarial training raises robust accuracy over a clean model of the same size", { skip }, async (t) => {
  const adv = await trainModel(
    {
      ...base,
      adversarial: { ...EPS, steps: 3, fraction: 0.5, randomStart: false },
      robustEval: { attack: "apgd", eps: EPS.eps, steps: 5, stepSize: 2 * EPS.eps },
    },
    join(dir, "adversarial"),
  );
  const { model, meta } = loadCheckpoint(adv.checkpoint);
  model.dispose();
  const norm = normalizationFor("fashion-mnist");
  const test1 = await loadDataset("fashion-mnist", { split: "test", limit: 1000, pad32: true, rgb: true });
  const cleanModel = loadCheckpoint(clean.checkpoint).model;
  const cleanRobust = robustAccuracy(cleanModel, test1, { ...EPS, steps: 5, normalization: norm });
  cleanModel.dispose();
  const a = adv.accuracies;
  t.diagnostic(
    `eps 16/255, 5 iterations: adversarial model APGD-CE ${a.robust_apgd_ce}, APGD-DLR ${a.robust_apgd_dlr}, worst ${a.robust} (clean ${a.clean}); clean model PGD ${cleanRobust}`,
  );
  assert.deepEqual(adv.robustEval, {
    attack: "apgd",
    attacks: ["apgd-ce", "apgd-dlr"],
    eps: EPS.eps,
    steps: 5,
    randomStart: true,
    step: 2 * EPS.eps,
  });
  assert.deepEqual(meta.robustEval, adv.robustEval, "the checkpoint says which attack made its robust numbers");
  assert.deepEqual(meta.accuracies, a);
  assert.ok(a.robust <= Math.min(a.robust_apgd_ce, a.robust_apgd_dlr, a.clean), "worst case per image");
  assert.ok(a.robust > cleanRobust + 0.1, `robust accuracy: adversarially trained ${a.robust}, clean ${cleanRobust}`);
});

test("a Pixel+Loc shortcut model relies on its marker: high on marked images, far lower when colours are rolled", {
  skip,
}, async (t) => {
  const r = await trainModel({ ...base, shortcut: "pixel-loc" }, join(dir, "shortcut"));
  const { marked, rolled } = r.accuracies;
  t.diagnostic(`shortcut model: clean ${r.accuracies.clean}, marked ${marked}, rolled ${rolled}`);
  assert.ok(marked > 0.85, `marked accuracy ${marked}`);
  assert.ok(marked - rolled > 0.15, `marked ${marked} vs rolled ${rolled}`);
});

test("stitchlab train refuses what an experiment file refuses, naming the flag, before any work", () => {
  const out = join(dir, "flags");
  mkdirSync(out);
  const base = ["train", "--model", "resnet18", "--dataset", "fashion-mnist", "--out", join(out, "m")];
  for (const [flags, message] of [
    // Each flag's parser checks its value with the key's schema (cli/schema-flags.ts); commander names the flag.
    [["--epochs", "-1"], /option '--epochs <n>' argument '-1' is invalid\. Too small/],
    [["--lr", "0"], /option '--lr <x>' argument '0' is invalid\. Too small/],
    [["--width", "0"], /option '--width <x>' argument '0' is invalid\. Too small/],
    [
      ["--adversarial", "--eps", "8"],
      /'--eps <x>' argument '8' is invalid\. pixel units are in \[0, 1\]; did you mean 8\/255\?/,
    ],
    [["--adversarial", "--eps", "-1"], /'--eps <x>' argument '-1' is invalid\. Too small/],
    [["--adversarial", "--pgd-steps", "0"], /'--pgd-steps <n>' argument '0' is invalid\. Too small/],
    // Typos with no upper bound used to run until killed; a value that is no number names its flag.
    [["--epochs", "1e12"], /'--epochs <n>' argument '1e12' is invalid\. at most 10000 epochs/],
    [["--epochs", "abc"], /option '--epochs <n>' argument 'abc' is invalid\. expected an integer/],
    [["--adversarial", "--eps", "8/0"], /option '--eps <x>' argument '8\/0' is invalid\. expected a finite fraction/],
  ] as const) {
    const r = spawnSync(process.execPath, cliCommand(...base, ...flags), { encoding: "utf8" });
    assert.equal(r.status, 1, `${flags.join(" ")}: ${r.stdout}`);
    assert.match(r.stderr, message, flags.join(" "));
    assert.ok(!existsSync(join(out, "m")), `${flags.join(" ")}: nothing is written`);
  }
  // A folder that holds a model is not trained into again without --force.
  mkdirSync(join(out, "used"));
  writeFileSync(join(out, "used", "model.safetensors"), "x");
  const r = spawnSync(
    process.execPath,
    cliCommand("train", "--model", "resnet18", "--dataset", "fashion-mnist", "--out", join(out, "used")),
    { encoding: "utf8" },
  );
  assert.equal(r.status, 1);
  assert.match(r.stderr, /is not empty \(a model trained before\?\): give a new folder, or --force/);
  assert.equal(readFileSync(join(out, "used", "model.safetensors"), "utf8"), "x");
});

test("a diverging run fails with the step it diverged at, and frees its model, data and optimiser", {
  skip,
}, async () => {
  const cfg: TrainConfig = { ...base, limit: 256, testLimit: 64, epochs: 1, lr: 1e30 };
  // A first run warms up whatever is made once per process (the dataset cache, kernels).
  await assert.rejects(trainModel(cfg, join(dir, "diverge0")), /training diverged: loss is (NaN|Infinity)/);
  await assertLeavesNothing(
    () =>
      assert.rejects(
        trainModel(cfg, join(dir, "diverge1")),
        /training diverged: loss is (NaN|Infinity) at epoch 1, step \d+ \(try a smaller --lr\)/,
      ),
    "the failed training",
  );
});

test("base training drops the last partial batch, as the reference's loader (drop_last=True); too few images for one batch is an error", {
  skip,
}, async () => {
  const steps: number[] = [];
  const cfg = { ...base, modelOptions: { width: 0.0625 }, limit: 100, testLimit: 32, epochs: 1, batchSize: 32 };
  await trainModel(cfg, join(dir, "drop-last"), (p) => steps.push(p.steps));
  // 100 images in batches of 32: three full batches, the 4 left over are dropped.
  assert.deepEqual([...new Set(steps)], [3]);
  assert.equal(steps.length, 3);
  await assert.rejects(
    trainModel({ ...cfg, limit: 20 }, join(dir, "no-batch")),
    /20 training images make no full batch of 32/,
  );
});
