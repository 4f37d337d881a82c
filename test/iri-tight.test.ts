// IRIs tight by construction (stitch/iri-tight.ts: the IRI settings target and maxSteps): an image
// stops once it is tight, an image still loose restarts from another start with its best kept, the
// descent is the PyTorch-checked one when no image stops or restarts, the steps are recorded in
// the set, and bad combinations are refused before any work.
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { type Dataset, disposeDataset, loadDataset, normalizationFor } from "../data/index.js";
import { loadCheckpoint } from "../models/checkpoint.js";
import type { StitchableModel } from "../models/stitchable.js";
import { IRI_DEFAULTS, type IriOptions } from "../stitch/iri-options.js";
import { restartSeed, tightDescent } from "../stitch/iri-tight.js";
import { generateIriBatch, perImageResidual } from "../stitch/iris.js";
import { generateIriSet, loadIriSet } from "../stitch/iriset.js";
import * as torch from "../torch/index.js";
import { firstImages, irisSettingsFor, saveSmallPair } from "./helpers/checkpoints.js";
import { runCli } from "./helpers/cli.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";

const skip = skipUnlessFashionMnist();
const norm = normalizationFor("fashion-mnist");
const tmp = mkdtempSync(join(tmpdir(), "stitchlab-iri-tight-"));
const POINT = "layer1.0";

let train: Dataset;
let b: StitchableModel;

before(async () => {
  if (skip) return;
  train = await loadDataset("fashion-mnist", { split: "train", limit: 32 });
  // A trained front, so that images differ in how hard they are to match.
  const { a, ckpt } = await saveSmallPair(tmp);
  a.dispose();
  b = loadCheckpoint(ckpt.b).model;
  b.requiresGrad_(false);
  b.eval();
});

after(() => {
  if (train) disposeDataset(train);
  b?.dispose();
  rmSync(tmp, { recursive: true, force: true });
});

const ADAM: IriOptions = { ...IRI_DEFAULTS, optimizer: "adam", keepBest: true, steps: 30, batchSize: 16 };

/** The pieces generateIriBatch hands tightDescent, for images x (uint8) at POINT. */
function descentInput(x: torch.Tensor, opts: IriOptions & { target: number }, seed: number) {
  const mean = torch.keep(torch.tensor(norm.mean).reshape(1, 3, 1, 1));
  const std = torch.keep(torch.tensor(norm.std).reshape(1, 3, 1, 1));
  const features = (p01: torch.Tensor) => b.forwardTo(p01.sub(mean).div(std), POINT);
  const x01 = torch.keep(x.float().div(255));
  const target = torch.keep(torch.noGrad(() => features(x01)));
  const startFor = (restart: number) => {
    torch.manualSeed(restartSeed(seed, restart));
    return torch.randLike(x01);
  };
  const residuals = (chosen: torch.Tensor) =>
    torch.tidy(
      () =>
        perImageResidual(
          torch.noGrad(() => features(chosen)),
          target,
        ).toTypedArray() as Float32Array,
    );
  const run = () => tightDescent({ x01, target, features, amp: (fn) => fn(), startFor, opts, onStep: () => {} });
  return { run, residuals, dispose: () => torch.dispose([mean, std, x01, target]) };
}

test("a tight descent stops each image at the target, restarts the loose ones, and keeps each image's best", {
  skip,
}, () => {
  const ds = firstImages(train, 16);
  const x = ds.images;
  // One start that no image can finish (target 1e-9, no restart): every image runs every step,
  // in the same batch throughout.
  const once = descentInput(x, { ...ADAM, target: 1e-9, maxSteps: ADAM.steps }, 3);
  const r0 = once.run();
  const first = once.residuals(r0.chosen);
  assert.deepEqual([...r0.steps], new Array(16).fill(ADAM.steps));

  // The same start, then two more for every image: start 0 is the run above, so the best over
  // three starts is at most its residual, and a restart finds a better iterate for some image.
  const thrice = descentInput(x, { ...ADAM, target: 1e-9, maxSteps: 3 * ADAM.steps }, 3);
  const r1 = thrice.run();
  const best = thrice.residuals(r1.chosen);
  assert.deepEqual([...r1.steps], new Array(16).fill(3 * ADAM.steps));
  for (let i = 0; i < 16; i++)
    assert.ok(best[i] <= first[i] + 1e-6, `image ${i}: ${best[i]} after restarts, ${first[i]} once`);
  assert.ok(
    best.some((v, i) => v < 0.95 * (first[i] as number)),
    `no restart improved any image: ${[...best]} vs ${[...first]}`,
  );

  // A target at the median of one start: the tighter images stop early, the looser restart.
  const target = Float64Array.from(first).sort()[8] as number;
  const tight = descentInput(x, { ...ADAM, target, maxSteps: 4 * ADAM.steps }, 3);
  const r2 = tight.run();
  const got = tight.residuals(r2.chosen);
  const steps = [...r2.steps];
  assert.ok(
    steps.some((s) => s < ADAM.steps),
    `no image stopped early: ${steps}`,
  );
  assert.ok(
    steps.some((s) => s > ADAM.steps),
    `no image restarted: ${steps}`,
  );
  for (let i = 0; i < 16; i++) {
    // An image that stopped before the cap is at the target (measured here, not quantised).
    if ((steps[i] as number) < 4 * ADAM.steps)
      assert.ok(
        got[i] <= target * (1 + 1e-5),
        `image ${i}: ${got[i]} above the target ${target} after ${steps[i]} steps`,
      );
    assert.ok((steps[i] as number) <= 4 * ADAM.steps);
  }
  torch.dispose([r0.chosen, r1.chosen, r2.chosen]);
  for (const d of [once, thrice, tight]) d.dispose();
  disposeDataset(ds);
});

test("with no image stopping or restarting, the tight descent is the PyTorch-checked one (sign steps; Adam on one image)", {
  skip,
}, () => {
  const ds = firstImages(train, 8);
  const compare = (what: string, x: torch.Tensor, opts: IriOptions) => {
    const plain = generateIriBatch(b, POINT, x, norm, opts, 11);
    const tight = generateIriBatch(b, POINT, x, norm, { ...opts, target: 1e-9, maxSteps: opts.steps }, 11);
    // The signed step is the same under the batch's Frobenius loss and the sum of the images'
    // own residuals; a gradient entry at the edge of zero may round to the other sign.
    const off = torch.tidy(() =>
      plain.images.to("int16").sub(tight.images.to("int16")).abs().gt(1).float().mean().item(),
    );
    assert.ok(off < 0.01, `${what}: share of pixels differing by more than one level: ${off}`);
    for (let i = 0; i < plain.residuals.length; i++)
      assert.ok(
        Math.abs(plain.residuals[i] - tight.residuals[i]) < 2e-2 * plain.residuals[i],
        `${what}, image ${i}: ${tight.residuals[i]} vs ${plain.residuals[i]}`,
      );
    assert.deepEqual([...tight.steps], new Array(plain.residuals.length).fill(opts.steps));
    torch.dispose([plain.images, tight.images]);
  };
  compare("sign", ds.images, { ...IRI_DEFAULTS, keepBest: true, steps: 20 });
  // On one image the two losses are one: Adam's moments and cosine are nn/optim's.
  const one = firstImages(ds, 1);
  compare("adam", one.images, { ...ADAM, steps: 20 });
  disposeDataset(one);
  disposeDataset(ds);
});

test("an IRI set made tight records each image's steps and their summary", { skip }, async () => {
  const ds = firstImages(train, 24);
  const dir = join(tmp, "set");
  const opts: IriOptions = { ...ADAM, steps: 10, target: 0.2, maxSteps: 30, batchSize: 16, start: "image" };
  const info = await generateIriSet(b, ds, dir, irisSettingsFor(b, ds, POINT, opts));
  const set = loadIriSet(dir);
  const d = info.descent;
  assert.ok(d, "iris.json records the descent");
  assert.ok(d.maxSteps <= 30 && d.meanSteps > 0 && d.meanSteps <= d.maxSteps, JSON.stringify(d));
  const above = [...set.residuals].filter((r) => r > 0.2).length;
  // Every image above the target ran to the cap or sits just above it after quantising to 8 bits.
  assert.ok(d.capped <= above, `${d.capped} capped, ${above} above the target`);
  disposeDataset(set.dataset);
  set.indices.dispose();
  disposeDataset(ds);
});

test("stitchlab iris refuses a target without keep-best and a cap without a target or below the steps, before any work", () => {
  for (const [flags, message] of [
    [["--max-steps", "400"], /maxSteps needs target/],
    [["--target", "0.2"], /target needs keepBest/],
    [
      ["--target", "0.2", "--keep-best", "--steps", "200", "--max-steps", "100"],
      /maxSteps \(100\) is below steps \(200\)/,
    ],
  ] as const) {
    const out = join(tmp, `bad-${flags.join("")}`);
    const r = runCli([
      "iris",
      "--front",
      join(tmp, "b", "model.safetensors"),
      "--dataset",
      "fashion-mnist",
      "--point",
      POINT,
      "--out",
      out,
      ...flags,
    ]);
    assert.equal(r.status, 1, `${flags.join(" ")}: ${r.stdout}`);
    assert.match(r.stderr, message, flags.join(" "));
    assert.ok(!existsSync(out), `${flags.join(" ")}: nothing is written`);
  }
});
