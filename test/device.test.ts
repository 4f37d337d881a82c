// Devices (torch/device.ts): a device name is parsed once, where it enters (a flag, a worker's
// argv), into the one Device type; moves to the device a tensor is already on change nothing.
import assert from "node:assert/strict";
import { test } from "node:test";
import { fileURLToPath } from "node:url";
import { deviceArg } from "../cli/device.js";
import { Linear } from "../nn/layers.js";
import * as torch from "../torch/index.js";
import { runTs } from "./helpers/cli.js";

test("parseDevice accepts cpu, cuda and cuda:N, and rejects anything else", () => {
  for (const d of ["cpu", "cuda", "cuda:0", "cuda:1", "cuda:12"]) assert.equal(torch.parseDevice(d), d);
  for (const d of ["gpu", "cuda:x", "cuda:", "cuda:1:2", "CPU", " cpu", "cpu:0", "mps", "cuda:-1", ""])
    assert.throws(() => torch.parseDevice(d), new RegExp(`device must be cpu, cuda or cuda:N, not '${d}'`), d);
  assert.throws(() => deviceArg("gpu"), /^Error: --device must be cpu, cuda or cuda:N, not 'gpu'$/);
  assert.equal(deviceArg("cuda:1"), "cuda:1");
});

test("isCuda and cudaIndex read a Device without comparing strings at the call site", () => {
  assert.equal(torch.isCuda("cpu"), false);
  assert.equal(torch.isCuda("cuda"), true);
  assert.equal(torch.isCuda("cuda:3"), true);
  assert.equal(torch.cudaIndex("cpu"), null);
  assert.equal(torch.cudaIndex("cuda"), null);
  assert.equal(torch.cudaIndex("cuda:3"), 3);
  assert.equal(torch.isDevice("cuda:2"), true);
  assert.equal(torch.isDevice("float32"), false);
});

test("a tensor's device is a Device, and moving a module to its own device keeps its tensors", () => {
  const t = torch.zeros([2]);
  assert.equal(torch.parseDevice(t.device), "cpu");
  const m = new Linear(3, 2);
  const before = m.parameters();
  m.to("cpu");
  const after = m.parameters();
  assert.equal(after.length, before.length);
  for (let i = 0; i < before.length; i++) assert.equal(after[i], before[i], "the same tensor, not a copy");
  assert.deepEqual(t.to("cpu").tolist(), [0, 0]);
});

test("a worker process parses its --device as the CLI does", () => {
  const worker = fileURLToPath(new URL("../experiments/worker.ts", import.meta.url));
  const r = runTs(worker, ["somekey", "--cache", "/nonexistent", "--device", "gpu"]);
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /device must be cpu, cuda or cuda:N, not 'gpu'/);
});
