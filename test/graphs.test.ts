// CUDA graphs (torch/graphs.ts, native/src/graphs.cc): where they can run (a CUDA build on a
// GPU) a recorded step must give what the eager step gives; everywhere else the step must fall
// back to running eagerly, with the same results, and say why. Each case runs on whichever
// machine the suite is on: a CPU build checks the fallback, a GPU build the graphs as well.
import assert from "node:assert/strict";
import { test } from "node:test";
import { createModel } from "../models/registry.js";
import { IRI_DEFAULTS } from "../stitch/iri-options.js";
import { generateIriBatch } from "../stitch/iris.js";
import * as torch from "../torch/index.js";
import { native } from "../torch/native.js";
import { settledMemory } from "./helpers/memory.js";

function withEnv<T>(value: string | undefined, fn: () => T): T {
  const before = process.env.STITCHLAB_CUDA_GRAPHS;
  if (value === undefined) delete process.env.STITCHLAB_CUDA_GRAPHS;
  else process.env.STITCHLAB_CUDA_GRAPHS = value;
  try {
    return fn();
  } finally {
    if (before === undefined) delete process.env.STITCHLAB_CUDA_GRAPHS;
    else process.env.STITCHLAB_CUDA_GRAPHS = before;
  }
}

test("STITCHLAB_CUDA_GRAPHS is 0, 1 or unset; anything else is refused, naming it", () => {
  assert.equal(
    withEnv(undefined, () => torch.graphsRequested()),
    false,
  );
  assert.equal(
    withEnv("0", () => torch.graphsRequested()),
    false,
  );
  assert.equal(
    withEnv("1", () => torch.graphsRequested()),
    true,
  );
  assert.throws(() => withEnv("yes", () => torch.graphsRequested()), /STITCHLAB_CUDA_GRAPHS=yes: expected 0 or 1/);
});

test("graphs say why they cannot run: on the CPU, and in a build without them", () => {
  assert.match(torch.graphsUnavailable("cpu") ?? "", /the device is cpu/);
  if (!native.graphsBuilt()) {
    assert.match(torch.graphsUnavailable("cuda") ?? "", /no CUDA graphs/);
    assert.throws(() => native.graphCreate(0), /CUDA graphs: this build/);
  }
});

/** A fixed-shape step: x <- clamp(x - 0.1 * sign(d/dx ||W x||), -1, 1), its loss written to `out`. */
function stepOn(device: torch.Device) {
  torch.manualSeed(3);
  // Made in a scope, so that no garbage is left for the collector to free during the steps.
  const { w, x, out } = torch.tidy(() => ({
    w: torch.randn([8, 8]).to(device),
    x: torch.randn([8, 4]).to(device).requiresGrad_(true),
    out: torch.zeros([], { device }),
  }));
  const body = () => {
    const loss = w.matmul(x).norm();
    torch.noGrad(() => out.copy_(loss));
    const [g] = torch.grad(loss, x);
    torch.noGrad(() => {
      x.sub_((g as torch.Tensor).sign().mul(0.1));
      x.clamp_(-1, 1);
    });
  };
  return { x, out, body, dispose: () => torch.dispose([w, x, out]) };
}

test("a graphed step equals the eager step, replay after replay; off a GPU it runs eagerly", () => {
  const device = torch.cuda.isAvailable() ? "cuda" : "cpu";
  const eager = stepOn(device);
  const graphedRun = stepOn(device);
  const plain = new torch.GraphedStep(device, eager.body, { graphs: false });
  const graphed = new torch.GraphedStep(device, graphedRun.body, { graphs: true, warmup: 2 });
  assert.equal(graphed.graphed, torch.graphsUnavailable(device) === null);
  const live = settledMemory().liveHandles;
  try {
    for (let i = 0; i < 6; i++) {
      plain.step();
      graphed.step();
      assert.equal(graphedRun.out.item(), eager.out.item(), `loss at step ${i}`);
      assert.deepEqual(graphedRun.x.toTypedArray(), eager.x.toTypedArray(), `iterate after step ${i}`);
    }
    assert.equal(settledMemory().liveHandles, live, "each step frees what it made");
  } finally {
    plain.dispose();
    graphed.dispose();
    eager.dispose();
    graphedRun.dispose();
  }
});

test("IRIs asked for with CUDA graphs equal those without, on any device", () => {
  const device = torch.cuda.isAvailable() ? "cuda" : "cpu";
  torch.manualSeed(0);
  const front = createModel("resnet18", { width: 4, numClasses: 10 });
  front.to(device);
  const x = torch.keep(torch.randint(0, 256, [4, 3, 32, 32]).to("uint8").to(device));
  const norm = { mean: [0.5, 0.5, 0.5], std: [0.25, 0.25, 0.25] };
  const opts = { ...IRI_DEFAULTS, steps: 6 };
  const residuals: number[][] = [[], []];
  const run = (env: string, k: 0 | 1) =>
    withEnv(env, () => generateIriBatch(front, "layer2.1", x, norm, opts, 7, (_, r) => residuals[k]?.push(r)));
  const a = run("0", 0);
  const b = run("1", 1);
  try {
    assert.deepEqual(residuals[1], residuals[0], "the same residual at every step");
    assert.deepEqual(b.images.toTypedArray(), a.images.toTypedArray(), "the same images");
    assert.deepEqual(b.residuals, a.residuals);
  } finally {
    torch.dispose([a.images, b.images, x]);
    front.dispose();
  }
});
