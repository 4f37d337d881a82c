// The robust evaluation's named settings (issue 27): "reference" is what the reference passes to
// ART (external/attacks/attack.py get_attacks: APGD-CE and APGD-DLR through ART's AutoAttack,
// max_iter 20, eps 8/255, eps_step 2/255, which ART takes as the first step size, one random
// start), resolved once into numbers; and the attacks, of base models and of stitched ones, run
// with the first step and the iteration count those numbers give. What the resolved config is
// and that flags and files give the same one: test/config.test.ts.
import assert from "node:assert/strict";
import { test } from "node:test";
import { type Dataset, disposeDataset, fromBytes, NO_NORMALIZATION } from "../data/index.js";
import { type RobustEvalConfig, robustEvalRandomStart } from "../eval/config.js";
import { robustEvaluation } from "../eval/evaluate.js";
import { Flatten, Linear, Sequential } from "../nn/layers.js";
import { stitchConfig } from "../stitch/config.js";
import { robustStitchScores } from "../stitch/robust.js";
import { StitchedModel } from "../stitch/stitched.js";
import * as torch from "../torch/index.js";
import { trainConfig } from "../train/config.js";
import { tinyResnet } from "./helpers/checkpoints.js";

type Tensor = torch.Tensor;

/** n random 32 px RGB images of 10 classes, seeded. */
function randomImages(n: number, seed: number): Dataset {
  torch.manualSeed(seed);
  const pixels = torch.randint(0, 256, [n * 3 * 32 * 32]);
  const labels = torch.randint(0, 10, [n]);
  const ds = fromBytes(
    Uint8Array.from(pixels.tolist() as number[]),
    Uint8Array.from(labels.tolist() as number[]),
    [n, 3, 32, 32],
    Array.from({ length: 10 }, (_, i) => `c${i}`),
    "random",
  );
  torch.dispose([pixels, labels]);
  return ds;
}

/**
 * Wraps `forward` of an object so that every call records its input (a copy) and whether the
 * input asks for a gradient: an attack's iterations are the calls that take one.
 */
function recordCalls<T extends { forward(x: Tensor): Tensor }>(m: T): { calls: { x: Tensor; grad: boolean }[] } {
  const calls: { x: Tensor; grad: boolean }[] = [];
  const inner = m.forward.bind(m);
  m.forward = (x: Tensor) => {
    calls.push({ x: torch.keep(x.detach().clone()), grad: x.requiresGrad });
    return inner(x);
  };
  return { calls };
}

/** The first step of the first attack: the largest move between its first two gradient calls (start, first iterate). */
function firstStep(calls: { x: Tensor; grad: boolean }[]): number {
  const [start, first] = calls.filter((c) => c.grad);
  return torch.tidy(() => first.x.sub(start.x).abs().max().item());
}

const REFERENCE: RobustEvalConfig = { attack: "apgd", eps: 8 / 255, steps: 20, stepSize: 2 / 255 };

test("a base model's robust evaluation with the reference's settings: 20 iterations of each attack, the first step 2/255", () => {
  const cfg = trainConfig({ arch: "resnet18", robustEval: { settings: "reference" } }, { dataset: "fashion-mnist" });
  assert.deepEqual(cfg.robustEval, REFERENCE);
  const ds = randomImages(8, 1);
  torch.manualSeed(2);
  const model = new Sequential(new Flatten(), new Linear(3 * 32 * 32, 10));
  const { calls } = recordCalls(model);
  const r = robustEvaluation(model, ds, {
    ...(cfg.robustEval as RobustEvalConfig),
    randomStart: robustEvalRandomStart("apgd"),
    normalization: NO_NORMALIZATION,
  });
  // One gradient per iteration: at the start and at every iterate but the last (whose gradient
  // is never used), for APGD-CE and then APGD-DLR.
  assert.equal(calls.filter((c) => c.grad).length, 2 * 20);
  // sign(grad) moves every pixel by the step unless the ball or [0, 1] cuts it: the largest move
  // is the step, 2/255 (AutoAttack's 2 eps would move up to 16/255 here).
  assert.ok(Math.abs(firstStep(calls) - 2 / 255) < 1e-6, `first step ${firstStep(calls) * 255}/255`);
  assert.deepEqual(r.record, {
    attack: "apgd",
    attacks: ["apgd-ce", "apgd-dlr"],
    eps: 8 / 255,
    steps: 20,
    randomStart: true,
    step: 2 / 255,
  });
  torch.dispose(calls.map((c) => c.x));
  model.dispose();
  disposeDataset(ds);
});

test("a stitched model's robust scores with the reference's settings: 20 iterations of each attack, the first step 2/255; AutoAttack's own otherwise", () => {
  const ds = randomImages(8, 3);
  const front = tinyResnet(4);
  const back = tinyResnet(5);
  for (const [settings, steps, stepSize] of [
    ["reference", 20, 2 / 255],
    ["autoattack", 100, 16 / 255],
  ] as const) {
    const cfg = stitchConfig(
      { front: "a", back: "b", frontPoint: "layer1.0", objective: "slm", mode: "standard" },
      { robustEval: { settings } },
      { dataset: "fashion-mnist" },
    );
    assert.deepEqual(cfg.robustEval, { attack: "apgd", eps: 8 / 255, steps, stepSize });
    const s = new StitchedModel(front, back, "layer1.0");
    const { calls } = recordCalls(s);
    const r = robustStitchScores(s, ds, { ...(cfg.robustEval as RobustEvalConfig), normalization: NO_NORMALIZATION });
    assert.equal(calls.filter((c) => c.grad).length, 2 * steps, settings);
    // The first iterate moves from the random start by the first step where the ball allows it:
    // exactly 2/255 with the reference's settings; AutoAttack's 16/255 is cut by the ball of
    // 8/255 around x, but moves far more than 2/255.
    const moved = firstStep(calls);
    if (settings === "reference") assert.ok(Math.abs(moved - stepSize) < 1e-6, `first step ${moved * 255}/255`);
    else assert.ok(moved > 8 / 255 && moved <= stepSize + 1e-6, `first step ${moved * 255}/255`);
    assert.equal(r.steps, steps);
    assert.equal(r.stepSize, stepSize);
    torch.dispose(calls.map((c) => c.x));
    s.layer.dispose();
  }
  front.dispose();
  back.dispose();
  disposeDataset(ds);
});
