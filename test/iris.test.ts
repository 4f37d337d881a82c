// IRIs: IRI quality at an early point, IRIs against the same descent written in PyTorch,
// resuming an interrupted IRI set, the mode rule of invariance-aware stitching (B's targets from
// x', HLM's labels from x), T trained from A's features computed once, and `stitchlab iris`
// refusing bad IRI settings. The stitch jobs (runIris, runStitch) are in stitch-jobs.test.ts.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { type Dataset, disposeDataset, loadDataset, normalizationFor } from "../data/index.js";
import { torchLoad, torchSave } from "../io/torchsave.js";
import { loadCheckpoint, modelFingerprint } from "../models/checkpoint.js";
import type { StitchableModel } from "../models/stitchable.js";
import { inEvalMode } from "../nn/module.js";
import { IRI_DEFAULTS, type IriOptions } from "../stitch/iri-options.js";
import { generateIriBatch, perImageResidual } from "../stitch/iris.js";
import { checkIriSetFor, generateIriSet, loadIriSet, readIriSetInfo } from "../stitch/iriset.js";
import { relativeDistance } from "../stitch/objectives.js";
import { StitchedModel } from "../stitch/stitched.js";
import { trainStitch } from "../stitch/train.js";
import * as torch from "../torch/index.js";
import { firstImages, irisSettingsFor, saveSmallPair, tinyResnet } from "./helpers/checkpoints.js";
import { runCli } from "./helpers/cli.js";
import { PYTHON, skipUnlessPytorch } from "./helpers/pytorch.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";
import { stitchTrainOptions } from "./helpers/stitch.js";

const skip = skipUnlessFashionMnist();
const HAVE_DATA = !skip;
const norm = normalizationFor("fashion-mnist");
const tmp = mkdtempSync(join(tmpdir(), "stitchlab-iris-"));
const WIDTH = 0.125;

const _tiny = (seed: number): StitchableModel => tinyResnet(seed, WIDTH);

let train: Dataset;
let a: StitchableModel;
let b: StitchableModel;
let ckpt: { a: string; b: string };

before(async () => {
  if (!HAVE_DATA) return;
  train = await loadDataset("fashion-mnist", { split: "train", limit: 64 });
  // B is trained a little, so that its answers depend on the image (the mode-rule test needs a
  // back model whose outputs on x and x' differ); A may stay random.
  ({ a, ckpt } = await saveSmallPair(tmp));
  b = loadCheckpoint(ckpt.b).model;
});

after(() => {
  if (train) disposeDataset(train);
  a?.dispose();
  b?.dispose();
  rmSync(tmp, { recursive: true, force: true });
});

const first = (n: number) => firstImages(train, n);
const settingsFor = irisSettingsFor;

const mean = (r: Float32Array) => r.reduce((s, v) => s + v, 0) / r.length;

test("IRIs at an early point: A represents x' as x (small residual) although x' is far from x", { skip }, () => {
  const ds = first(16);
  // Adam (an option of the method, lr 0.1 with cosine decay, 200 steps) at layer1.0 of the trained
  // width-8 ResNet-18 B. (A random network with torchvision's initialisation is nearly injective
  // this early: its IRIs from noise come back to x itself.)
  const point = "layer1.0";
  const r = generateIriBatch(b, point, ds.images, norm, { ...IRI_DEFAULTS, optimizer: "adam" }, 1);
  const residual = mean(r.residuals);
  const distance = torch.tidy(() => {
    const x = ds.images.float();
    return r.images.float().sub(x).norm().item() / x.norm().item();
  });
  // Measured: residual 0.009, distance 0.10 (uniform-noise start; x' keeps noise B cannot see).
  assert.ok(residual < 0.05, `mean relative residual ${residual}`);
  assert.ok(distance > 0.05 && distance > 5 * residual, `||x' - x|| / ||x|| = ${distance} (residual ${residual})`);
  // The stored residuals are those of the stored (uint8) images.
  const again = torch.tidy(() =>
    inEvalMode([b], () =>
      torch.noGrad(() => {
        const f = (u8: torch.Tensor) =>
          b.forwardTo(
            torch
              .tensor(norm.mean)
              .reshape(1, 3, 1, 1)
              .mul(-1)
              .add(u8.float().div(255))
              .div(torch.tensor(norm.std).reshape(1, 3, 1, 1)),
            point,
          );
        return perImageResidual(f(r.images), f(ds.images)).toTypedArray() as Float32Array;
      }),
    ),
  );
  for (let i = 0; i < again.length; i++) assert.ok(Math.abs(again[i] - r.residuals[i]) < 1e-5);
  // A's own answer, by the whole network's forward (not the split at the point): x' keeps x's class
  // where the record says so.
  const kept = torch.tidy(() =>
    inEvalMode([b], () =>
      torch.noGrad(() => {
        const logits = (u8: torch.Tensor) =>
          b.forward(
            u8
              .float()
              .div(255)
              .sub(torch.tensor(norm.mean).reshape(1, 3, 1, 1))
              .div(torch.tensor(norm.std).reshape(1, 3, 1, 1)),
          );
        return logits(r.images).argmax(1).eq(logits(ds.images).argmax(1)).toTypedArray() as Uint8Array;
      }),
    ),
  );
  assert.deepEqual(Array.from(r.frontAgrees), Array.from(kept, Number));
  // At residual 0.01 A keeps nearly every class.
  assert.ok(mean(Float32Array.from(r.frontAgrees)) >= 0.9, `A keeps x's class on ${Array.from(r.frontAgrees)}`);

  // The default (200 signed steps of 1/255) also descends, if less far (docs/method.md, "IRI
  // generation": 0.6-0.7 on trained narrow models).
  let initial = Number.NaN;
  const sign = generateIriBatch(a, "stem", ds.images, norm, IRI_DEFAULTS, 1, (t, v) => {
    if (t === 0) initial = v;
  });
  assert.ok(sign.batchResidual < 0.6 * initial, `signed descent: ${initial} -> ${sign.batchResidual}`);
  torch.dispose([r.images, sign.images]);
  disposeDataset(ds);
});

test("an IRI that starts from another image starts from a seeded other image of its batch, never its own", {
  skip,
}, () => {
  const ds = first(16);
  const opts: IriOptions = { ...IRI_DEFAULTS, start: "image", steps: 0 };
  // Zero steps: the stored IRI is the start itself (the images are uint8, so exactly).
  const sources = (seed: number): number[] => {
    const r = generateIriBatch(a, "stem", ds.images, norm, opts, seed);
    const found = torch.tidy(() => {
      const x = ds.images.flatten(1).float();
      const s = r.images.flatten(1).float();
      const out: number[] = [];
      for (let i = 0; i < 16; i++) {
        const d = x
          .sub(s.slice(0, i, i + 1))
          .abs()
          .sum(1)
          .toTypedArray() as Float32Array;
        out.push(d.indexOf(0));
      }
      return out;
    });
    torch.dispose([r.images]);
    return found;
  };
  const one = sources(1);
  assert.deepEqual(sources(1), one, "the same seed draws the same starts");
  // Every start is an image of the batch, each used once, none its own source.
  assert.deepEqual(
    [...one].sort((p, q) => p - q),
    [...Array(16).keys()],
  );
  for (const [i, j] of one.entries()) assert.notEqual(i, j, `IRI ${i} starts from its own image`);
  assert.notDeepEqual(sources(2), one, "another seed (another replicate) pairs the images differently");
  disposeDataset(ds);
});

test("IRIs equal the same signed descent written in PyTorch (same weights, start and steps)", {
  skip: skip || skipUnlessPytorch(),
}, () => {
  const dir = join(tmp, "py");
  mkdirSync(dir);
  const ds = first(8);
  const s = { width: WIDTH, point: "layer1.0", steps: 20, stepSize: 1 / 255, seed: 5, mean: norm.mean, std: norm.std };
  torchSave(join(dir, "ts_state.pt"), a.stateDict());
  torchSave(join(dir, "iri_input.pt"), { x: ds.images });
  const py = spawnSync(PYTHON, [join(import.meta.dirname, "helpers", "iri_reference.py"), dir, JSON.stringify(s)], {
    encoding: "utf8",
    cwd: dir,
  });
  assert.equal(py.status, 0, py.stderr);
  const want = torchLoad(join(dir, "py_iris.pt")) as { images: torch.Tensor; residuals: torch.Tensor };
  const got = generateIriBatch(a, s.point, ds.images, norm, { ...IRI_DEFAULTS, steps: s.steps }, s.seed);
  // The same start (libtorch's generator, same seed) and the same steps; a gradient entry at the
  // edge of zero may take the other sign, so allow a few pixels to differ.
  const off = torch.tidy(() => got.images.to("int16").sub(want.images.to("int16")).abs().gt(1).float().mean().item());
  assert.ok(off < 0.01, `share of pixels differing by more than one level: ${off}`);
  const wr = want.residuals.toTypedArray() as Float32Array;
  for (let i = 0; i < wr.length; i++)
    assert.ok(Math.abs(got.residuals[i] - wr[i]) < 1e-2 * wr[i], `image ${i}: ${got.residuals[i]} vs ${wr[i]}`);
  torch.dispose([got.images, want.images, want.residuals]);
  disposeDataset(ds);
});

test("an interrupted IRI set resumes without redoing finished batches, and equals an uninterrupted one", {
  skip,
}, async () => {
  const ds = first(40);
  const opts: IriOptions = { ...IRI_DEFAULTS, steps: 5, batchSize: 16 };
  const settings = settingsFor(a, ds, "layer1.0", opts);
  const dir = join(tmp, "resume");
  await assert.rejects(
    generateIriSet(a, ds, dir, settings, {
      onProgress: (p) => {
        if (p.batch === 2 && p.step === 3) throw new Error("interrupted");
      },
    }),
    /interrupted/,
  );
  assert.ok(existsSync(join(dir, "parts", "00000.safetensors")), "batch 1 was kept");
  assert.throws(() => readIriSetInfo(dir), /unfinished IRI set/);
  assert.throws(() => loadIriSet(dir), /unfinished IRI set/);

  const seen = new Set<number>();
  let resumed = 0;
  const info = await generateIriSet(a, ds, dir, settings, {
    onProgress: (p) => {
      if (p.step < p.steps) seen.add(p.batch);
      resumed = p.resumed;
    },
  });
  assert.deepEqual([...seen].sort(), [2, 3], "only the unfinished batches ran");
  assert.equal(resumed, 16);
  assert.ok(!existsSync(join(dir, "parts")), "parts are removed once joined");
  assert.equal(info.count, 40);
  assert.ok(readFileSync(join(dir, "preview.png")).subarray(1, 4).toString() === "PNG");
  // The preview's images are the first 8; iris.json gives each one's residual for the report.
  const saved = loadIriSet(dir);
  assert.deepEqual(
    info.previewResiduals,
    Array.from(saved.residuals.subarray(0, 8), (r) => Number(r.toFixed(4))),
  );
  disposeDataset(saved.dataset);
  saved.indices.dispose();

  const whole = join(tmp, "whole");
  await generateIriSet(a, ds, whole, settings);
  const x = loadIriSet(dir);
  const y = loadIriSet(whole);
  assert.equal(
    torch.tidy(() => x.dataset.images.eq(y.dataset.images).all().item()),
    true,
  );
  assert.deepEqual(Array.from(x.residuals), Array.from(y.residuals));
  assert.deepEqual(
    Array.from(x.indices.toTypedArray() as BigInt64Array),
    Array.from({ length: 40 }, (_, i) => BigInt(i)),
  );
  // Labels are those of the source images x.
  assert.equal(
    torch.tidy(() => x.dataset.labels.eq(ds.labels).all().item()),
    true,
  );
  for (const s of [x, y]) {
    disposeDataset(s.dataset);
    s.indices.dispose();
  }

  // Finished: a rerun returns at once; other settings in the same folder are refused by name.
  let calls = 0;
  await generateIriSet(a, ds, dir, settings, { onProgress: () => calls++ });
  assert.equal(calls, 0);
  await assert.rejects(
    generateIriSet(a, ds, dir, settingsFor(a, ds, "layer1.0", { ...opts, steps: 6 })),
    /holds an IRI set with other settings \(steps: 5 there, 6 here\)/,
  );
  assert.throws(
    () => checkIriSetFor(info, { fingerprint: modelFingerprint(b), point: "layer1.0", dataset: "fashion-mnist" }, dir),
    /made by another front model/,
  );
  assert.throws(
    () =>
      checkIriSetFor(info, { fingerprint: info.front.fingerprint, point: "layer2.0", dataset: "fashion-mnist" }, dir),
    /made at point 'layer1.0', not 'layer2.0'/,
  );
  disposeDataset(ds);
});

test("a run that failed before its first batch leaves nothing that blocks the corrected rerun; broken records are named", {
  skip,
}, async () => {
  const ds = first(8);
  const dir = join(tmp, "failed-first");
  const opts = { ...IRI_DEFAULTS, steps: 2, batchSize: 8 };
  // A point the front model lacks fails before anything is written.
  await assert.rejects(
    generateIriSet(a, ds, dir, { ...settingsFor(a, ds, "layer1.0", opts), point: "layer9.9" }),
    /layer9\.9/,
  );
  assert.ok(!existsSync(join(dir, "settings.json")), "nothing written for a bad point");
  // A run that stops in its first batch leaves settings but no finished batch: other settings replace them.
  await assert.rejects(
    generateIriSet(a, ds, dir, settingsFor(a, ds, "layer1.0", opts), {
      onProgress: () => {
        throw new Error("stopped");
      },
    }),
    /stopped/,
  );
  assert.ok(existsSync(join(dir, "settings.json")));
  const info = await generateIriSet(a, ds, dir, settingsFor(a, ds, "layer1.0", { ...opts, steps: 3 }));
  assert.equal(info.count, 8);
  // A record edited by hand or cut short is named, not a bare JSON.parse message.
  writeFileSync(join(dir, "iris.json"), "{ residuals: ");
  assert.throws(
    () => readIriSetInfo(dir),
    (e: Error) =>
      e.message.includes(join(dir, "iris.json")) && /an IRI set's record\) is not valid JSON/.test(e.message),
  );
  disposeDataset(ds);
});

test("the mode rule: on an IRI set, B's soft labels and features come from x', HLM's labels from x", {
  skip,
}, async () => {
  const ds = first(32);
  const point = "layer1.0";
  const dir = join(tmp, "mode");
  await generateIriSet(a, ds, dir, settingsFor(a, ds, point, { ...IRI_DEFAULTS, steps: 30, batchSize: 32 }));
  const set = loadIriSet(dir);
  const s = new StitchedModel(a, b, point);
  const xs = torch.tidy(() => {
    const n = (u8: torch.Tensor) =>
      u8
        .float()
        .div(255)
        .sub(torch.tensor(norm.mean).reshape(1, 3, 1, 1))
        .div(torch.tensor(norm.std).reshape(1, 3, 1, 1));
    return { x: n(ds.images), xp: n(set.dataset.images) };
  });
  // What each objective should see, with T the identity (A and B have equal widths) and both in eval mode.
  const expected = inEvalMode([a, b], () =>
    torch.tidy(() =>
      torch.noGrad(() => {
        s.init("identity");
        const stitched = s.forward(xs.xp);
        const bOnX = b.forward(xs.x);
        const bOnXp = b.forward(xs.xp);
        const points = b.stitchPoints.map((p) => p.name).slice(b.stitchPoints.findIndex((p) => p.name === point));
        const mine = b.forwardIntermediatesFrom(a.forwardTo(xs.xp, point), point, points);
        const fula = (x: torch.Tensor) => {
          const theirs = b.forwardIntermediates(x, points);
          return torch
            .stack(points.map((p) => relativeDistance(mine.features[p], theirs.features[p])))
            .mean()
            .item();
        };
        return {
          // B really does answer differently on x and x'.
          bDisagrees: bOnX.argmax(1).ne(bOnXp.argmax(1)).float().mean().item(),
          slm: torch.crossEntropy(stitched, bOnXp.softmax(1)).item(),
          slmFromX: torch.crossEntropy(stitched, bOnX.softmax(1)).item(),
          hlm: torch.crossEntropy(stitched, ds.labels).item(),
          hlmFromBOnXp: torch.crossEntropy(stitched, bOnXp.argmax(1)).item(),
          fula: fula(xs.xp),
          fulaFromX: fula(xs.x),
        };
      }),
    ),
  );
  assert.ok(expected.bDisagrees > 0.2, `B's labels on x and x' differ on ${expected.bDisagrees} of the images`);
  // trainStitch reports the loss before its first step; lr 0 keeps T the identity throughout.
  const lossOf = (objective: "slm" | "hlm" | "fula") =>
    trainStitch(
      s,
      set.dataset,
      ds,
      stitchTrainOptions({
        objective: { [objective]: 1 },
        normalization: norm,
        epochs: 1,
        batchSize: 32,
        lr: 0,
        bnMode: "eval",
        init: "identity",
      }),
    ).epochLosses[0];
  const close = (got: number, want: number, other: number, what: string) => {
    assert.ok(Math.abs(got - want) < 1e-4 * Math.max(1, want), `${what}: ${got} vs ${want}`);
    assert.ok(
      Math.abs(other - want) > 100 * Math.abs(got - want) + 1e-3,
      `${what}: the alternative ${other} is too close`,
    );
  };
  close(lossOf("slm"), expected.slm, expected.slmFromX, "SLM targets are B's softmax on x'");
  close(lossOf("hlm"), expected.hlm, expected.hlmFromBOnXp, "HLM labels are those of x");
  close(lossOf("fula"), expected.fula, expected.fulaFromX, "FuLA targets are B's features on x'");
  torch.dispose(xs);
  s.layer.dispose();
  disposeDataset(set.dataset);
  set.indices.dispose();
  disposeDataset(ds);
});

test("A's features and B's targets computed once (in memory or from a file) train T as every step's pass does", {
  skip,
}, () => {
  // An eval-mode run on fixed images (the invariance-aware case): 3 epochs of SLM + FuLA, lr 1e-2.
  const ds = first(64);
  const point = "layer2.1";
  const run = (frozen: { frozenOnce: boolean; frozenBudgetBytes?: number }) => {
    const s = new StitchedModel(a, b, point);
    torch.manualSeed(5);
    const r = trainStitch(
      s,
      ds,
      ds,
      stitchTrainOptions({
        objective: { slm: 1, fula: 0.5 },
        normalization: norm,
        epochs: 3,
        batchSize: 16,
        lr: 1e-2,
        seed: 3,
        bnMode: "eval",
        initImages: 32,
        ...frozen,
      }),
    );
    const weights = s.layer.parameters().map((p) => Array.from(p.toTypedArray() as Float32Array));
    s.layer.dispose();
    return { ...r, weights };
  };
  const every = run({ frozenOnce: false });
  const memory = run({ frozenOnce: true });
  const file = run({ frozenOnce: true, frozenBudgetBytes: 0 });
  assert.equal(every.frozen, null);
  assert.equal(memory.frozen, "memory");
  assert.equal(file.frozen, "file");
  for (const [name, got] of [
    ["memory", memory],
    ["file", file],
  ] as const) {
    for (const [e, loss] of got.epochLosses.entries())
      assert.ok(
        Math.abs(loss - every.epochLosses[e]) < 1e-4 * every.epochLosses[e],
        `${name} epoch ${e + 1}: ${loss} vs ${every.epochLosses[e]}`,
      );
    let worst = 0;
    let scale = 0;
    for (const [i, w] of got.weights.entries())
      for (const [j, v] of w.entries()) {
        worst = Math.max(worst, Math.abs(v - every.weights[i][j]));
        scale = Math.max(scale, Math.abs(every.weights[i][j]));
      }
    assert.ok(worst < 1e-4 * scale, `${name}: T's weights differ by ${worst} (largest ${scale})`);
  }
  // T did train (the comparison is not between three untouched layers).
  assert.ok(every.epochLosses[2] < every.epochLosses[0], `losses ${every.epochLosses}`);
  disposeDataset(ds);
});

test("stitchlab iris refuses the IRI settings an experiment file refuses, naming the flag, before any work", () => {
  for (const [flag, value, message] of [
    // Each flag's parser checks its value with the key's schema (cli/schema-flags.ts); commander names the flag.
    ["--steps", "0", /'--steps <n>' argument '0' is invalid\. Too small/],
    ["--step-size", "-1", /'--step-size <x>' argument '-1' is invalid\. Too small/],
    ["--ball", "0", /'--ball <x>' argument '0' is invalid\. Too small/],
    ["--lr", "0", /'--lr <x>' argument '0' is invalid\. Too small/],
    ["--optimizer", "sgd", /'--optimizer <name>' argument 'sgd' is invalid\. Allowed choices are sign, adam/],
    ["--start", "zeros", /'--start <name>' argument 'zeros' is invalid\. Allowed choices are uniform, gaussian, image/],
    ["--steps", "1e9", /'--steps <n>' argument '1e9' is invalid\. at most 10\^6/],
    ["--batch-size", "0", /'--batch-size <n>' argument '0' is invalid\. Too small/],
  ] as const) {
    const out = join(tmp, `bad-${flag.slice(2)}`);
    const r = runCli([
      "iris",
      "--front",
      join(tmp, "none.safetensors"),
      "--point",
      "layer1.0",
      "--out",
      out,
      flag,
      value,
    ]);
    assert.equal(r.status, 1, `${flag} ${value}: ${r.stdout}`);
    assert.match(r.stderr, message, `${flag} ${value}`);
    assert.ok(!existsSync(out), `${flag} ${value}: nothing is written`);
  }
});
