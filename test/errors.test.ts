// Bad input gives one clear Error naming what went wrong and where, and the process goes on.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import fs, { chmodSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { syncBuiltinESMExports } from "node:module";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { mock, test } from "node:test";
import { normalizationFor } from "../data/index.js";
import { withLock } from "../experiments/lock.js";
import { planExperiment } from "../experiments/plan.js";
import { readExperiment } from "../experiments/spec.js";
import { cliCommand } from "../experiments/tasks.js";
import { writeFileAtomic } from "../io/files.js";
import { loadSafetensors, saveSafetensors } from "../io/safetensors.js";
import { torchLoad } from "../io/torchsave.js";
import { AgreementMeter } from "../metrics/agreement.js";
import { loadCheckpoint, saveCheckpoint } from "../models/checkpoint.js";
import { createModel } from "../models/registry.js";
import { FrozenOutputs } from "../stitch/frozen.js";
import { StitchedModel } from "../stitch/stitched.js";
import * as torch from "../torch/index.js";

test("a shape mismatch names the operator and the shapes, and the process goes on", () => {
  const a = torch.ones([2, 3]);
  const b = torch.ones([4, 5]);
  assert.throws(
    () => a.matmul(b),
    (e: Error) =>
      /aten::matmul/.test(e.message) && /\[2, 3\] Float/.test(e.message) && /\[4, 5\] Float/.test(e.message),
  );
  assert.throws(
    () => torch.conv2d(torch.ones([1, 3, 8, 8]), torch.ones([4, 5, 3, 3])),
    (e: Error) => /aten::conv2d/.test(e.message) && /weight=\[4, 5, 3, 3\]/.test(e.message),
  );
  assert.throws(() => torch.ones([2, 3]).add(torch.ones([4])), /aten::add\.Tensor.*must match/s);
  assert.deepEqual(a.matmul(torch.ones([3, 1])).tolist(), [[3], [3]], "the library still works");
});

test("a wrong dtype is a clear error", () => {
  assert.throws(
    () => torch.ones([2, 2]).matmul(torch.ones([2, 2], { dtype: "int64" })),
    (e: Error) => /aten::matmul/.test(e.message) && /Long/.test(e.message),
  );
  assert.throws(
    () => torch.ones([3]).indexSelect(0, torch.tensor([0, 1])),
    (e: Error) => /aten::index_select/.test(e.message) && /index/.test(e.message),
  );
  assert.throws(() => torch.crossEntropy(torch.ones([2, 3]), torch.tensor([0.5, 1])), /aten::cross_entropy_loss/);
});

test("a JavaScript value of the wrong kind is a TypeError naming the argument", () => {
  assert.throws(
    () => torch.call("relu", "not a tensor"),
    (e: Error) => e instanceof TypeError && /relu argument 'self'/.test(e.message),
  );
  assert.throws(
    () => torch.ones([2]).reshape(1.5),
    (e: Error) => e instanceof TypeError && /integer/.test(e.message),
  );
  assert.throws(() => torch.call("no_such_operator"), /libtorch has no operator aten::no_such_operator/);
  // Handles are numbers inside the addon (native/src/common.h): a number where a tensor belongs,
  // a tensor where a number belongs, and a freed tensor's handle are each told apart.
  const x = torch.ones([2]);
  for (const n of [3, -1, -(2 ** 26), -(2 ** 40)])
    assert.throws(
      () => torch.call("relu", n),
      (e: Error) => e instanceof TypeError && /relu argument 'self': expected a Tensor/.test(e.message),
      `${n} passed as a tensor`,
    );
  assert.throws(
    () => torch.call("add.Scalar", x, x),
    (e: Error) =>
      e instanceof TypeError && /add.Scalar argument 'other': expected a number, got a Tensor/.test(e.message),
  );
  assert.throws(
    () => torch.call("reshape", x, [x]),
    (e: Error) => e instanceof TypeError && /reshape argument 'shape': expected a number, got a Tensor/.test(e.message),
  );
  assert.throws(() => torch.ones([2]).add(1, x as never), /add.Scalar argument 'alpha': expected a number/);
  const stale = x.handle;
  x.dispose();
  assert.throws(() => torch.call("relu", stale), /relu argument 'self': the tensor has been disposed/);
  // A result that is a plain number stays a number; a tensor's handle becomes a Tensor.
  const y = torch.ones([2, 3]);
  assert.equal(torch.call("size.int", y, 1), 3);
  assert.ok(torch.call("mul.Scalar", y, 2) instanceof torch.Tensor);
  y.dispose();
  assert.throws(() => torch.ones([2]).to("float128" as never), /unknown dtype 'float128'/);
});

test("item() of a tensor with several elements, and a disposed tensor, are clear errors", () => {
  assert.throws(() => torch.ones([3]).item(), /item: the tensor has 3 elements/);
  const t = torch.ones([1]);
  t.dispose();
  assert.throws(() => t.add(1), /disposed/);
  t.dispose(); // idempotent
});

test("fromBuffer checks that the bytes fit the shape", () => {
  assert.throws(() => torch.tensor(new Float32Array(5), { shape: [2, 3] }), /needs 24 bytes, got 20/);
});

test("a missing or corrupt file names the path", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "stitchlab-err-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const missing = join(dir, "nope.safetensors");
  assert.throws(
    () => loadSafetensors(missing),
    (e: Error) => e.message.includes(missing) && /not found/.test(e.message),
  );
  assert.throws(
    () => torchLoad(missing),
    (e: Error) => e.message.includes(missing),
  );

  const truncated = join(dir, "truncated.safetensors");
  saveSafetensors(truncated, { w: torch.ones([100]) });
  const full = readFileSync(truncated);
  writeFileSync(truncated, full.subarray(0, full.byteLength - 10));
  assert.throws(
    () => loadSafetensors(truncated),
    (e: Error) => e.message.includes(truncated) && /tensor 'w'.*outside the file or of the wrong size/.test(e.message),
  );
  const garbage = join(dir, "garbage.safetensors");
  writeFileSync(garbage, Buffer.from("this is not a safetensors file at all"));
  assert.throws(
    () => loadSafetensors(garbage),
    (e: Error) => e.message.includes(garbage) && /header length/.test(e.message),
  );

  const notZip = join(dir, "legacy.pt");
  writeFileSync(notZip, Buffer.from([0x80, 0x02, 0x8a, 0x0a]));
  assert.throws(() => torchLoad(notZip), /not in torch\.save's zip format/);
  const badZip = join(dir, "bad.pt");
  writeFileSync(badZip, Buffer.from("PK\x03\x04 broken"));
  assert.throws(
    () => torchLoad(badZip),
    (e: Error) => /torch\.load: cannot read/.test(e.message) && e.message.includes(badZip),
  );
});

test("backward through a tensor that does not require grad is a clear error", () => {
  assert.throws(() => torch.ones([2]).sum().backward(), /backward.*does not require grad/s);
});

test("a model with NaN in a running statistic is refused at load, naming the tensor and the file", () => {
  const dir = mkdtempSync(join(tmpdir(), "stitchlab-nan-"));
  try {
    torch.manualSeed(0);
    const m = createModel("resnet18", { width: 0.0625, numClasses: 10 });
    torch.noGrad(() => m.stateDict()["layer4.1.bn2.running_var"].fill_(Number.NaN));
    const path = join(dir, "back.safetensors");
    saveCheckpoint(path, m, { dataset: "fashion-mnist" });
    m.dispose();
    assert.throws(
      () => loadCheckpoint(path),
      (e: Error) => e.message.includes(path) && /layer4\.1\.bn2\.running_var holds NaN or infinite/.test(e.message),
    );
    // An experiment that names it is refused when planned, before any work (and by --dry-run).
    const file = join(dir, "exp.yaml");
    writeFileSync(
      file,
      [
        "name: nan",
        "dataset: { name: fashion-mnist }",
        "models:",
        "  a: { arch: resnet18, width: 0.0625, seed: 0, epochs: 1 }",
        "  back: { checkpoint: back.safetensors }",
        "pairs:",
        "  - { front: a, back: back, relation: cross-seed }",
        "points: [layer1.0]",
      ].join("\n"),
    );
    assert.throws(
      () => planExperiment(readExperiment(file), file),
      (e: Error) => /layer4\.1\.bn2\.running_var holds NaN/.test(e.message),
    );
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("non-finite logits are never scored: the meter names the model", () => {
  const labels = torch.tensor([0, 1]);
  const fine = torch.tensor([
    [2, 0],
    [0, 2],
  ]);
  const nan = torch.tensor([
    [Number.NaN, 0],
    [0, 2],
  ]);
  const inf = torch.tensor([
    [Number.POSITIVE_INFINITY, 0],
    [0, 2],
  ]);
  assert.throws(
    () => new AgreementMeter().update(fine, nan, labels),
    /the back model's logits are not finite on 1 of 2/,
  );
  assert.throws(() => new AgreementMeter().update(inf, fine, labels), /the stitched model's logits are not finite/);
  const ok = new AgreementMeter();
  ok.update(fine, fine, labels);
  assert.equal(ok.result().agreementProbability, 1);
});

test("a full disk (ENOSPC) names the file being written, and the earlier file is kept whole", () => {
  const dir = mkdtempSync(join(tmpdir(), "stitchlab-enospc-"));
  const path = join(dir, "results.csv");
  writeFileSync(path, "the earlier results\n");
  // The disk fills up during the write: every write(2) fails as a full file system's does.
  mock.method(fs, "writeSync", () => {
    throw Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC", syscall: "write" });
  });
  syncBuiltinESMExports();
  try {
    assert.throws(
      () => writeFileAtomic(path, ["new results\n"]),
      (e: NodeJS.ErrnoException) =>
        e.message === `cannot write ${path}: ENOSPC: no space left on device, write` && e.code === "ENOSPC",
    );
  } finally {
    mock.restoreAll();
    syncBuiltinESMExports();
  }
  assert.equal(readFileSync(path, "utf8"), "the earlier results\n");
  assert.deepEqual(readdirSync(dir), ["results.csv"], "no temporary file left");
  rmSync(dir, { recursive: true, force: true });
});

/** Every write(2) of fs's `method` fails as on a full file system, while fn runs. */
async function onFullDisk<T>(method: "writeSync" | "writeFileSync", fn: () => T | Promise<T>): Promise<T> {
  mock.method(fs, method, () => {
    throw Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC", syscall: "write" });
  });
  syncBuiltinESMExports();
  try {
    return await fn();
  } finally {
    mock.restoreAll();
    syncBuiltinESMExports();
  }
}

test("a full disk names the file there too: a task's lock, and the scratch file of a stitch's frozen rows", async () => {
  const dir = mkdtempSync(join(tmpdir(), "stitchlab-enospc-"));
  try {
    const lock = join(dir, "train", "k.lock");
    await onFullDisk("writeFileSync", () =>
      assert.rejects(
        withLock(lock, async () => assert.fail("ran without its lock")),
        (e: NodeJS.ErrnoException) =>
          e.message.startsWith(`cannot write ${lock}.`) && /ENOSPC: no space left on device/.test(e.message),
      ),
    );
    // A's features and B's targets over the budget (0 here) go to a scratch file under scratchDir.
    torch.manualSeed(0);
    const a = createModel("resnet18", { width: 0.0625 });
    const s = new StitchedModel(a, a, "layer1.0");
    const train = {
      images: torch.randint(0, 256, [8, 3, 32, 32]).to("uint8"),
      labels: torch.randint(0, 10, [8]),
      classes: Array.from({ length: 10 }, (_, i) => String(i)),
      name: "noise",
    };
    a.eval();
    await onFullDisk("writeSync", () =>
      assert.throws(
        () =>
          FrozenOutputs.build(s, train, {
            weights: { slm: 1 },
            normalization: normalizationFor("fashion-mnist"),
            batchSize: 4,
            budgetBytes: 0,
            scratchDir: dir,
          }),
        (e: NodeJS.ErrnoException) =>
          new RegExp(
            `^cannot write ${dir}/stitchlab-frozen-\\w+/0\\.f32 \\(the stitch's rows of A's features, kept on disk above the in-memory budget, STITCHLAB_FROZEN_CACHE_MB\\): ENOSPC: no space left on device, write$`,
          ).test(e.message) && e.code === "ENOSPC",
      ),
    );
    assert.deepEqual(readdirSync(dir), ["train"], "the scratch folder is removed");
    torch.dispose([train.images, train.labels]);
    a.dispose();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("a deeply nested experiment file is refused naming the file and the line, not with a stack overflow", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "stitchlab-deep-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  // Issue 36: both said "Maximum call stack size exceeded at line 2" (the YAML parser's recursion).
  const cases = {
    "flow.yaml": [`name: deep\nscales: ${"[".repeat(20_000)}${"]".repeat(20_000)}\n`, 2],
    "block.yaml": [
      `name: deep\nmodels:\n${Array.from({ length: 3000 }, (_, i) => `${" ".repeat(i + 1)}a:`).join("\n")} 1\n`,
      66,
    ],
  } as const;
  for (const [name, [text, line]] of Object.entries(cases)) {
    const file = join(dir, name);
    writeFileSync(file, text);
    assert.throws(
      () => readExperiment(file),
      (e: Error) =>
        e.message ===
        `${file}: 1 problem:\n  lists or mappings nested more than 64 levels deep (from line ${line}): look for an unclosed [ or {, or indentation that runs away`,
    );
  }
  // Depth within the bound still parses (and then meets the schema).
  const ok = join(dir, "ok.yaml");
  writeFileSync(ok, `name: deep\nscales: ${"[".repeat(60)}${"]".repeat(60)}\n`);
  assert.throws(
    () => readExperiment(ok),
    (e: Error) => !/nested|stack/.test(e.message),
  );
});

test("compare --points with a point neither model has says so once", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "stitchlab-points-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const model = createModel("resnet18", { width: 0.0625, numClasses: 10 });
  const ckpt = join(dir, "a.safetensors");
  saveCheckpoint(ckpt, model, { dataset: "fashion-mnist" } as never);
  model.dispose();
  const r = spawnSync(
    process.execPath,
    cliCommand("compare", ckpt, ckpt, "--points", "layer9.9", "--out", join(dir, "out"), "--dry-run"),
    { encoding: "utf8" },
  );
  assert.equal(r.status, 1, r.stderr);
  // A -> B and its control B -> B both lack it: one problem, not the same line twice.
  assert.equal(r.stderr.match(/no stitch point "layer9\.9"/g)?.length, 1, r.stderr);
  // Told in compare's flag: compare.yaml is not written by a dry run.
  assert.match(r.stderr, /1 problem:\n {2}--points: no stitch point "layer9\.9" in resnet18; it has stem, layer1\.0/);
});

test("train --out in a read-only folder says it cannot write there, before any work", (t) => {
  const dir = mkdtempSync(join(tmpdir(), "stitchlab-ro-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const ro = join(dir, "ro");
  mkdirSync(ro);
  const train = cliCommand("train", "--model", "resnet18", "--dataset", "fashion-mnist", "--out", join(ro, "run"));
  let r: ReturnType<typeof spawnSync>;
  let why: RegExp;
  if (process.getuid?.() === 0) {
    // root may write where the mode forbids: a read-only bind mount, in a mount namespace of its own.
    // Node's recursive mkdir said `ENOENT: no such file or directory, mkdir` there.
    const mountRo = 'mount --bind "$1" "$1" && mount -o remount,bind,ro "$1" && shift && exec "$@"';
    if (spawnSync("unshare", ["-m", "sh", "-c", mountRo, "sh", ro, "true"]).status !== 0) {
      t.skip("root without unshare -m and mount: no read-only folder can be made here");
      return;
    }
    r = spawnSync("unshare", ["-m", "sh", "-c", mountRo, "sh", ro, process.execPath, ...train], { encoding: "utf8" });
    why = /\(EROFS: \S+\/ro is on a read-only file system\)/;
  } else {
    chmodSync(ro, 0o555);
    r = spawnSync(process.execPath, train, { encoding: "utf8" });
    chmodSync(ro, 0o755);
    why = /\(EACCES: no permission to write in \S+\/ro\)/;
  }
  assert.equal(r.status, 1, String(r.stderr));
  assert.match(String(r.stderr), /--out \S+\/ro\/run is not a folder stitchlab can write in/);
  assert.match(String(r.stderr), why);
  assert.match(String(r.stderr), /nothing was run/);
  assert.doesNotMatch(String(r.stderr), /ENOENT/);
  assert.deepEqual(readdirSync(ro), []);
});
