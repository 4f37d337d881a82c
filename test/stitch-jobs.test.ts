// The two stitch jobs (stitch/jobs.ts), from checkpoints to files: runStitch in both modes (the
// IRI set must fit), A alone scored before 'adapt' moves its statistics, adversarial stitching
// and robust scores, bad input named before anything is written; and `stitchlab iris` and
// `stitchlab stitch` (runIris, runStitch) as a user runs them. The stitching layer itself is
// tested in stitch.test.ts, IRIs in iris.test.ts.
import assert from "node:assert/strict";
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, test } from "node:test";
import { type Dataset, disposeDataset, loadDataset, normalizationFor } from "../data/index.js";
import { loadSafetensors } from "../io/safetensors.js";
import { loadCheckpoint, saveCheckpoint } from "../models/checkpoint.js";
import { createModel } from "../models/registry.js";
import type { StitchableModel } from "../models/stitchable.js";
import { IRI_DEFAULTS } from "../stitch/iri-options.js";
import { generateIriSet } from "../stitch/iriset.js";
import { runStitch, type StitchConfig } from "../stitch/jobs.js";
import { adversarialBatch } from "../stitch/robust.js";
import { StitchedModel } from "../stitch/stitched.js";
import * as torch from "../torch/index.js";
import { firstImages, irisSettingsFor, saveSmallPair, tinyResnet } from "./helpers/checkpoints.js";
import { runCli } from "./helpers/cli.js";
import { assertLeavesNothing } from "./helpers/memory.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";
import { smallStitchConfig } from "./helpers/stitch.js";

const skip = skipUnlessFashionMnist();
const HAVE_DATA = !skip;
const norm = normalizationFor("fashion-mnist");
const tmp = mkdtempSync(join(tmpdir(), "stitchlab-stitch-jobs-"));
const WIDTH = 0.125;

const tiny = (seed: number): StitchableModel => tinyResnet(seed, WIDTH);

let train: Dataset;
let b: StitchableModel;
let ckpt: { a: string; b: string };

before(async () => {
  if (!HAVE_DATA) return;
  train = await loadDataset("fashion-mnist", { split: "train", limit: 64 });
  // B is trained a little, so that its answers depend on the image (adversarial examples lower
  // its accuracy); A, a random model, is only ever read from its checkpoint.
  const pair = await saveSmallPair(tmp);
  pair.a.dispose();
  ckpt = pair.ckpt;
  b = loadCheckpoint(ckpt.b).model;
});

after(() => {
  if (train) disposeDataset(train);
  b?.dispose();
  rmSync(tmp, { recursive: true, force: true });
});

const first = (n: number) => firstImages(train, n);
const settingsFor = irisSettingsFor;

function stitchConfig(over: Partial<StitchConfig>): StitchConfig {
  return smallStitchConfig(ckpt.b, ckpt.a, over);
}

test("A alone (the curves' front end) is scored as it is, before 'adapt' moves its statistics: the same at every point", {
  skip,
}, async () => {
  const at = async (point: string) =>
    (await runStitch(stitchConfig({ frontPoint: point, bnMode: "adapt", epochs: 2 }), join(tmp, `alone-${point}`)))
      .frontAlone;
  const [p1, p2] = [await at("layer1.0"), await at("layer3.1")];
  assert.ok(p1 && p2);
  assert.equal(p1.agreementProbability, p2.agreementProbability);
  assert.equal(p1.accuracy, p2.accuracy);
  assert.equal(p1.backAccuracy, p2.backAccuracy);
});

test("runStitch in both modes writes scores (bn mode recorded) and the layer; an IRI set must fit", {
  skip,
}, async () => {
  const irisDir = join(tmp, "iris-b");
  const ds = first(64);
  await generateIriSet(b, ds, irisDir, settingsFor(b, ds, "layer1.0", { ...IRI_DEFAULTS, steps: 3, batchSize: 64 }));
  disposeDataset(ds);
  for (const mode of ["standard", "iris"] as const) {
    const out = join(tmp, `run-${mode}`);
    const r = await runStitch(stitchConfig({ mode, iris: mode === "iris" ? irisDir : undefined }), out);
    const saved = JSON.parse(readFileSync(join(out, "scores.json"), "utf8"));
    assert.equal(saved.config.bnMode, mode === "iris" ? "eval" : "adapt");
    assert.equal(saved.testData, "clean");
    assert.equal(saved.config.epochs, 1);
    assert.equal(saved.scores.n, 64);
    assert.ok(saved.scores.agreementProbability > 0 && saved.scores.agreementProbability <= 1);
    assert.ok(saved.cka > 0 && saved.cka <= 1 + 1e-9);
    assert.equal(saved.spectrum.rank, 8);
    assert.equal(r.training.trainImages, 64);
    if (mode === "iris") assert.ok(saved.iris.residuals.mean > 0);
    const layer = loadSafetensors(join(out, "layer.safetensors")).tensors;
    assert.deepEqual(layer.weight.shape, [8, 8]);
    torch.dispose(Object.values(layer));
  }
  // The IRI set of front B used with front A, or at another point: refused before any training.
  const wrong = join(tmp, "run-wrong");
  await assert.rejects(
    runStitch(stitchConfig({ mode: "iris", iris: irisDir, front: ckpt.a, back: ckpt.b }), wrong),
    /does not fit this stitch: it was made by another front model/,
  );
  await assert.rejects(
    runStitch(stitchConfig({ mode: "iris", iris: irisDir, frontPoint: "layer1.1" }), wrong),
    /made at point 'layer1.0', not 'layer1.1'/,
  );
  // Checked when the settings are resolved, before any work (stitch/config.ts).
  assert.throws(() => stitchConfig({ mode: "iris" }), /iris mode needs an IRI set/);
  await assert.rejects(runStitch(stitchConfig({ mode: "iris", iris: tmp }), wrong), /is not an IRI set/);
  assert.ok(!existsSync(wrong), "a refused run writes nothing");
});

test("adversarial stitching trains on PGD examples within eps; robust scores fall below clean ones and take the worst case over the attacks per image", {
  skip,
}, async () => {
  // The PGD examples of the stitched model stay in the L-inf ball and in [0, 1], and change the images.
  const ds = first(16);
  const s = new StitchedModel(b, b, "layer1.0", "layer1.0", {
    normalization: { front: norm, back: norm },
  });
  s.init("identity");
  const eps = 8 / 255;
  const [moved, worst, lo, hi] = torch.tidy(() => {
    const x = ds.images.float().div(255);
    const adv = adversarialBatch(s, x, ds.labels, {
      eps,
      step: 2 / 255,
      steps: 3,
      fraction: 0.5,
      normalization: { mean: [0, 0, 0], std: [1, 1, 1] },
    });
    const d = adv.sub(x).abs();
    return [d.narrow(0, 0, 8).max().item(), d.narrow(0, 8, 8).max().item(), adv.min().item(), adv.max().item()];
  });
  assert.ok(moved > 0 && moved <= eps + 1e-6, `the attacked half moved by ${moved}`);
  assert.equal(worst, 0, "the other half is the clean images");
  assert.ok(lo >= 0 && hi <= 1);
  s.layer.dispose();
  disposeDataset(ds);

  // A whole run: trained adversarially, scored clean and under PGD and under APGD-CE and -DLR.
  const adversarial = { eps, step: 2 / 255, steps: 3, fraction: 1, randomStart: false };
  const pgd = await runStitch(
    stitchConfig({
      front: ckpt.b,
      back: ckpt.b,
      adversarial,
      robustEval: { attack: "pgd", eps, steps: 5, stepSize: eps / 4 },
    }),
    join(tmp, "run-adv-pgd"),
  );
  assert.ok(pgd.robust, "robust scores recorded");
  assert.ok(
    pgd.robust.scores.accuracy < pgd.scores.accuracy,
    `robust accuracy ${pgd.robust.scores.accuracy} below clean ${pgd.scores.accuracy}`,
  );
  assert.deepEqual(Object.keys(pgd.robust.perAttack), ["pgd"]);
  const apgd = await runStitch(
    stitchConfig({ front: ckpt.b, back: ckpt.b, robustEval: { attack: "apgd", eps, steps: 5, stepSize: 2 * eps } }),
    join(tmp, "run-adv-apgd"),
  );
  const per = apgd.robust?.perAttack ?? {};
  assert.deepEqual(Object.keys(per).sort(), ["apgd-ce", "apgd-dlr"]);
  // AutoAttack's worst case per image: robust only if it survives both attacks (the same
  // examples in one pass), so at most either attack's accuracy and at least their sum minus 1.
  const [ce, dlr] = [per["apgd-ce"]?.accuracy ?? -1, per["apgd-dlr"]?.accuracy ?? -1];
  const both = apgd.robust?.scores.accuracy ?? -1;
  assert.ok(both <= Math.min(ce, dlr) + 1e-12, `worst case ${both}, attacks ${ce} and ${dlr}`);
  assert.ok(both >= ce + dlr - 1 - 1e-12, `worst case ${both}, attacks ${ce} and ${dlr}`);
  assert.ok((apgd.robust?.scores.accuracy ?? 1) < apgd.scores.accuracy);
  assert.throws(
    () => stitchConfig({ mode: "iris", iris: join(tmp, "iris-b"), adversarial }),
    /adversarial stitching .* is for standard mode/,
  );
  const cli = runCli([
    "stitch",
    "--front",
    ckpt.b,
    "--back",
    ckpt.b,
    "--point",
    "layer1.0",
    "--objective",
    "slm",
    "--mode",
    "standard",
    "--robust-eval",
    "--eps",
    "8",
    "--out",
    join(tmp, "run-adv-cli"),
  ]);
  assert.equal(cli.status, 1);
  // Refused by the flag's parser, which checks the value with the key's schema (cli/schema-flags.ts).
  assert.match(cli.stderr, /'--eps <x>' argument '8' is invalid\. pixel units are in \[0, 1\]; did you mean 8\/255\?/);
});

test("runStitch: missing points, unstitchable pairs and a NaN loss are clear errors that write nothing", {
  skip,
}, async () => {
  const out = join(tmp, "run-bad");
  await assert.rejects(
    runStitch(stitchConfig({ frontPoint: "layer9" }), out),
    /front model resnet18 has no stitch point 'layer9'; its points: stem, layer1.0/,
  );
  torch.manualSeed(0);
  const vit = createModel("vit_tiny_patch4_32", { embedDim: 24, depth: 2, numHeads: 2 });
  const vitPath = join(tmp, "vit", "model.safetensors");
  mkdirSync(dirname(vitPath));
  saveCheckpoint(vitPath, vit, { dataset: "fashion-mnist" });
  vit.dispose();
  await assert.rejects(
    runStitch(stitchConfig({ back: vitPath, frontPoint: "layer1.0", backPoint: "head" }), out),
    /a vector \(a head's input\) stitches to a vector only \(A's layer1\.0: \d+ x \d+ x \d+ map; B's head: vector of 24\)/,
  );
  // A back model whose head is NaN is refused as it is loaded, naming the tensor.
  const broken = tiny(0);
  torch.noGrad(() => broken.stateDict()["fc.weight"].fill_(Number.NaN));
  const brokenPath = join(tmp, "nan", "model.safetensors");
  mkdirSync(dirname(brokenPath));
  saveCheckpoint(brokenPath, broken, { dataset: "fashion-mnist" });
  await assert.rejects(runStitch(stitchConfig({ back: brokenPath }), out), /fc\.weight holds NaN or infinite values/);
  // One whose head is finite but overflows: B's soft labels are NaN from the first step.
  torch.noGrad(() => broken.stateDict()["fc.weight"].fill_(3e38));
  const overflowPath = join(tmp, "nan", "overflow.safetensors");
  saveCheckpoint(overflowPath, broken, { dataset: "fashion-mnist" });
  broken.dispose();
  await assert.rejects(
    runStitch(stitchConfig({ back: overflowPath }), out),
    /stitching diverged: loss is NaN at epoch 1, step 1/,
  );
  // A second time, counted: the failed run frees T, its models and its data.
  await assertLeavesNothing(
    () => assert.rejects(runStitch(stitchConfig({ back: overflowPath }), out), /stitching diverged/),
    "the failed stitch",
  );
  assert.ok(!existsSync(join(out, "scores.json")) && !existsSync(join(out, "layer.safetensors")));
});

function stitchlab(args: string[]) {
  return runCli(args, { cwd: tmp });
}

test("stitchlab iris and stitchlab stitch as a user runs them", { skip }, () => {
  const irisDir = join(tmp, "cli-iris");
  const i = stitchlab([
    "iris",
    "--front",
    ckpt.b,
    "--point",
    "layer2.0",
    "--limit",
    "40",
    "--steps",
    "4",
    "--batch-size",
    "16",
    "--out",
    irisDir,
  ]);
  assert.equal(i.status, 0, i.stderr);
  const lines = i.stdout
    .trim()
    .split("\n")
    .map((l) => JSON.parse(l));
  const done = lines.at(-1);
  assert.equal(done.event, "done");
  assert.equal(done.count, 40);
  assert.ok(
    lines.some((l) => l.event === "iris" && typeof l.meanResidual === "number"),
    "progress lines with the running residual",
  );
  assert.doesNotMatch(i.stdout, /NaN|null/, "no value that is not known yet is printed");
  for (const f of ["iris.safetensors", "iris.json", "preview.png"]) assert.ok(existsSync(join(irisDir, f)), f);
  assert.doesNotMatch(i.stderr, /will take about/, "a short run says nothing of its length");
  // A long run (here: any run, with the threshold at 0 s) says how long after its first batch.
  const long = runCli(
    [
      "iris",
      "--front",
      ckpt.b,
      "--point",
      "layer1.0",
      "--limit",
      "32",
      "--steps",
      "1",
      "--batch-size",
      "16",
      "--out",
      join(tmp, "cli-iris-long"),
    ],
    { cwd: tmp, env: { ...process.env, STITCHLAB_IRIS_FORETELL_S: "0" } },
  );
  assert.equal(long.status, 0, long.stderr);
  assert.match(long.stderr, /iris: 32 images will take about \d+ minutes/);

  const out = join(tmp, "cli-stitch");
  const common = [
    "--front",
    ckpt.b,
    "--back",
    ckpt.a,
    "--point",
    "layer2.0",
    "--epochs",
    "1",
    "--limit",
    "40",
    "--test-limit",
    "40",
    "--init-images",
    "40",
    "--batch-size",
    "20",
  ];
  const s = stitchlab(["stitch", ...common, "--objective", "fula", "--mode", "iris", "--iris", irisDir, "--out", out]);
  assert.equal(s.status, 0, s.stderr);
  const r = JSON.parse(s.stdout.trim().split("\n").at(-1) as string);
  assert.equal(r.bnMode, "eval");
  assert.ok(r.agreementProbability > 0);
  assert.ok(existsSync(join(out, "scores.json")) && existsSync(join(out, "layer.safetensors")));

  // One clear line on stderr, exit status 1.
  const bad = stitchlab([
    "stitch",
    ...common,
    "--objective",
    "fula",
    "--mode",
    "iris",
    "--iris",
    irisDir,
    "--point",
    "layer1.0",
    "--out",
    join(tmp, "x"),
  ]);
  assert.equal(bad.status, 1);
  assert.match(bad.stderr.trim(), /^stitchlab: IRI set .* made at point 'layer2.0', not 'layer1.0'$/);
  // An --out that cannot be written is found before T is trained, not after.
  const aFile = join(tmp, "a-file");
  writeFileSync(aFile, "");
  const unwritable = stitchlab([
    "stitch",
    ...common,
    "--objective",
    "slm",
    "--mode",
    "standard",
    "--out",
    join(aFile, "run"),
  ]);
  assert.equal(unwritable.status, 1);
  assert.match(
    unwritable.stderr,
    /--out .*a-file\/run is not a folder stitchlab can write in \(ENOTDIR\); nothing was run/,
  );
  assert.doesNotMatch(unwritable.stdout + unwritable.stderr, /epoch/, "no training started");
  const badMode = stitchlab(["stitch", ...common, "--objective", "fula", "--mode", "fancy", "--out", join(tmp, "x")]);
  assert.match(badMode.stderr, /--mode must be one of standard, iris, not 'fancy'/);
  const badObjective = stitchlab([
    "stitch",
    ...common,
    "--objective",
    "kl",
    "--mode",
    "standard",
    "--out",
    join(tmp, "x"),
  ]);
  assert.match(badObjective.stderr, /unknown objective 'kl'/);
  assert.ok(!existsSync(join(tmp, "x")));
});
