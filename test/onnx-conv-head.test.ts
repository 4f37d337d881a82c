// A graph whose head is convolutional: torchvision's squeezenet1_1 ends in a 1x1 convolution to
// the classes, a ReLU and average pooling, so its last cut before the output is [N, 10, 1, 1]
// class scores, not one vector per image. It loads, its Fire modules are ordinary points that
// match PyTorch and stitch, and only the head's input ('head', an embedding) is refused where
// asked for, with one message saying why; `layers` and the planner say it too.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, test } from "node:test";
import { normalizationFor } from "../data/transforms.js";
import { checkPair, type PlanContext, planModels } from "../experiments/plan.js";
import { parseExperiment } from "../experiments/spec.js";
import { OnnxModel } from "../models/onnx/model.js";
import { parseObjective } from "../stitch/config.js";
import { evaluateStitch } from "../stitch/evaluate.js";
import { StitchedModel } from "../stitch/stitched.js";
import { trainStitch } from "../stitch/train.js";
import * as torch from "../torch/index.js";
import { runCli } from "./helpers/cli.js";
import { PYTHON, skipUnlessTorchvision } from "./helpers/pytorch.js";
import { stitchTrainOptions } from "./helpers/stitch.js";

type Tensor = torch.Tensor;

const skip = skipUnlessTorchvision();
const SIDE = 64;
/** A Fire module in the middle of the features (256 x 7 x 7 at 64 px). */
const FIRE = "features.7";
/** The refusal, as every route that asks for the head's input meets it. */
const REFUSAL =
  /the head's input, 'classifier\.3', is \[N, 10, 1, 1\] \(a convolutional head\), not one vector per image: there is no 'head' point/;

// Exported as the README says (the TorchScript exporter, a dynamic batch axis), with PyTorch's
// answers on the same weights: the features at FIRE, the logits, and the tail from FIRE on other
// features than the front's (what forwardFrom must compute from a cut alone).
const EXPORT = `
import json, sys, torch, torchvision
sys.path.insert(0, sys.argv[2])
from stitchlab import torchscript_export
torch.manual_seed(0)
torch.set_num_threads(1)
m = torchvision.models.squeezenet1_1(num_classes=10).eval()
x = torch.rand(3, 3, ${SIDE}, ${SIDE})
torch.onnx.export(m, x, sys.argv[1] + "/squeezenet.onnx", opset_version=17, input_names=["image"],
                  output_names=["logits"], dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}},
                  **torchscript_export())
with torch.no_grad():
    h = m.features[:8](x)
    other = torch.relu(torch.randn_like(h))
    tail = torch.flatten(m.classifier(m.features[8:](other)), 1)
    ref = {"x": x, "h": h, "logits": m(x), "other": other, "tail": tail}
json.dump({k: {"shape": list(v.shape), "values": v.flatten().tolist()} for k, v in ref.items()},
          open(sys.argv[1] + "/squeezenet.json", "w"))
`;

interface Stored {
  shape: number[];
  values: number[];
}

/** max |a - b| / max |b|: the error relative to the reference's scale. */
function relError(ours: Tensor, ref: Stored): number {
  assert.deepEqual(ours.shape, ref.shape, "shapes differ");
  const a = ours.detach().contiguous().toTypedArray() as Float32Array;
  let diff = 0;
  let scale = 1e-12;
  for (let i = 0; i < ref.values.length; i++) {
    diff = Math.max(diff, Math.abs((a[i] as number) - (ref.values[i] as number)));
    scale = Math.max(scale, Math.abs(ref.values[i] as number));
  }
  return diff / scale;
}

const dir = mkdtempSync(join(tmpdir(), "stitchlab-onnx-conv-head-"));
const file = join(dir, "squeezenet.onnx");
let ref: Record<string, Stored> = {};
let model: OnnxModel | undefined;
before(() => {
  if (skip) return;
  const r = spawnSync(PYTHON, ["-c", EXPORT, dir, join(import.meta.dirname, "..", "python")], {
    encoding: "utf8",
    timeout: 300_000,
  });
  assert.equal(r.status, 0, r.stderr);
  ref = JSON.parse(readFileSync(join(dir, "squeezenet.json"), "utf8"));
  model = new OnnxModel(file);
  model.eval();
});
after(() => {
  model?.dispose();
  rmSync(dir, { recursive: true, force: true });
});

const stored = (s: Stored) => torch.tensor(s.values, { shape: s.shape });

describe("a graph with a convolutional head (torchvision's squeezenet1_1, 10 classes)", { skip }, () => {
  test("loads; its Fire modules are points, and forwardTo / forwardFrom at one equal PyTorch's features and tail", () => {
    const m = model as OnnxModel;
    assert.equal(m.config.numClasses, 10);
    const names = m.stitchPoints.map((p) => p.name);
    for (const k of [3, 4, 6, 7, 9, 10, 11, 12]) assert.ok(names.includes(`features.${k}`), `features.${k} is a point`);
    assert.deepEqual(m.stitchPoint(FIRE), { kind: "cnn", name: FIRE, channels: 256, height: 7, width: 7 });
    torch.tidy(() =>
      torch.noGrad(() => {
        const x = stored(ref.x as Stored);
        const h = m.forwardTo(x, FIRE);
        assert.ok(relError(h, ref.h as Stored) < 1e-4, `forwardTo ${FIRE}: ${relError(h, ref.h as Stored)}`);
        const back = m.forwardFrom(h, FIRE);
        assert.ok(
          relError(back, ref.logits as Stored) < 1e-4,
          `back from ${FIRE}: ${relError(back, ref.logits as Stored)}`,
        );
        assert.ok(relError(m.forward(x), ref.logits as Stored) < 1e-4, "logits");
        // Features the front did not make: the tail runs from the cut alone.
        const tail = m.forwardFrom(stored(ref.other as Stored), FIRE);
        assert.ok(
          relError(tail, ref.tail as Stored) < 1e-4,
          `forwardFrom ${FIRE}: ${relError(tail, ref.tail as Stored)}`,
        );
      }),
    );
  });

  test("stitched into itself at a Fire module: least squares finds the identity, the stitched logits are the model's, and T trains an epoch", () => {
    const m = model as OnnxModel;
    // 64 random images in 10 classes, drawn from a fixed seed: the stitch of a model into itself
    // needs no real data.
    const n = 64;
    torch.manualSeed(0);
    const data = torch.tidy(() => ({
      images: torch.keep(torch.rand([n, 3, SIDE, SIDE]).mul(255).floor().to("uint8")),
      labels: torch.keep(torch.randint(0, 10, [n])),
      classes: Array.from({ length: 10 }, (_, i) => String(i)),
      name: "noise",
    }));
    const s = new StitchedModel(m, m, FIRE);
    const norm = normalizationFor("imagenet");
    try {
      // T from least squares on the model's own features is the identity, so the stitched model
      // (front to FIRE, T, back from FIRE) gives the model's logits. Its random weights make its
      // softmax nearly uniform, so agreement scores would pass whatever T did: logits are compared.
      torch.tidy(() => {
        const x = data.images.float().div(255);
        const { residual } = s.init("lstsq", x);
        assert.ok(residual !== undefined && residual < 1e-6, `least-squares residual ${residual}`);
        const own = s.backForward(x);
        const err = relError(
          torch.noGrad(() => s.forward(x)),
          {
            shape: own.shape as number[],
            values: Array.from(own.toTypedArray() as Float32Array),
          },
        );
        assert.ok(err < 1e-4, `stitched logits against the model's: ${err}`);
      });
      const { epochLosses, initResidual } = trainStitch(
        s,
        data,
        data,
        stitchTrainOptions({
          objective: parseObjective("slm"),
          normalization: norm,
          epochs: 1,
          batchSize: 32,
          bnMode: "eval",
          initImages: 32,
        }),
      );
      assert.ok(initResidual !== null && initResidual < 1e-3, `init residual ${initResidual}`);
      assert.ok(epochLosses.length === 1 && epochLosses.every(Number.isFinite), `losses ${epochLosses}`);
      const r = evaluateStitch(s, data, { normalization: norm });
      assert.ok(Number.isFinite(r.agreementProbability), `agreement probability ${r.agreementProbability}`);
    } finally {
      s.layer.dispose();
      torch.dispose([data.images, data.labels]);
    }
  });

  test("'head' and the head's input are refused where asked for, with one message; the other points are not", () => {
    const m = model as OnnxModel;
    const x = torch.zeros([1, 3, SIDE, SIDE]);
    try {
      assert.throws(() => m.stitchPoint("head"), REFUSAL);
      // The last cut's own names are the same input: the same message, not "give 'head'".
      assert.throws(() => m.stitchPoint("classifier.3"), REFUSAL);
      assert.throws(() => m.stitchPoint("classifier"), REFUSAL);
      assert.throws(() => m.forwardTo(x, "head"), REFUSAL);
      assert.throws(() => m.embed(x), REFUSAL);
      // A stitch at the head is refused as it is built, before T or any data.
      assert.throws(() => new StitchedModel(m, m, "head"), REFUSAL);
      assert.throws(() => new StitchedModel(m, m, FIRE, "head"), REFUSAL);
      assert.ok(!m.stitchPoints.some((p) => p.name === "head"));
      // `layers` offers no 'head': the last cut keeps its name and says why it is not a point.
      const cuts = m.cutList();
      assert.ok(!cuts.some((c) => c.name === "head"));
      const last = cuts.find((c) => c.name === "classifier.3");
      assert.equal(last?.point, false);
      assert.match(
        String(last?.note),
        /the head's input is \[N, 10, 1, 1\], not one vector per image: no 'head' point/,
      );
      assert.ok(cuts.filter((c) => c.name !== "classifier.3").every((c) => c.note === null));
    } finally {
      x.dispose();
    }
  });

  test("stitchlab layers lists the Fire modules and marks the head's input as not a point, saying why", () => {
    const r = runCli(["layers", file]);
    assert.equal(r.status, 0, r.stderr);
    assert.match(r.stdout, /^features\.7 +256 x 7 x 7$/m);
    assert.match(
      r.stdout,
      /^classifier\.3 +10 x 1 x 1 +\(classifier\) +not a point: the head's input is \[N, 10, 1, 1\], not one vector per image: no 'head' point$/m,
    );
    assert.doesNotMatch(r.stdout, /^head /m);
  });

  test("an experiment plans the graph's points, and a pair that names 'head' is refused with the same message before any work", () => {
    const text = (points: string) => `
name: conv-head
dataset: { name: fashion-mnist }
models:
  sq: { checkpoint: ${file}, normalization: imagenet }
pairs:
  - { front: sq, back: sq, relation: identical }
points: ${points}
`;
    const fresh = (): PlanContext => ({ tasks: new Map(), problems: [] });
    const all = parseExperiment(text("all"), join(dir, "exp.yaml"));
    const ctx = fresh();
    const m = planModels(all, dir, ctx);
    assert.deepEqual(ctx.problems, []);
    const points = checkPair(all, 0, m, 10, ctx);
    assert.ok(points?.includes(FIRE) && !points.includes("head"), `points: all is ${points}`);

    const head = parseExperiment(text(`[${FIRE}, head]`), join(dir, "exp.yaml"));
    const c2 = fresh();
    assert.equal(checkPair(head, 0, planModels(head, dir, c2), 10, c2), null);
    assert.equal(c2.problems.length, 1, c2.problems.join("\n"));
    assert.match(String(c2.problems[0]), /^points: .*squeezenet\.onnx: /);
    assert.match(String(c2.problems[0]), REFUSAL);
  });
});
