// The noise-cluster null front (issue 40; stitch/noise.ts): Smith et al.'s clustered random noise
// sent in the front's place. Its draws (closed form: each image's features are its class's center
// plus N(0, 1) noise, fixed per image and split), the stitched model's refusals (no gradient to the
// input, no attacks), a stitch that runs on it end to end in both modes (its IRIs are their
// starts), and its place in a plan (one per architecture, every mode of its pairs, named apart).
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, test } from "node:test";
import { disposeDataset } from "../data/index.js";
import { withNulls } from "../experiments/nulls.js";
import { type IrisTask, planExperiment, type StitchTask } from "../experiments/plan.js";
import { parseExperiment } from "../experiments/spec.js";
import { irisConfigOf } from "../experiments/tasks.js";
import { createModel } from "../models/registry.js";
import { pointShape } from "../models/stitchable.js";
import { resolveIrisConfig, resolveStitchConfig, stitchSettingsSchema } from "../stitch/config.js";
import { loadIriSet } from "../stitch/iriset.js";
import { runIris, runStitch } from "../stitch/jobs.js";
import { NoiseClusters } from "../stitch/noise.js";
import { StitchedModel } from "../stitch/stitched.js";
import * as torch from "../torch/index.js";
import { saveSmallPair } from "./helpers/checkpoints.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";
import { smallStitchConfig } from "./helpers/stitch.js";

const tmp = mkdtempSync(join(tmpdir(), "stitchlab-noise-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

const ids = (labels: number[], indices: number[], split: "train" | "test" = "train") => ({
  y: torch.tensor(BigInt64Array.from(labels, (l) => BigInt(l))),
  indices: Int32Array.from(indices),
  split,
});

test("noise clusters: each image sends its class's center plus its own N(0, 1) noise, the same for the same seed, split and image", () => {
  const shape = [4, 8, 8];
  const n = new NoiseClusters(shape, 10, 3);
  const again = new NoiseClusters(shape, 10, 3);
  const other = new NoiseClusters(shape, 10, 4);
  try {
    torch.tidy(() => {
      // 200 images of class 2, then the same positions as class 7.
      const positions = Array.from({ length: 200 }, (_, i) => i);
      const a = n.sample(
        ids(
          positions.map(() => 2),
          positions,
        ),
      );
      const b = n.sample(
        ids(
          positions.map(() => 7),
          positions,
        ),
      );
      assert.deepEqual(a.shape, [200, ...shape]);
      // The same image's noise under either label: the difference is the two centers, at every image.
      const centers = b.sub(a);
      assert.ok(
        centers
          .sub(centers.narrow(0, 0, 1))
          .abs()
          .max()
          .item() < 1e-5,
      );
      // Around its center, the noise is standard normal (256 numbers per image, 200 images).
      const center2 = a.mean([0], true);
      const eps = a.sub(center2);
      assert.ok(Math.abs(eps.mean().item()) < 0.02, `noise mean ${eps.mean().item()}`);
      assert.ok(Math.abs(eps.std().item() - 1) < 0.02, `noise sd ${eps.std().item()}`);
      // The centers are N(0, 1) draws too: their distance is about sqrt(2 * 256), far above noise's spread.
      const gap = centers.narrow(0, 0, 1).norm().item();
      assert.ok(gap > 18 && gap < 28, `center distance ${gap}`);
      // Reproducible by seed, split and position; another seed, split or position draws anew.
      const same = again.sample(ids([2, 2], [5, 9]));
      for (const [row, position] of [
        [0, 5],
        [1, 9],
      ] as const)
        assert.equal(
          same
            .narrow(0, row, 1)
            .sub(a.narrow(0, position, 1))
            .abs()
            .max()
            .item(),
          0,
          `position ${position}`,
        );
      const test = n.sample(ids([2], [5], "test"));
      assert.ok(
        test
          .sub(a.narrow(0, 5, 1))
          .abs()
          .max()
          .item() > 0.5,
        "the test split has its own noise",
      );
      assert.ok(
        other
          .sample(ids([2], [5]))
          .sub(a.narrow(0, 5, 1))
          .abs()
          .max()
          .item() > 0.5,
        "another seed",
      );
    });
  } finally {
    for (const x of [n, again, other]) x.dispose();
  }
});

test("a stitched model with a noise front needs the images' ids, has no gradient to the input, and is never attacked", () => {
  torch.manualSeed(0);
  const front = createModel("resnet18", { numClasses: 10, imageSize: 28, width: 0.25 });
  const noise = new NoiseClusters(pointShape(front.stitchPoint("layer1.0"), 1).slice(1), 10, 0);
  const s = new StitchedModel(front, front, "layer1.0", "layer1.0", { noise });
  try {
    torch.tidy(() => {
      const x = torch.rand([2, 1, 28, 28]);
      assert.throws(
        () => s.frontFeatures(x),
        /the noise-cluster front sends by label: it needs the images' labels and positions/,
      );
      assert.throws(() => s.forward(x.requiresGrad_(true), ids([0, 1], [0, 1])), /no gradient to the input/);
      assert.deepEqual(s.forward(torch.rand([2, 1, 28, 28]), ids([0, 1], [0, 1])).shape, [2, 10]);
    });
  } finally {
    noise.dispose();
    s.layer.dispose();
    front.dispose();
  }
  const settings = stitchSettingsSchema.parse({});
  const data = {
    dataset: "fashion-mnist",
    root: null,
    imageSize: null,
    testLimit: null,
    shortcut: null,
    excess: null,
    markerScale: 1,
  };
  const what = { front: "a", back: "b", frontPoint: "layer1.0", objective: "slm", noiseClusters: true };
  assert.equal(resolveStitchConfig({ ...what, mode: "iris", iris: "x" }, settings, data).noiseClusters, true);
  assert.throws(
    () =>
      resolveStitchConfig(
        { ...what, mode: "standard" },
        stitchSettingsSchema.parse({ robustEval: { steps: 2 } }),
        data,
      ),
    /a noise-cluster front is stitched without adversarial stitching or attacks/,
  );
  assert.equal(resolveStitchConfig({ ...what, mode: "standard" }, settings, data).noiseClusters, true);
  assert.ok(
    !("noiseClusters" in resolveStitchConfig({ ...what, mode: "standard", noiseClusters: false }, settings, data)),
    "other stitches keep their keys",
  );
});

test("a noise-front stitch runs end to end: no front end, CKA of the noise, and at the head its labels are learnt", {
  skip: skipUnlessFashionMnist(),
}, async () => {
  const pair = await saveSmallPair(tmp);
  pair.a.dispose();
  const { a, b } = pair.ckpt;
  const at = (frontPoint: string, objective: string) =>
    runStitch(
      smallStitchConfig(a, b, {
        frontPoint,
        objective,
        noiseClusters: true,
        epochs: 6,
        lr: 0.01,
        limit: 512,
        initImages: 512,
        testLimit: 128,
      }),
      join(tmp, `noise-${frontPoint}-${objective}`),
    );
  const mid = await at("layer1.0", "slm");
  assert.equal(mid.frontAlone, null, "the sender has no head of its own");
  assert.ok(mid.cka !== null && Number.isFinite(mid.cka));
  assert.ok(Number.isFinite(mid.scores.agreementProbability));
  assert.equal(mid.config.noiseClusters, true);
  // At the head's input, T is a linear map of the noise into B's classifier: trained on the labels
  // (HLM), it reads the class from the clusters, whatever the image.
  const head = await at("head", "hlm");
  assert.ok(head.scores.accuracy > 0.8, `noise at the head, HLM: accuracy ${head.scores.accuracy}`);
});

test("the labels-only sender's IRIs are their starts (residual 0, no step), and T is stitched invariance-aware on them", {
  skip: skipUnlessFashionMnist(),
}, async () => {
  const pair = await saveSmallPair(join(tmp, "labels"));
  pair.a.dispose();
  const { a, b } = pair.ckpt;
  const settings = {
    limit: 64,
    batchSize: 32,
    steps: 3,
    target: 0.2,
    maxSteps: 6,
    keepBest: true,
    optimizer: "adam" as const,
    seed: 5,
  };
  const data = { dataset: "fashion-mnist", root: null, imageSize: null, shortcut: null, markerScale: 1 };
  const labels = resolveIrisConfig({ front: a, point: "layer1.0", noiseClusters: true }, settings, data);
  const real = resolveIrisConfig({ front: a, point: "layer1.0" }, settings, data);
  assert.equal(labels.noiseClusters, true);
  assert.ok(!("noiseClusters" in real), "other sets keep their keys");
  const info = await runIris(labels, join(tmp, "labels-iris"));
  assert.equal(info.labelsOnly, true);
  assert.deepEqual([info.residuals.mean, info.residuals.p90, info.descent?.meanSteps], [0, 0, 0]);
  // The images are the descent's first starts: batch i draws uniform noise after seeding with
  // seed * 1000003 + i (stitch/iriset.ts), quantised as stored.
  const set = loadIriSet(join(tmp, "labels-iris"));
  try {
    torch.tidy(() => {
      const got = set.dataset.images.slice(0, 32, 64);
      torch.manualSeed(5 * 1_000_003 + 1);
      const want = torch.rand(got.shape).mul(255).round().clamp(0, 255).to("uint8");
      assert.equal(got.to("float32").sub(want.to("float32")).abs().max().item(), 0, "batch 1 is its seeded start");
    });
  } finally {
    disposeDataset(set.dataset);
    set.indices.dispose();
  }
  const stitched = await runStitch(
    smallStitchConfig(a, b, { mode: "iris", iris: join(tmp, "labels-iris"), noiseClusters: true, epochs: 2 }),
    join(tmp, "labels-stitch"),
  );
  assert.ok(Number.isFinite(stitched.scores.agreementProbability));
  assert.equal(stitched.iris?.residuals.mean, 0);
  // A set of the front's own IRIs is not the sender's, nor the reverse: each is refused before work.
  await runIris(real, join(tmp, "real-iris"));
  await assert.rejects(
    runStitch(
      smallStitchConfig(a, b, { mode: "iris", iris: join(tmp, "real-iris"), noiseClusters: true }),
      join(tmp, "wrong-1"),
    ),
    /holds the front's IRIs, and this stitch has the labels-only sender in the front's place/,
  );
  await assert.rejects(
    runStitch(smallStitchConfig(a, b, { mode: "iris", iris: join(tmp, "labels-iris") }), join(tmp, "wrong-2")),
    /holds the labels-only sender's IRIs \(their starts\), not the front's/,
  );
});

test("noise nulls in a plan: the front's point shapes only (replicate 0's model), one per architecture, in every mode of its pairs, named apart", () => {
  const exp = parseExperiment(
    `
name: noise
dataset: { name: fashion-mnist, limit: 300, testLimit: 100 }
models:
  clean-s0: { arch: resnet18, width: 0.0625, seed: 0, epochs: 1 }
  clean-s1: { arch: resnet18, width: 0.0625, seed: 1, epochs: 1 }
  pixel-s1: { arch: resnet18, width: 0.0625, seed: 1, epochs: 1, shortcut: pixel }
  mine: { checkpoint: mine.safetensors }
pairs:
  - { front: clean-s0, back: clean-s0, relation: identical, replicates: 1 }
  - { front: clean-s1, back: clean-s0, relation: cross-seed }
  - { front: pixel-s1, back: clean-s0, relation: cross-bias }
  - { front: mine, back: clean-s0, relation: loaded }
points: [layer2.1]
objectives: [slm]
replicates: 2
nulls: [untrained, noise]
iris: { limit: 32, steps: 3, batchSize: 32 }
stitch: { limit: 32, epochs: 1, batchSize: 32 }
`,
    join(tmp, "noise.yaml"),
  );
  const { experiment, notes } = withNulls(exp);
  assert.deepEqual(
    experiment.pairs.slice(4).map((p) => [p.front, p.relation, p.modes ?? "all"]),
    [
      ["clean-s1~untrained", "null:untrained", "all"],
      ["clean-s1", "null:noise", "all"],
      ["mine", "null:noise", "all"],
    ],
    "the Pixel front shares the clean one's architecture: one noise null; the loaded front has its own",
  );
  assert.deepEqual(notes, [
    "mine: no untrained null, since a model loaded from a file has no recipe to start or retrain it from",
  ]);
  // Fronts of other seeds (or recipes) of one architecture share one noise null: it reads shapes only.
  const SEEDS = `
name: seeds
dataset: { name: fashion-mnist, limit: 300, testLimit: 100 }
models:
  s0: { arch: resnet18, width: 0.0625, seed: 0, epochs: 1 }
  s1: { arch: resnet18, width: 0.0625, seed: 1, epochs: 1 }
  s2: { arch: resnet18, width: 0.0625, seed: 2, epochs: 3, lr: 0.05 }
  wide: { arch: resnet18, width: 0.125, seed: 3, epochs: 1 }
pairs:
  - { front: s1, back: s0, relation: cross-seed-1 }
  - { front: s2, back: s0, relation: cross-seed-2 }
  - { front: wide, back: s0, relation: wider }
points: [layer2.1]
objectives: [slm]
nulls: [noise]
stitch: { limit: 32, epochs: 1, batchSize: 32 }
`;
  const seeds = parseExperiment(SEEDS, join(tmp, "seeds.yaml"));
  assert.deepEqual(
    withNulls(seeds)
      .experiment.pairs.slice(3)
      .map((p) => p.front),
    ["s1", "wide"],
    "one per architecture: s1 and s2 share theirs, the wider model has its own",
  );
  // Beside adversarial stitching the noise null is left out, and the plan says why.
  const adversarial = withNulls({
    ...seeds,
    stitch: { ...seeds.stitch, adversarial: { eps: 0.03, step: 0.01, steps: 2, fraction: 1, randomStart: true } },
  });
  assert.equal(adversarial.experiment.pairs.length, 3);
  assert.deepEqual(adversarial.notes, [
    "nulls.kinds: noise is not stitched where stitch.adversarial is set (its features do not depend on the image)",
  ]);
  // Beside robust scores, the noise null is stitched and scored without attacks (it has no gradient to the image).
  const robust = planExperiment(
    parseExperiment(
      SEEDS.replace(
        "stitch: { limit: 32, epochs: 1, batchSize: 32 }",
        "stitch: { limit: 32, epochs: 1, batchSize: 32, robustEval: { steps: 2 } }",
      ),
      join(tmp, "seeds.yaml"),
    ),
    join(tmp, "seeds.yaml"),
  );
  const configOf = (relation: string) =>
    robust.stitches
      .filter((s) => s.relation === relation)
      .map((s) => ((robust.tasks.find((t) => t.key === s.key) as { spec: StitchTask }).spec as StitchTask).config);
  const noiseConfigs = configOf("null:noise");
  const realConfigs = configOf("cross-seed-1");
  assert.ok(noiseConfigs.length > 0 && realConfigs.length > 0);
  assert.ok(noiseConfigs.every((c) => c.robustEval === null && c.noiseClusters === true));
  assert.ok(realConfigs.every((c) => c.robustEval !== null));
  // nulls.modes sets the network nulls' modes; the labels-only sender costs no descent and takes its pairs'.
  const standardOnly = withNulls({ ...exp, nulls: { kinds: ["untrained", "noise"], modes: ["standard"] } });
  assert.deepEqual(
    standardOnly.experiment.pairs.slice(4).map((p) => [p.relation, p.modes ?? "all"]),
    [
      ["null:untrained", ["standard"]],
      ["null:noise", "all"],
      ["null:noise", "all"],
    ],
  );
  const exp2 = {
    ...exp,
    models: Object.fromEntries(Object.entries(exp.models).filter(([k]) => k !== "mine")),
    pairs: exp.pairs.slice(0, 3),
  };
  const plan = planExperiment(exp2, join(tmp, "noise.yaml"));
  const noise = plan.stitches.filter((s) => s.relation === "null:noise");
  assert.deepEqual([...new Set(noise.map((s) => s.front))], ["clean-s1~noise"]);
  assert.deepEqual([...new Set(noise.map((s) => s.mode))], ["standard", "iris"]);
  // Its IRI sets are the sender's own (their starts), named for it and keyed apart from the front's.
  const irisTasks = plan.tasks.filter((t) => t.kind === "iris" && t.label.startsWith("iris clean-s1~noise @ layer2.1"));
  assert.equal(irisTasks.length, 2, irisTasks.map((t) => t.label).join("; "));
  assert.ok(irisTasks.every((t) => (t.spec as { noiseClusters?: true }).noiseClusters === true));
  // The runner hands every field of the task's spec (what its key hashes) to runIris.
  const spec = irisTasks[0]?.spec as IrisTask;
  const cfg = irisConfigOf(join(tmp, "cache"), spec, "cpu");
  assert.equal(cfg.noiseClusters, true);
  const { kind: _k, front: _f, ...fields } = spec;
  for (const [k, v] of Object.entries(fields)) assert.deepEqual((cfg as unknown as Record<string, unknown>)[k], v, k);
  const standardNoise = noise.filter((s) => s.mode === "standard");
  assert.deepEqual(
    standardNoise.map((s) => s.replicate),
    [0, 1],
  );
  const specs = standardNoise.map((s) => plan.tasks.find((t) => t.key === s.key)?.spec as StitchTask);
  assert.ok(specs.every((t) => t.config.noiseClusters === true));
  // Both replicates read replicate 0's front (its shapes), with their own seeds (their own clusters).
  assert.equal(JSON.stringify(specs[0]?.front), JSON.stringify(specs[1]?.front));
  assert.notEqual(specs[0]?.config.seed, specs[1]?.config.seed);
  const real = plan.stitches.filter((s) => s.relation === "cross-seed");
  const realSpecs = real.map((s) => plan.tasks.find((t) => t.key === s.key)?.spec as StitchTask);
  assert.ok(realSpecs.every((t) => !("noiseClusters" in t.config)));
});
