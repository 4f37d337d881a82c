// The stitching protocol as the reference code runs it (issue 11): batch-norm "adapt" in standard
// runs, the marked test set of a marked pair, each network's own input normalisation, the
// least-squares start drawn at random from the whole split, the dropped last batch, and the
// identical pair's soft error consistency of 1.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, test } from "node:test";
import {
  CIFAR10_NORMALIZATION,
  type Dataset,
  disposeDataset,
  epochOrder,
  FASHION_MNIST_NORMALIZATION,
  markerColors,
  normalize,
  pixelScale,
  planMarkers,
} from "../data/index.js";
import { type IrisTask, planExperiment, type StitchTask, type TrainTask } from "../experiments/plan.js";
import { parseExperiment, readExperiment } from "../experiments/spec.js";
import { torchSave } from "../io/torchsave.js";
import { saveCheckpoint } from "../models/checkpoint.js";
import { createModel } from "../models/registry.js";
import type { StitchableModel } from "../models/stitchable.js";
import { BatchNorm2d } from "../nn/layers.js";
import { inEvalMode } from "../nn/module.js";
import { STEP_SCHEDULE_FRACTIONS, stepScheduleMilestones } from "../nn/schedule.js";
import { evaluateStitch } from "../stitch/evaluate.js";
import { IRI_STEP_SIZE_224 } from "../stitch/iris.js";
import { loadSource, runStitch, type StitchConfig } from "../stitch/jobs.js";
import { StitchedModel } from "../stitch/stitched.js";
import { trainStitch } from "../stitch/train.js";
import * as torch from "../torch/index.js";
import { skipUnlessPytorch } from "./helpers/pytorch.js";
import { PYTHON, skipUnlessFashionMnist } from "./helpers/requirements.js";
import { smallStitchConfig, stitchTrainOptions } from "./helpers/stitch.js";

const skip = skipUnlessFashionMnist();
const tmp = mkdtempSync(join(tmpdir(), "stitchlab-fidelity-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

function tiny(seed: number): StitchableModel {
  torch.manualSeed(seed);
  return createModel("resnet18", { width: 0.125, numClasses: 10 });
}

/** Every BN buffer of a model, copied, by name. */
function bnStats(m: StitchableModel): Map<string, Float32Array> {
  const out = new Map<string, Float32Array>();
  const state = m.stateDict();
  for (const [name, mod] of m.namedModules())
    if (mod instanceof BatchNorm2d)
      for (const b of ["running_mean", "running_var"])
        out.set(`${name}.${b}`, Float32Array.from(state[`${name}.${b}`].toTypedArray() as Float32Array));
  return out;
}

const changed = (a: Float32Array, b: Float32Array) => a.some((v, i) => Math.abs(v - b[i]) > 1e-7);

function randomImages(n: number, seed: number): Dataset {
  torch.manualSeed(seed);
  return {
    images: torch.randint(0, 256, [n, 3, 32, 32], { dtype: "uint8" }),
    labels: torch.randint(0, 10, [n], { dtype: "int64" }),
    classes: Array.from({ length: 10 }, (_, i) => `c${i}`),
    name: "random",
  };
}

/**
 * A and B, B's own copy that the stitched model runs after the point (its tail), T at layer2.0,
 * 64 random images, and `stats()`: every batch-norm statistic of the three, copied.
 */
function stitchedWithTail() {
  const front = tiny(0);
  const back = tiny(1);
  const tail = tiny(1);
  const point = "layer2.0";
  const s = new StitchedModel(front, back, point, point, { tail });
  const data = randomImages(64, 3);
  return {
    front,
    back,
    tail,
    point,
    s,
    data,
    stats: () => ({ front: bnStats(front), back: bnStats(back), tail: bnStats(tail) }),
    dispose: () => {
      disposeDataset(data);
      for (const m of [front, back, tail, s.layer]) m.dispose();
    },
  };
}

test("batch-norm 'adapt': A's statistics and B's after the point adapt in the stitched copy; B itself never changes", () => {
  const { front, back, point, s, data, stats, dispose } = stitchedWithTail();
  const before = stats();
  trainStitch(
    s,
    data,
    data,
    stitchTrainOptions({
      objective: { slm: 1 },
      normalization: CIFAR10_NORMALIZATION,
      epochs: 1,
      batchSize: 32,
      bnMode: "adapt",
      initImages: 32,
    }),
  );
  const after = stats();
  // A: every BN up to the point adapted.
  for (const [k, v] of after.front)
    if (k.startsWith("bn1") || k.startsWith("layer1") || k.startsWith("layer2.0"))
      assert.ok(changed(v, before.front.get(k) as Float32Array), `front ${k} adapted`);
  // The stitched copy of B: its BN after the point adapted, before the point untouched.
  for (const [k, v] of after.tail) {
    const after_ = k.startsWith("layer2.1") || k.startsWith("layer3") || k.startsWith("layer4");
    assert.equal(changed(v, before.tail.get(k) as Float32Array), after_, `tail ${k}`);
  }
  // B, which gives the targets and the reference outputs: untouched everywhere.
  for (const [k, v] of after.back) assert.ok(!changed(v, before.back.get(k) as Float32Array), `back ${k} untouched`);
  // "adapt" refuses a stitched model without its own copy of B.
  assert.throws(
    () =>
      trainStitch(
        new StitchedModel(front, back, point),
        data,
        data,
        stitchTrainOptions({
          objective: { slm: 1 },
          normalization: CIFAR10_NORMALIZATION,
          epochs: 1,
          bnMode: "adapt",
        }),
      ),
    /needs the stitched model's own copy of B/,
  );
  dispose();
});

for (const bnMode of ["batch", "eval"] as const) {
  test(`batch-norm '${bnMode}': training T leaves every running statistic of A, B and B's stitched copy untouched`, () => {
    const { front, s, data, stats, dispose } = stitchedWithTail();
    const before = stats();
    const weight = Float32Array.from(s.layer.weight.toTypedArray() as Float32Array);
    trainStitch(
      s,
      data,
      data,
      stitchTrainOptions({
        objective: { slm: 1 },
        normalization: CIFAR10_NORMALIZATION,
        epochs: 2,
        batchSize: 32,
        bnMode,
        init: "random",
      }),
    );
    assert.ok(changed(Float32Array.from(s.layer.weight.toTypedArray() as Float32Array), weight), "T trained");
    const after = stats();
    for (const net of ["front", "back", "tail"] as const) {
      assert.equal(after[net].size, 40, `${net}: 20 batch norms, mean and variance`);
      for (const [k, v] of after[net])
        assert.ok(!changed(v, before[net].get(k) as Float32Array), `${bnMode}: ${net} ${k} untouched`);
    }
    // The check can fail: the same stitched model in mode 'adapt' moves A's statistics.
    trainStitch(
      s,
      data,
      data,
      stitchTrainOptions({
        objective: { slm: 1 },
        normalization: CIFAR10_NORMALIZATION,
        epochs: 1,
        batchSize: 32,
        bnMode: "adapt",
        init: "random",
      }),
    );
    assert.ok(
      changed(
        bnStats(front).get("bn1.running_mean") as Float32Array,
        before.front.get("bn1.running_mean") as Float32Array,
      ),
    );
    dispose();
  });
}

test("the last partial batch is dropped, and fewer images than one batch is a clear error", () => {
  const m = tiny(0);
  const s = new StitchedModel(m, m, "layer1.0");
  const data = randomImages(70, 4);
  const steps: number[] = [];
  trainStitch(
    s,
    data,
    data,
    stitchTrainOptions({
      objective: { slm: 1 },
      normalization: CIFAR10_NORMALIZATION,
      epochs: 1,
      batchSize: 32,
      bnMode: "eval",
      init: "identity",
    }),
    (p) => steps.push(p.steps),
  );
  assert.deepEqual(steps, [2, 2], "70 images in batches of 32: two steps, the 6 left over are dropped");
  assert.throws(
    () =>
      trainStitch(
        s,
        data,
        data,
        stitchTrainOptions({
          objective: { slm: 1 },
          normalization: CIFAR10_NORMALIZATION,
          epochs: 1,
          batchSize: 128,
          bnMode: "eval",
          init: "identity",
        }),
      ),
    /at least one full batch: 70 training images, batch size 128/,
  );
  disposeDataset(data);
  m.dispose();
  s.layer.dispose();
});

test("4 epochs: stitching drops the lr after epochs 1 and 2, as base training does (floor, the reference's int())", () => {
  // Both loops build their schedule from nn/schedule.ts: base training at its config's fractions
  // (the protocol's 1/3 and 2/3), stitching at the same. Rounding would give {1, 3} here.
  assert.deepEqual(stepScheduleMilestones(STEP_SCHEDULE_FRACTIONS, 4), [1, 2]);
  const m = tiny(0);
  const s = new StitchedModel(m, m, "layer1.0");
  const data = randomImages(32, 4);
  const lrs: number[] = [];
  trainStitch(
    s,
    data,
    data,
    stitchTrainOptions({
      objective: { slm: 1 },
      normalization: CIFAR10_NORMALIZATION,
      epochs: 4,
      batchSize: 32,
      lr: 1e-3,
      bnMode: "eval",
      init: "identity",
    }),
    (p) => lrs.push(p.lr),
  );
  const expected = [1e-3, 1e-4, 1e-5, 1e-5];
  assert.equal(lrs.length, 4, "one step per epoch");
  for (const [i, lr] of lrs.entries()) assert.ok(Math.abs(lr - expected[i]) < 1e-15, `epoch ${i + 1}: lr ${lr}`);
  disposeDataset(data);
  m.dispose();
  s.layer.dispose();
});

test("the least-squares start draws its images at random from the whole split (seeded), not the first k", () => {
  // A class-ordered set whose first half is black and second half random: the first k images
  // would all be black; a random draw sees both kinds.
  const front = tiny(0);
  const back = tiny(1);
  const n = 64;
  const k = 16;
  torch.manualSeed(9);
  const images = torch.cat(
    [
      torch.zeros([n / 2, 3, 32, 32], { dtype: "uint8" }),
      torch.randint(0, 256, [n / 2, 3, 32, 32], { dtype: "uint8" }),
    ],
    0,
  );
  const data: Dataset = { images, labels: torch.zeros([n], { dtype: "int64" }), classes: ["a"], name: "ordered" };
  const weightsAfterInit = (seed: number) => {
    const s = new StitchedModel(front, back, "layer1.0");
    trainStitch(
      s,
      data,
      data,
      stitchTrainOptions({
        objective: { slm: 1 },
        normalization: CIFAR10_NORMALIZATION,
        epochs: 1,
        batchSize: 32,
        lr: 1e-12,
        bnMode: "eval",
        initImages: k,
        seed,
      }),
    );
    const w = Float32Array.from(s.layer.weight.toTypedArray() as Float32Array);
    s.layer.dispose();
    return w;
  };
  const a = weightsAfterInit(0);
  assert.deepEqual(a, weightsAfterInit(0), "the same seed draws the same images");
  assert.ok(changed(a, weightsAfterInit(1)), "another seed draws other images");
  // The first k images (all black), as the old start took them, give another T.
  const first = new StitchedModel(front, back, "layer1.0");
  inEvalMode([front, back], () =>
    torch.tidy(() => first.init("lstsq", normalize(data.images.narrow(0, 0, k), CIFAR10_NORMALIZATION))),
  );
  assert.ok(changed(a, Float32Array.from(first.layer.weight.toTypedArray() as Float32Array)), "not the first k");
  first.layer.dispose();
  disposeDataset(data);
  front.dispose();
  back.dispose();
});

test("each network normalises its own input: a CIFAR-normalised front and a Fashion-MNIST-normalised back", () => {
  const front = tiny(0);
  const back = tiny(1);
  const s = new StitchedModel(front, back, "layer1.0", "layer1.0", {
    normalization: { front: CIFAR10_NORMALIZATION, back: FASHION_MNIST_NORMALIZATION },
  });
  torch.tidy(() => {
    torch.manualSeed(5);
    const x = torch.rand([4, 3, 32, 32]);
    const xa = s.frontInput(x);
    const xb = s.backInput(x);
    const want = (norm: typeof CIFAR10_NORMALIZATION) =>
      x.sub(torch.tensor(norm.mean).reshape(1, 3, 1, 1)).div(torch.tensor(norm.std).reshape(1, 3, 1, 1));
    assert.ok(xa.sub(want(CIFAR10_NORMALIZATION)).abs().max().item() < 1e-6);
    assert.ok(xb.sub(want(FASHION_MNIST_NORMALIZATION)).abs().max().item() < 1e-6);
    // B's reference output is B on its own normalisation.
    const ref = back.forward(want(FASHION_MNIST_NORMALIZATION));
    assert.ok(s.backForward(x).sub(ref).abs().max().item() < 1e-5);
  });
  for (const m of [front, back, s.layer]) m.dispose();
});

function stitchConfig(frontPath: string, backPath: string, over: Partial<StitchConfig>): StitchConfig {
  return smallStitchConfig(frontPath, backPath, over, { ckaImages: 0 });
}

test("a marked pair is scored on a marked test set, recorded as test_data; the identical pair's soft kappa is 1", {
  skip,
}, async () => {
  const a = tiny(0);
  const path = join(tmp, "a", "model.safetensors");
  mkdirSync(dirname(path), { recursive: true });
  saveCheckpoint(path, a, { dataset: "fashion-mnist" });
  a.dispose();
  // The test images of a pixel-marked pair carry every image's class-colour square.
  const test = await loadSource(
    { dataset: "fashion-mnist", root: null, imageSize: null, shortcut: "pixel", markerScale: 1, limit: 32 },
    "test",
  );
  const labels = Array.from(test.labels.toTypedArray() as BigInt64Array, Number);
  const plan = planMarkers(labels, 10, 32, 32, { kind: "pixel", seed: 1 });
  const colors = markerColors(10);
  const px = test.images.toTypedArray() as Uint8Array;
  for (let i = 0; i < labels.length; i++)
    for (let c = 0; c < 3; c++)
      for (const [dy, dx] of [
        [0, 0],
        [plan.side - 1, plan.side - 1],
      ]) {
        const v = px[((i * 3 + c) * 32 + plan.ys[i] + dy) * 32 + plan.xs[i] + dx];
        assert.equal(v, colors[labels[i]][c], `image ${i} channel ${c}: marker pixel`);
      }
  disposeDataset(test);

  // A stitched with itself at T = identity, untrained (lr ~ 0), batch norm in eval: the stitched
  // model is A, so agreement probability and both kappas are 1, on clean and on marked data.
  for (const shortcut of [null, "pixel"] as const) {
    const out = join(tmp, `identical-${shortcut ?? "clean"}`);
    await runStitch(stitchConfig(path, path, { init: "identity", lr: 1e-12, bnMode: "eval", shortcut }), out);
    const r = JSON.parse(readFileSync(join(out, "scores.json"), "utf8"));
    assert.equal(r.testData, shortcut ?? "clean");
    assert.ok(Math.abs(r.scores.agreementProbability - 1) < 1e-6, `agreement ${r.scores.agreementProbability}`);
    assert.ok(Math.abs(r.scores.softErrorConsistency - 1) < 1e-6, `soft kappa ${r.scores.softErrorConsistency}`);
    assert.ok(Math.abs(r.scores.hardErrorConsistency - 1) < 1e-6, `hard kappa ${r.scores.hardErrorConsistency}`);
  }
  // Excess agreement: on the marked test set (the test set itself when the data carry the same
  // markers) minus on the rolled one; for Rand, minus another draw of random markers.
  for (const [shortcut, kind] of [
    ["pixel-loc", "pixel-loc"],
    [null, "pixel-loc"],
    ["rand", "rand"],
  ] as const) {
    const out = join(tmp, `excess-${shortcut}-${kind}`);
    await runStitch(stitchConfig(path, path, { bnMode: "eval", shortcut, excess: kind }), out);
    const r = JSON.parse(readFileSync(join(out, "scores.json"), "utf8"));
    assert.equal(r.excess.kind, kind);
    assert.equal(r.excess.excessAgreement, r.excess.marked.agreementProbability - r.excess.rolled.agreementProbability);
    if (shortcut === kind) assert.deepEqual(r.excess.marked, r.scores, "the marked set is the test set");
    else assert.equal(r.testData, "clean");
  }
  // Standard mode defaults to "adapt", which loads A, B and the stitched copy of B separately
  // even for the identical pair: B's scores are those of the untouched checkpoint.
  const out = join(tmp, "identical-adapt");
  await runStitch(stitchConfig(path, path, {}), out);
  const r = JSON.parse(readFileSync(join(out, "scores.json"), "utf8"));
  assert.equal(r.config.bnMode, "adapt");
  const evalRun = JSON.parse(readFileSync(join(tmp, "identical-clean", "scores.json"), "utf8"));
  assert.equal(r.scores.backAccuracy, evalRun.scores.backAccuracy, "B's own accuracy does not depend on the bn mode");
});

test("the presets mark what the reference marks: the cross-bias pair's data, never the cross-seed or identical pair's", () => {
  const root = join(import.meta.dirname, "..");
  for (const [file, scale] of [
    ["cross-bias.yaml", "small"],
    ["cross-bias.yaml", "paper"],
    ["demo.yaml", undefined],
    ["objectives.yaml", "small"],
  ] as const) {
    const path = join(root, "presets", file);
    const plan = planExperiment(readExperiment(path, scale), path);
    const byKey = new Map(plan.tasks.map((t) => [t.key, t]));
    for (const s of plan.stitches) {
      const want = s.relation === "cross-bias" ? "pixel" : null;
      const task = byKey.get(s.key)!.spec as StitchTask;
      assert.equal(task.config.shortcut, want, `${file} ${s.relation} stitch data`);
      if (s.irisKey) assert.equal((byKey.get(s.irisKey)!.spec as IrisTask).shortcut, want, `${file} IRI sources`);
    }
  }
  // Unseen information: clean models; only the stitching data are marked, each pair with its
  // own markers, and excess agreement is scored on them.
  const path = join(root, "presets", "unseen-information.yaml");
  const plan = planExperiment(readExperiment(path, "small"), path);
  for (const t of plan.tasks) if (t.kind === "train") assert.equal((t.spec as TrainTask).config.shortcut, null);
  const byKey = new Map(plan.tasks.map((t) => [t.key, t]));
  for (const s of plan.stitches) {
    const cfg = (byKey.get(s.key)!.spec as StitchTask).config;
    const want = s.relation.endsWith("pixel-loc") ? "pixel-loc" : s.relation.endsWith("pixel") ? "pixel" : "rand";
    assert.equal(cfg.shortcut, want);
    assert.equal(cfg.excess, want);
  }
});

test("image folders at 224 px through an experiment file: every task loads at 224, and the IRI step is the reference's", () => {
  const text = `
name: big
dataset: { name: imagefolder, root: /nowhere, imageSize: 224 }
models:
  a: { arch: resnet18, width: 0.125, seed: 0, epochs: 1, options: { stem: imagenet } }
pairs:
  - { front: a, back: a, relation: identical }
points: [stem, layer4.1]
objectives: [slm]
`;
  const plan = planExperiment(parseExperiment(text, "big.yaml"), join(tmp, "big.yaml"));
  for (const t of plan.tasks) {
    if (t.kind === "train") assert.equal((t.spec as TrainTask).config.imageSize, 224);
    if (t.kind === "iris") {
      const spec = t.spec as IrisTask;
      assert.equal(spec.imageSize, 224);
      assert.ok(Math.abs(spec.options.stepSize - IRI_STEP_SIZE_224) < 1e-12);
      assert.ok(Math.abs(spec.options.stepSize * 255 - 5.4) < 0.1, "about 5.4/255 in pixel units");
    }
    if (t.kind === "stitch") assert.equal((t.spec as StitchTask).config.imageSize, 224);
  }
  // Without imageSize the resolved configs say null (the dataset's own side), and the IRI step is 1/255.
  const small = planExperiment(parseExperiment(text.replace(", imageSize: 224", ""), "s.yaml"), join(tmp, "s.yaml"));
  for (const t of small.tasks) {
    const spec = t.spec as TrainTask | IrisTask | StitchTask;
    const side = "config" in spec ? spec.config.imageSize : spec.imageSize;
    assert.equal(side, null, t.label);
    if (spec.kind === "iris") assert.equal(spec.options.stepSize, 1 / 255);
  }
});

test("an independent plain-PyTorch stitcher (test/helpers/stitch_reference.py) gives our invariance-aware SLM scores to 3 decimals", {
  skip: skipUnlessPytorch(),
}, () => {
  // Random networks of two seeds, a random "IRI set" (its content does not matter to the check:
  // B's targets are computed on it, as invariance-aware stitching does) and a random test set.
  const front = tiny(0);
  const back = tiny(1);
  const point = "layer1.1";
  const s = new StitchedModel(front, back, point, point, {
    normalization: { front: FASHION_MNIST_NORMALIZATION, back: FASHION_MNIST_NORMALIZATION },
  });
  const iris = randomImages(96, 5);
  const test = randomImages(200, 6);
  const settings = { epochs: 6, batch: 32, lr: 1e-2, weight_decay: 1e-4 };
  const ours = (() => {
    trainStitch(
      s,
      iris,
      iris,
      stitchTrainOptions({
        objective: { slm: 1 },
        normalization: pixelScale(3),
        epochs: settings.epochs,
        batchSize: settings.batch,
        lr: settings.lr,
        weightDecay: settings.weight_decay,
        bnMode: "eval",
        init: "identity",
      }),
    );
    return evaluateStitch(s, test, { normalization: pixelScale(3), device: "cpu" });
  })();
  const dir = join(tmp, "stitch-reference");
  mkdirSync(dir, { recursive: true });
  torchSave(join(dir, "front.pt"), front.stateDict());
  torchSave(join(dir, "back.pt"), back.stateDict());
  const orders = Array.from({ length: settings.epochs }, (_, epoch) =>
    BigInt64Array.from(epochOrder(96, { shuffle: true, seed: 0, epoch }), BigInt),
  );
  const order = torch.tensor(BigInt64Array.from(orders.flatMap((o) => [...o]))).reshape(settings.epochs, 96);
  torchSave(join(dir, "data.pt"), { iris: iris.images, test: test.images, test_labels: test.labels, order });
  writeFileSync(
    join(dir, "settings.json"),
    JSON.stringify({ ...settings, width: 0.125, point, ...FASHION_MNIST_NORMALIZATION }),
  );
  const r = spawnSync(PYTHON, [join(import.meta.dirname, "helpers", "stitch_reference.py"), dir], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  const py = JSON.parse(readFileSync(join(dir, "py_scores.json"), "utf8"));
  assert.ok(ours.agreementProbability < 0.99, `a check that can fail: agreement ${ours.agreementProbability}`);
  for (const [k, mine] of [
    ["agreement_prob", ours.agreementProbability],
    ["accuracy", ours.accuracy],
    ["back_accuracy", ours.backAccuracy],
  ] as const)
    assert.ok(Math.abs(py[k] - mine) < 5e-4, `${k}: ours ${mine}, plain PyTorch ${py[k]}`);
  order.dispose();
  disposeDataset(iris);
  disposeDataset(test);
  s.layer.dispose();
  front.dispose();
  back.dispose();
});
