// Mixed precision (torch/amp.ts): bfloat16 autocast on the CPU against Python's torch.autocast
// (per-op output dtypes, values, parameter gradients), the scope's state handling (restored on a
// throw, nesting, the cast cache cleared on leaving), and the two places that use it: base
// training (`autocast: "bf16"` in TrainConfig) and IRI generation (IriOptions), whose stored
// residuals stay float32 measurements. Small on purpose: each test takes seconds.
import assert from "node:assert/strict";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { disposeDataset, loadDataset, normalizationFor } from "../data/index.js";
import { planExperiment } from "../experiments/plan.js";
import { parseExperiment } from "../experiments/spec.js";
import { loadSafetensors } from "../io/safetensors.js";
import { createModel } from "../models/registry.js";
import { inEvalMode } from "../nn/module.js";
import { IRI_DEFAULTS, type IriOptions } from "../stitch/iri-options.js";
import { generateIriBatch, perImageResidual } from "../stitch/iris.js";
import * as torch from "../torch/index.js";
import { trainConfig } from "../train/config.js";
import { type TrainConfig, trainModel } from "../train/trainer.js";
import { runReference, skipUnlessPytorch } from "./helpers/pytorch.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";
import { assertClose, ints, make, normal } from "./helpers/tensors.js";

const noData = skipUnlessFashionMnist();
// With oneDNN capped below the CPU's AVX-512 (DNNL_MAX_CPU_ISA=AVX2 on an AVX-512 machine), bf16
// autocast cannot run in libtorch 1.13 (torch/isa.ts): these tests give way to the one that
// checks the refusal.
const refused = torch.cpuBf16Refusal();
const capped = refused ? `bf16 autocast refused here (the refusal is checked by its own test): ${refused}` : false;
const tmp = mkdtempSync(join(tmpdir(), "stitchlab-autocast-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

const bf16 = <T>(fn: () => T): T => torch.autocast("cpu", { dtype: "bfloat16" }, fn);

// A conv -> batch norm -> relu -> pool -> linear network and a few lone ops, with the same
// inputs here and in Python. Expected dtypes under CPU autocast (PyTorch 1.13's lists): conv2d,
// linear and matmul lower to bfloat16, ops on no list follow their (bfloat16) inputs,
// cross_entropy_loss and mse_loss run in float32, and cat promotes to the widest input.
const NET =
  "F.linear(F.adaptive_avg_pool2d(F.relu(F.batch_norm(F.conv2d(x, w1, b1, 1, 1), None, None, g, beta, True)), 1).flatten(1), w2, b2)";
const AC = 'torch.autocast("cpu", dtype=torch.bfloat16)';
const OUTPUTS: { name: string; dtype: torch.DType }[] = [
  { name: "conv2d", dtype: "bfloat16" },
  { name: "batch_norm+relu", dtype: "bfloat16" },
  { name: "linear", dtype: "bfloat16" },
  { name: "log_softmax", dtype: "bfloat16" },
  { name: "cross_entropy", dtype: "float32" },
  { name: "mse_loss", dtype: "float32" },
  { name: "matmul", dtype: "bfloat16" },
  { name: "cat(bf16, fp32)", dtype: "float32" },
];
const PARAMS = ["w1", "b1", "g", "beta", "w2", "b2"] as const;

function inputs(): Record<string, torch.Tensor> {
  return {
    x: make(normal([4, 3, 8, 8]), 1),
    w1: make(normal([6, 3, 3, 3], "float32", 0.3), 2),
    b1: make(normal([6], "float32", 0.1), 3),
    g: make(normal([6], "float32", 0.2), 4).add(1),
    beta: make(normal([6], "float32", 0.1), 5),
    w2: make(normal([5, 6], "float32", 0.5), 6),
    b2: make(normal([5], "float32", 0.1), 7),
    y: make(ints([4], 0, 5), 8),
    t: make(normal([4, 5]), 9),
    a: make(normal([4, 7]), 10),
    m: make(normal([7, 3]), 11),
  };
}

function net(v: Record<string, torch.Tensor>) {
  const c = torch.conv2d(v.x, v.w1, v.b1, { padding: 1 });
  const r = torch.relu(torch.batchNorm(c, null, null, { weight: v.g, bias: v.beta, training: true }));
  const l = torch.linear(torch.adaptiveAvgPool2d(r, 1).flatten(1), v.w2, v.b2);
  return { c, r, l };
}

test("CPU bf16 autocast matches torch.autocast: per-op output dtypes, values, and parameter gradients", {
  skip: capped || skipUnlessPytorch(),
}, () => {
  torch.tidy(() => {
    const v = inputs();
    const named: Record<string, torch.Tensor> = {};
    for (const c of ["forward", "grads"]) for (const [k, t] of Object.entries(v)) named[`${c}/${k}`] = t;
    const ref = runReference(
      [
        {
          name: "forward",
          // The walrus keeps each intermediate as an output; the decorator form is `with torch.autocast(...)`.
          expr:
            `${AC}(lambda: ((c := F.conv2d(x, w1, b1, 1, 1)), (r := F.relu(F.batch_norm(c, None, None, g, beta, True))), ` +
            "(l := F.linear(F.adaptive_avg_pool2d(r, 1).flatten(1), w2, b2)), F.log_softmax(l, 1), F.cross_entropy(l, y), " +
            "F.mse_loss(l, t), torch.matmul(a, m), torch.cat([l, t])))()",
          inputs: Object.keys(v),
        },
        {
          name: "grads",
          // Forward and loss under autocast, backward outside: PyTorch's recipe.
          expr: `(lambda ps: torch.autograd.grad(${AC}(lambda: F.cross_entropy(${NET}, y))(), ps))([p.requires_grad_() for p in (${PARAMS.join(", ")})])`,
          inputs: Object.keys(v),
        },
      ],
      named,
    );
    assert.deepEqual(ref.errors, {});

    const ours = bf16(() => {
      const { c, r, l } = net(v);
      return [
        c,
        r,
        l,
        torch.logSoftmax(l, 1),
        torch.crossEntropy(l, v.y),
        torch.mseLoss(l, v.t),
        torch.matmul(v.a, v.m),
        torch.cat([l, v.t]),
      ];
    });
    for (const [i, o] of OUTPUTS.entries()) {
      const expected = ref.outputs[`forward#${i}`];
      assert.equal(expected.dtype, o.dtype, `PyTorch's ${o.name} under autocast is ${expected.dtype}`);
      assertClose(ours[i], expected, { rtol: 1e-2, atol: 1e-2, label: o.name });
    }
    // Outside the scope, the same ops are float32 again.
    assert.equal(net(v).l.dtype, "float32");

    const params = PARAMS.map((k) => v[k].detach().clone().requiresGrad_(true));
    const p = Object.fromEntries(PARAMS.map((k, i) => [k, params[i]]));
    const loss = bf16(() => torch.crossEntropy(net({ ...v, ...p }).l, v.y));
    assert.equal(loss.dtype, "float32");
    loss.backward();
    for (const [i, k] of PARAMS.entries()) {
      const grad = params[i].grad as torch.Tensor;
      assert.equal(grad.dtype, "float32", `${k}.grad stays float32 (the parameters' dtype)`);
      assertClose(grad, ref.outputs[`grads#${i}`], { rtol: 2e-2, atol: 2e-2, label: `d loss / d ${k}` });
    }
    torch.dispose(params.map((q) => q.grad));
  });
});

test("bf16 autocast is refused, naming the cap, exactly where oneDNN is capped below the CPU's AVX-512", () => {
  const isa = torch.onednnIsa();
  if (!refused) {
    // Not capped (or no AVX-512 to cap): autocast runs, and the refusal needs a capped ISA.
    assert.equal(
      torch.autocast("cpu", {}, () => 1),
      1,
    );
    return;
  }
  assert.ok(!torch.onednnAvx512(), isa);
  const x = make(normal([2, 3, 6, 6]), 1);
  const w = make(normal([4, 3, 3, 3]), 2);
  assert.throws(
    () => torch.autocast("cpu", {}, () => torch.conv2d(x, w)),
    /oneDNN is capped at avx2.*lift the cap or run in float32/,
  );
  // Off, it is a float32 region as before.
  assert.equal(torch.autocast("cpu", { enabled: false }, () => torch.conv2d(x, w)).dtype, "float32");
  assert.equal(torch.isAutocastEnabled("cpu"), false, "nothing was left on");
});

test("autocast restores the previous state after a throw, nests, and clears its cast cache on leaving", {
  skip: capped,
}, () => {
  torch.tidy(() => {
    const x = make(normal([2, 3, 6, 6]), 1);
    const w = make(normal([4, 3, 3, 3]), 2).requiresGrad_(true);
    const conv = () => torch.conv2d(x, w);
    assert.equal(torch.isAutocastEnabled("cpu"), false);
    assert.equal(torch.getAutocastDtype("cpu"), "bfloat16");

    assert.throws(
      () =>
        bf16(() => {
          assert.equal(torch.isAutocastEnabled("cpu"), true);
          throw new Error("boom");
        }),
      /boom/,
    );
    assert.equal(torch.isAutocastEnabled("cpu"), false, "off again after fn threw");
    assert.equal(conv().dtype, "float32");
    assert.throws(() => bf16(() => Promise.resolve(1)), /synchronous/);
    assert.equal(torch.isAutocastEnabled("cpu"), false);
    assert.throws(() => torch.autocast("cpu", { dtype: "float16" }, conv), /bfloat16 only/);
    assert.equal(torch.isAutocastEnabled("cpu"), false);

    // Nesting: an enabled: false region inside runs float32, and leaving it re-enables the outer one.
    bf16(() => {
      assert.equal(conv().dtype, "bfloat16");
      torch.autocast("cpu", { enabled: false }, () => {
        assert.equal(torch.isAutocastEnabled("cpu"), false);
        assert.equal(conv().dtype, "float32");
        bf16(() => assert.equal(conv().dtype, "bfloat16"));
        assert.equal(torch.isAutocastEnabled("cpu"), false);
      });
      assert.equal(torch.isAutocastEnabled("cpu"), true);
      assert.equal(conv().dtype, "bfloat16");
    });
    assert.equal(torch.isAutocastEnabled("cpu"), false);
    assert.equal(torch.isAutocastEnabled("cuda"), false, "CPU autocast leaves CUDA's flag alone");

    // The bfloat16 cast of a leaf parameter is cached within a region only: after an in-place
    // update between two regions (an optimiser step), the second region sees the new weights.
    const before = bf16(conv);
    torch.noGrad(() => w.mul_(-1));
    const afterStep = bf16(conv);
    assertClose(afterStep.float(), torch.noGrad(() => bf16(() => torch.conv2d(x, w.detach()))).float(), {
      rtol: 0,
      atol: 0,
    });
    assertClose(afterStep.float(), before.float().neg(), { rtol: 1e-2, atol: 1e-2 });
  });
});

const TRAIN: TrainConfig = {
  ...trainConfig({ arch: "resnet18" }, { dataset: "fashion-mnist" }),
  model: "resnet18",
  modelOptions: { width: 0.0625 },
  dataset: "fashion-mnist",
  limit: 128,
  testLimit: 32,
  epochs: 2,
  batchSize: 32,
  lr: 0.05,
  robustEval: null,
};

test("training with bf16 autocast learns, differs from float32, and reruns identically", {
  skip: capped || noData,
}, async () => {
  const run = async (name: string, cfg: TrainConfig) => {
    await trainModel(cfg, join(tmp, name));
    const losses = readFileSync(join(tmp, name, "metrics.jsonl"), "utf8")
      .trim()
      .split("\n")
      .map((l) => JSON.parse(l).train_loss as number);
    return { losses, weights: loadSafetensors(join(tmp, name, "model.safetensors")).tensors };
  };
  const mixed = await run("bf16", { ...TRAIN, autocast: "bf16" });
  const again = await run("bf16-again", { ...TRAIN, autocast: "bf16" });
  const fp32 = await run("fp32", TRAIN);
  assert.equal(JSON.parse(readFileSync(join(tmp, "bf16", "config.json"), "utf8")).autocast, "bf16");
  assert.equal(JSON.parse(readFileSync(join(tmp, "fp32", "config.json"), "utf8")).autocast, null);
  assert.ok(mixed.losses[1] < mixed.losses[0], `bf16 training loss per epoch: ${mixed.losses.join(", ")}`);
  const maxDiff = (a: Record<string, torch.Tensor>, b: Record<string, torch.Tensor>) =>
    Math.max(...Object.keys(a).map((k) => torch.tidy(() => a[k].float().sub(b[k].float()).abs().max().item())));
  for (const [k, t] of Object.entries(mixed.weights))
    if (torch.isFloating(t.dtype)) assert.equal(t.dtype, "float32", `${k} is stored in float32`);
  assert.equal(maxDiff(mixed.weights, again.weights), 0, "same config and seed, same weights");
  assert.ok(maxDiff(mixed.weights, fp32.weights) > 1e-4, "bf16 autocast changes the result");
  assert.notDeepEqual(mixed.losses, fp32.losses);
  for (const r of [mixed, again, fp32]) torch.dispose(Object.values(r.weights));
});

test("IRIs with bf16 autocast descend about as far as float32, and their stored residuals are float32 measurements", {
  skip: capped || noData,
}, async (t) => {
  const norm = normalizationFor("fashion-mnist");
  const ds = await loadDataset("fashion-mnist", { split: "train", limit: 8 });
  torch.manualSeed(0);
  const a = createModel("resnet18", { width: 0.125, numClasses: 10 });
  const point = "layer1.0";
  const opts: IriOptions = { ...IRI_DEFAULTS, optimizer: "adam", steps: 30 };
  let start = Number.NaN;
  const mixed = generateIriBatch(a, point, ds.images, norm, { ...opts, autocast: "bf16" }, 1, (t, r) => {
    if (t === 0) start = r;
  });
  const fp32 = generateIriBatch(a, point, ds.images, norm, opts, 1);
  t.diagnostic(`batch residual: start ${start}, bf16 ${mixed.batchResidual}, float32 ${fp32.batchResidual}`);
  assert.ok(mixed.batchResidual < 0.7 * start, `bf16 descent: ${start} -> ${mixed.batchResidual}`);
  assert.ok(
    Math.abs(mixed.batchResidual - fp32.batchResidual) < 0.1 * fp32.batchResidual,
    `bf16 ${mixed.batchResidual} vs float32 ${fp32.batchResidual}`,
  );
  assert.ok(
    torch.tidy(() => mixed.images.ne(fp32.images).any().item()),
    "autocast changed the descent",
  );

  // Recompute the stored residuals of the stored images in float32: the same numbers exactly.
  // Measured under autocast they would differ, so this check would catch a bf16 measurement.
  const measure = (wrap: <T>(fn: () => T) => T) =>
    torch.tidy(() =>
      inEvalMode([a], () =>
        torch.noGrad(() => {
          const mean = torch.tensor(norm.mean).reshape(1, -1, 1, 1);
          const std = torch.tensor(norm.std).reshape(1, -1, 1, 1);
          const f = (u8: torch.Tensor) => wrap(() => a.forwardTo(u8.float().div(255).sub(mean).div(std), point));
          const target = f(ds.images);
          const stored = f(mixed.images);
          return {
            perImage: perImageResidual(stored, target).toTypedArray() as Float32Array,
            batch: stored.sub(target).norm().item() / target.norm().item(),
          };
        }),
      ),
    );
  const exact = measure((fn) => fn());
  assert.deepEqual(Array.from(mixed.residuals), Array.from(exact.perImage));
  assert.equal(mixed.batchResidual, exact.batch);
  const lowered = measure(bf16);
  assert.ok(
    lowered.perImage.some((r, i) => Math.abs(r - exact.perImage[i]) > 1e-4),
    "a bf16 measurement would differ",
  );
  torch.dispose([mixed.images, fp32.images]);
  a.dispose();
  disposeDataset(ds);
});

const TINY = `
name: tiny
dataset: { name: fashion-mnist, limit: 300, testLimit: 100 }
models:
  a: { arch: resnet18, width: 0.0625, seed: 0, epochs: 1 }
pairs:
  - { front: a, back: a, relation: identical }
points: [layer1.0]
objectives: [slm]
iris: { limit: 64, steps: 3, batchSize: 32 }
stitch: { limit: 64, epochs: 1, batchSize: 32 }
scales:
  small: {}
  paper: { models: { a: { autocast: bf16 } }, iris: { autocast: bf16 } }
`;

test("experiment files take autocast: bf16 for training and IRIs; absent, it is null (float32)", () => {
  const plan = (scale: string) => planExperiment(parseExperiment(TINY, "exp.yaml", scale), join(tmp, "exp.yaml"));
  const small = plan("small");
  const paper = plan("paper");
  const spec = (p: ReturnType<typeof plan>, kind: string) => p.tasks.find((t) => t.kind === kind)?.spec;
  const train = (p: ReturnType<typeof plan>) => (spec(p, "train") as { config: TrainConfig }).config;
  const iris = (p: ReturnType<typeof plan>) => (spec(p, "iris") as { options: IriOptions }).options;
  // Absent, it is null in the resolved configs: float32 (and every default is in the key).
  assert.equal(train(small).autocast, null);
  assert.equal(iris(small).autocast, null);
  assert.equal(train(paper).autocast, "bf16");
  assert.equal(iris(paper).autocast, "bf16");
  // Every task's key changes: the model, the IRIs made from it, the stitches of both.
  for (const t of paper.tasks) assert.ok(!small.tasks.some((u) => u.key === t.key), t.label);
  assert.throws(
    () => parseExperiment(TINY.replace("iris: { autocast: bf16 }", "iris: { autocast: fp16 }"), "x", "paper"),
    /iris\.autocast/,
  );
});
