// The benchmarks stay runnable: a quick run of each on both sides (engine: batch 8, one timed
// iteration of every workload; train and stitch: batch 16, two timed steps; iris: batch 16,
// two timed calls of two steps; slurm: one held submission). Real-scale timing is
// `npm run bench -- <name>`, never a test. engine and iris run with --device cpu here; on a
// machine whose libtorch cannot use a GPU, --device cuda must stop at once with one clear message.
import assert from "node:assert/strict";
import { existsSync, readFileSync, rmSync, statSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { parse as parseYaml } from "yaml";
import * as torch from "../torch/index.js";
import { runTs } from "./helpers/cli.js";
import { pythonTorchVersion, skipUnlessPytorch } from "./helpers/pytorch.js";

const root = join(import.meta.dirname, "..");
const bench = (args: string[]) => runTs(join(root, "bench", "run.ts"), args, { cwd: root });

/**
 * Runs a quick benchmark after deleting its result file (bench/results/NAME-quick.json, which an
 * earlier run may have left), so that only this run's file can pass; returns the run and the file.
 */
function quickRun(name: string, args: string[]) {
  const file = join(root, "bench", "results", `${name}-quick.json`);
  rmSync(file, { force: true });
  const started = Date.now();
  const r = bench(args);
  assert.equal(r.status, 0, r.stderr);
  assert.ok(existsSync(file), `${file} written by this run`);
  // timing-rule: a file's age against the run's start (written by this run), no bound on how long it took.
  assert.ok(statSync(file).mtimeMs >= started - 1000, `${file} is fresh`);
  return { r, out: JSON.parse(readFileSync(file, "utf8")) };
}

/** Python's torch.__version__, as only the Python side of a benchmark can report it; null without PyTorch. */
const PYTORCH = skipUnlessPytorch() ? null : pythonTorchVersion();

/** The run's title names the PyTorch that Python reported (its greeting): the PyTorch side ran. */
function ranPytorch(stdout: string): void {
  assert.ok(stdout.includes(`(PyTorch ${PYTORCH})`), `no "(PyTorch ${PYTORCH})" in the title:\n${stdout}`);
}

/** A ratio of two timings of the same work on one machine: finite and within a sane band. */
function saneRatio(ratio: number, what: string): void {
  assert.ok(Number.isFinite(ratio) && ratio > 0.05 && ratio < 20, `${what}: ratio ${ratio}`);
}

test("npm run bench -- engine --quick --device cpu runs all four workloads against PyTorch", {
  skip: skipUnlessPytorch(),
}, () => {
  const { r, out } = quickRun("engine", ["engine", "--quick", "--device", "cpu"]);
  ranPytorch(r.stdout);
  assert.deepEqual(
    out.workloads.map((w: { name: string }) => w.name),
    ["forward", "backward_input", "train_step", "vit_backward_input"],
  );
  for (const w of out.workloads) {
    assert.ok(w.ms > 0 && w.ms_pytorch > 0, `${w.name} timed on both sides`);
    saneRatio(w.ratio, w.name);
  }
  assert.equal(out.device, "cpu");
  assert.equal(out.gpu, undefined, "a GPU's name only for --device cuda");
  assert.equal(out.batch, 8);
  assert.ok(out.threads >= 1);
  assert.equal(typeof out.libtorch, "string");
  assert.match(r.stdout, /^engine on cpu, batch 8; libtorch /m, "the table's title names the device");
});

test("npm run bench -- train --quick trains ResNet-18 with the data pipeline against PyTorch", {
  skip: skipUnlessPytorch(),
}, () => {
  const { r, out } = quickRun("train", ["train", "--quick"]);
  ranPytorch(r.stdout);
  assert.ok(out.ms > 0 && out.ms_pytorch > 0, "timed on both sides");
  saneRatio(out.ratio, "train");
  assert.ok(Math.abs(out.images_per_second - (out.batch * 1000) / out.ms) < 0.1, "images/s from ms");
  assert.ok(Math.abs(out.images_per_second_pytorch - (out.batch * 1000) / out.ms_pytorch) < 0.1);
  assert.equal(out.batch, 16);
  assert.equal(out.steps, 2);
  assert.ok(out.threads >= 1);
  assert.equal(typeof out.libtorch, "string");
});

test("npm run bench -- iris --quick --device=cpu generates IRIs at ResNet-18's middle point against PyTorch", {
  skip: skipUnlessPytorch(),
}, () => {
  const { r, out } = quickRun("iris", ["iris", "--quick", "--device=cpu", "--steps=3"]);
  ranPytorch(r.stdout);
  assert.equal(out.torch, PYTORCH, "the PyTorch version Python reported");
  assert.ok(out.ms > 0 && out.ms_pytorch > 0, "timed on both sides");
  saneRatio(out.ratio, "iris");
  assert.ok(Math.abs(out.ms - out.ms_per_call / out.steps_per_call) < 0.01, "ms is per step");
  assert.ok(Math.abs(out.ms_pytorch - out.ms_per_call_pytorch / out.steps_per_call) < 0.01);
  assert.equal(out.batch, 16);
  assert.equal(out.steps_per_call, 3, "--steps");
  assert.equal(out.calls, 2);
  assert.equal(out.point, "layer2.1");
  assert.equal(out.cuda_graphs, false, "no CUDA graphs on the CPU");
  assert.equal(out.device, "cpu");
  assert.equal(out.gpu, undefined, "a GPU's name only for --device cuda");
  assert.ok(out.threads >= 1);
  assert.equal(typeof out.libtorch, "string");
  assert.match(r.stdout, /^IRI generation on cpu, /m, "the table's title names the device");
});

test("engine and iris --device cuda stop at once, before PyTorch starts, where this libtorch cannot use a GPU", {
  skip: torch.cuda.isAvailable() && "this libtorch sees a GPU",
}, () => {
  // The GPU runs' result files (never the CPU ones), left as they were: absent, or untouched.
  const stamp = (path: string) => (existsSync(path) ? statSync(path).mtimeMs : null);
  for (const [name, device] of [
    ["engine", "cuda"],
    ["iris", "cuda:1"],
  ]) {
    const files = [`${name}-cuda-quick.json`, `${name}-cuda.json`].map((f) => join(root, "bench", "results", f));
    const before = files.map(stamp);
    const r = bench([name, "--quick", "--device", device]);
    assert.equal(r.status, 1, r.stderr);
    const why = torch.buildInfo().builtWithCuda
      ? "libtorch sees no GPU \\(driver\\? CUDA_VISIBLE_DEVICES\\?\\)"
      : "this libtorch is a CPU build";
    assert.match(
      r.stderr,
      new RegExp(`^${name}: --device ${device}: ${why}.*; \`stitchlab doctor\` shows what this install has$`, "m"),
    );
    assert.equal(r.stderr.trim().split("\n").length, 1, `one line:\n${r.stderr}`);
    assert.deepEqual(files.map(stamp), before, "no result file written");
  }
});

test("engine and iris reject a malformed --device, a missing value and an unknown option", () => {
  const cases: [string[], RegExp][] = [
    [["engine", "--device", "tpu"], /^engine: --device must be cpu, cuda or cuda:N, not 'tpu'$/m],
    [["iris", "--batch"], /^iris: --batch needs a value \(N\)$/m],
    [["iris", "--batch=0"], /^iris: --batch 0: need a positive integer$/m],
    [["iris", "--steps=0"], /^iris: --steps 0: need a positive integer$/m],
    [
      ["engine", "--bogus"],
      /^engine: unknown option '--bogus'; options: --quick, --device cpu\|cuda\|cuda:N, --batch N, --workloads a,b, --iters N$/m,
    ],
  ];
  for (const [args, message] of cases) {
    const r = bench(args);
    assert.equal(r.status, 1, args.join(" "));
    assert.match(r.stderr, message);
  }
});

test("npm run bench -- stitch --quick trains a stitching layer with FuLA against PyTorch", {
  skip: skipUnlessPytorch(),
}, () => {
  const { r, out } = quickRun("stitch", ["stitch", "--quick"]);
  ranPytorch(r.stdout);
  assert.equal(out.torch, PYTORCH, "the PyTorch version Python reported");
  assert.ok(out.ms > 0 && out.ms_pytorch > 0, "timed on both sides");
  saneRatio(out.ratio, "stitch");
  assert.ok(Math.abs(out.images_per_second - (out.batch * 1000) / out.ms) < 0.1, "images/s from ms");
  assert.equal(out.batch, 16);
  assert.equal(out.steps, 2);
  assert.equal(out.point, "layer2.1");
  assert.deepEqual(out.fula_points, ["layer2.1", "layer3.0", "layer3.1", "layer4.0", "layer4.1"]);
  assert.ok(out.threads >= 1);
  assert.equal(typeof out.libtorch, "string");
});

test("an unknown benchmark name is one clear error listing the known ones", () => {
  const r = bench(["nope"]);
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /unknown benchmark 'nope'; known benchmarks: engine, train, demo, iris, stitch/);
});

test("npm run bench -- slurm --quick submits a graph to a private Slurm and times it", () => {
  const { out } = quickRun("slurm", ["slurm", "--quick"]);
  assert.equal(out.submit_small.jobs, 9, "8 tasks and the report job");
  assert.ok(out.submit_small.submit_s > 0 && out.submit_small.status_s > 0);
  assert.ok(Math.abs(out.submit_small.ms_per_job - (out.submit_small.submit_s * 1000) / 9) < 2);
});

test("the protocol study's settings are valid experiments at both scales: one factor grown at a time, T's steps as asked", async () => {
  const { FACTORS, settingYaml, demoScale, fullScale } = await import("../bench/protocol.js");
  const { parseExperiment } = await import("../experiments/spec.js");
  const { COMPARE_DEFAULTS } = await import("../experiments/compare.js");
  const demo = parseYaml(readFileSync(join(import.meta.dirname, "..", "presets", "demo.yaml"), "utf8")) as {
    iris: Record<string, unknown>;
    stitch: Record<string, unknown>;
  };
  const scales = [demoScale(3), fullScale("/models/a.safetensors", "/models/b.safetensors", 1)];
  const settings = Object.values(FACTORS).flat();
  assert.deepEqual(
    settings.map((s) => s.name),
    [
      "images-48",
      "images-192",
      "images-768",
      "steps-120",
      "steps-480",
      "steps-1920",
      "recipe-tight-image",
      "recipe-tight-noise",
      "recipe-reference",
      "noise-steps-480",
      "settled",
      "shipped",
    ],
  );
  for (const scale of scales)
    for (const s of settings) {
      const e = parseExperiment(settingYaml(s, scale), join("/tmp", `${s.name}.yaml`));
      if (s.recipe === "shipped") {
        // The scale's defaults as they ship: the demo preset's, or compare's.
        const [iris, stitch] =
          scale.name === "demo" ? [demo.iris, demo.stitch] : [COMPARE_DEFAULTS.iris, COMPARE_DEFAULTS.stitch];
        for (const [k, v] of Object.entries(iris))
          assert.deepEqual(e.iris[k as keyof typeof e.iris], v, `${scale.name} iris.${k}`);
        for (const [k, v] of Object.entries(stitch))
          assert.deepEqual(e.stitch[k as keyof typeof e.stitch], v, `${scale.name} stitch.${k}`);
        continue;
      }
      assert.equal(e.iris.limit, s.images, s.name);
      assert.equal(e.stitch.limit, s.images, s.name);
      // T's optimiser steps: epochs times the whole batches of 48 in its images, within a batch's worth.
      const steps = (e.stitch.epochs as number) * Math.floor(s.images / 48);
      assert.ok(Math.abs(steps - s.steps) <= Math.floor(s.images / 48), `${s.name}: ${steps} steps for ${s.steps}`);
      // The reference's recipe has no target (every image its 200 signed steps); the others stop at 0.2.
      assert.equal(e.iris.target, s.recipe === "reference" ? undefined : 0.2, s.name);
      assert.equal(e.iris.start, s.recipe === "tight-image" ? "image" : "uniform", s.name);
    }
});

test("the protocol study's distance from the settled setting: the largest shift of a mean, where, and each verdict that differs", async () => {
  const { distancesFromSettled, verdictsOf } = await import("../bench/protocol.js");
  const cell = (setting: string, pair: string, point: string, mode: string, mean: number, halfWidth = 0.02) => ({
    setting,
    factor: setting === "settled" ? "settled" : "recipe",
    pair,
    point,
    mode,
    n: 3,
    mean,
    halfWidth,
    residual: null,
    descentSteps: null,
  });
  const run = (setting: string, seedIris: number, biasIris: number) => [
    cell(setting, "identical", "layer4.1", "standard", 0.98),
    cell(setting, "identical", "layer4.1", "iris", 0.99),
    cell(setting, "cross-seed", "layer4.1", "standard", 0.9),
    cell(setting, "cross-seed", "layer4.1", "iris", seedIris),
    cell(setting, "cross-bias", "layer4.1", "standard", 0.78),
    cell(setting, "cross-bias", "layer4.1", "iris", biasIris),
  ];
  // Settled: cross-seed 0.5 and cross-bias 0.2 invariance-aware, both apart from standard, and apart from each other.
  assert.deepEqual(verdictsOf(run("settled", 0.5, 0.2)), {
    "cross-seed layer4.1: standard vs invariance-aware": "apart",
    "cross-bias layer4.1: standard vs invariance-aware": "apart",
    "cross-seed vs cross-bias layer4.1: invariance-aware": "higher",
    control: "passed",
  });
  const [near, far] = distancesFromSettled([
    ...run("settled", 0.5, 0.2),
    ...run("near", 0.53, 0.21),
    // Cross-seed at 0.88 is close to its standard 0.90, and cross-bias at 0.5 overlaps nothing new.
    ...run("far", 0.88, 0.5),
  ]);
  assert.equal(near.setting, "near");
  assert.ok(Math.abs(near.maxAbs - 0.03) < 1e-12 && near.at === "cross-seed layer4.1 iris", JSON.stringify(near));
  assert.deepEqual(near.differ, []);
  assert.ok(Math.abs(far.maxAbs - 0.38) < 1e-12, JSON.stringify(far));
  assert.deepEqual(far.differ, ["cross-seed layer4.1: standard vs invariance-aware: close (settled: apart)"]);
  assert.deepEqual(distancesFromSettled(run("near", 0.5, 0.2)), [], "no settled run, no distances");
});
