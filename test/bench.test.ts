// The benchmarks stay runnable: a quick run of each on both sides (engine: batch 8, one timed
// iteration of every workload; train and stitch: batch 16, two timed steps; iris: batch 16,
// two timed calls of two steps; slurm: one held submission). Real-scale timing is
// `npm run bench -- <name>`, never a test.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { test } from "node:test";
import { skipUnlessPytorch } from "./helpers/pytorch.js";

const root = join(import.meta.dirname, "..");
const bench = (args: string[]) =>
  spawnSync(process.execPath, ["--import", "tsx", join(root, "bench", "run.ts"), ...args], {
    encoding: "utf8",
    cwd: root,
  });

test("npm run bench -- engine --quick runs all four workloads against PyTorch", { skip: skipUnlessPytorch() }, () => {
  const r = bench(["engine", "--quick"]);
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(readFileSync(join(root, "bench", "results", "engine-quick.json"), "utf8"));
  assert.deepEqual(
    out.workloads.map((w: { name: string }) => w.name),
    ["forward", "backward_input", "train_step", "vit_backward_input"],
  );
  for (const w of out.workloads) {
    assert.ok(w.ms > 0 && w.ms_pytorch > 0, `${w.name} timed on both sides`);
    assert.ok(Math.abs(w.ratio - w.ms / w.ms_pytorch) < 1e-3, `${w.name} ratio is ms / ms_pytorch`);
  }
  assert.ok(out.threads >= 1);
  assert.equal(typeof out.libtorch, "string");
});

test("npm run bench -- train --quick trains ResNet-18 with the data pipeline against PyTorch", {
  skip: skipUnlessPytorch(),
}, () => {
  const r = bench(["train", "--quick"]);
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(readFileSync(join(root, "bench", "results", "train-quick.json"), "utf8"));
  assert.ok(out.ms > 0 && out.ms_pytorch > 0, "timed on both sides");
  assert.ok(Math.abs(out.ratio - out.ms / out.ms_pytorch) < 1e-3, "ratio is ms / ms_pytorch");
  assert.ok(Math.abs(out.images_per_second - (out.batch * 1000) / out.ms) < 0.1, "images/s from ms");
  assert.ok(Math.abs(out.images_per_second_pytorch - (out.batch * 1000) / out.ms_pytorch) < 0.1);
  assert.equal(out.batch, 16);
  assert.equal(out.steps, 2);
  assert.ok(out.threads >= 1);
  assert.equal(typeof out.libtorch, "string");
});

test("npm run bench -- iris --quick generates IRIs at ResNet-18's middle point against PyTorch", {
  skip: skipUnlessPytorch(),
}, () => {
  const r = bench(["iris", "--quick"]);
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(readFileSync(join(root, "bench", "results", "iris-quick.json"), "utf8"));
  assert.ok(out.ms > 0 && out.ms_pytorch > 0, "timed on both sides");
  assert.ok(Math.abs(out.ratio - out.ms / out.ms_pytorch) < 1e-3, "ratio is ms / ms_pytorch");
  assert.ok(Math.abs(out.ms - out.ms_per_call / out.steps_per_call) < 0.01, "ms is per step");
  assert.ok(Math.abs(out.ms_pytorch - out.ms_per_call_pytorch / out.steps_per_call) < 0.01);
  assert.equal(out.batch, 16);
  assert.equal(out.steps_per_call, 2);
  assert.equal(out.calls, 2);
  assert.equal(out.point, "layer2.1");
  assert.ok(out.threads >= 1);
  assert.equal(typeof out.libtorch, "string");
  assert.equal(typeof out.torch, "string");
});

test("npm run bench -- stitch --quick trains a stitching layer with FuLA against PyTorch", {
  skip: skipUnlessPytorch(),
}, () => {
  const r = bench(["stitch", "--quick"]);
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(readFileSync(join(root, "bench", "results", "stitch-quick.json"), "utf8"));
  assert.ok(out.ms > 0 && out.ms_pytorch > 0, "timed on both sides");
  assert.ok(Math.abs(out.ratio - out.ms / out.ms_pytorch) < 1e-3, "ratio is ms / ms_pytorch");
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
  const r = bench(["slurm", "--quick"]);
  assert.equal(r.status, 0, r.stderr);
  const out = JSON.parse(readFileSync(join(root, "bench", "results", "slurm-quick.json"), "utf8"));
  assert.equal(out.submit_small.jobs, 9, "8 tasks and the report job");
  assert.ok(out.submit_small.submit_s > 0 && out.submit_small.status_s > 0);
  assert.ok(Math.abs(out.submit_small.ms_per_job - (out.submit_small.submit_s * 1000) / 9) < 2);
});
