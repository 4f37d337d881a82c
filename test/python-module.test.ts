// python/stitchlab.py, the one call from a notebook (issue 39, part 6): Debian's python3-torch
// runs a script that builds two small CNNs with random weights and calls stitchlab.compare on
// them, which exports both to ONNX and runs `stitchlab compare --json`. The CLI is the sources
// through tsx (as every test runs it), passed as stitchlab=[node, ...]: bin/stitchlab.js would run
// dist/, which may be stale in a working tree. Random weights give near-uniform softmaxes, so the
// scores say nothing about similarity; what is checked is the plumbing: the flags reached the CLI,
// the dict has both pairs with scores per point, errors carry the CLI's message, and the temporary
// folder is gone. At the smallest sizes that still give a verdict: 13-23 s on 2 busy cores.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, test } from "node:test";
import { fileURLToPath } from "node:url";
import { cliCommand } from "../experiments/tasks.js";
import { PYTHON, skipUnlessPytorch } from "./helpers/pytorch.js";
import { skipUnlessFashionMnist } from "./helpers/requirements.js";

const MODULE_DIR = join(dirname(fileURLToPath(import.meta.url)), "..", "python");
const tmp = mkdtempSync(join(tmpdir(), "stitchlab-py-"));
after(() => rmSync(tmp, { recursive: true, force: true }));

// One Python process for every call: importing torch costs seconds. tempfile's folder is moved
// under tmp, so that what compare() leaves behind can be listed.
const SCRIPT = `
import json, sys, tempfile
import torch, torch.nn as nn
args = json.loads(sys.argv[1])
sys.path.insert(0, args["module_dir"])
tempfile.tempdir = args["scratch"]
import stitchlab

class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.block1 = nn.Sequential(nn.Conv2d(8, 16, 3, stride=2, padding=1), nn.ReLU())
        self.block2 = nn.Sequential(nn.Conv2d(16, 16, 3, stride=2, padding=1), nn.ReLU())
        self.fc = nn.Linear(16, 10)

    def forward(self, x):
        return self.fc(self.block2(self.block1(self.stem(x))).mean((2, 3)))

torch.manual_seed(0)
a, b = Net(), Net()  # a stays in train mode: compare must put it back so
out = {"result": stitchlab.compare(
    a, b, "fashion-mnist", stitchlab=args["cli"], points=["block1.1", "block2.1"], replicates=1,
    iris_limit=16, stitch_limit=16, batch_size=16, iris_steps=20, epochs=2, test_limit=100,
    workers=1, cache=args["cache"], out=args["out"]), "a_training": a.training, "errors": {}}
for name, flags in {"point": {"points": "nope"}, "flag": {"bogus_flag": 1}}.items():
    try:
        stitchlab.compare(a, b, stitchlab=args["cli"], workdir=args["kept"], cache=args["cache"],
                          out=args["out"] + "-" + name, **flags)
    except stitchlab.StitchlabError as e:
        out["errors"][name] = {"text": str(e), "stderr": e.stderr}
print(json.dumps(out))
`;

interface Interval {
  n: number;
  mean: number;
  lo: number;
  hi: number;
}

test("stitchlab.compare(model_a, model_b) from Python returns the CLI's verdicts and raises its errors", {
  skip: skipUnlessPytorch() || skipUnlessFashionMnist(),
  timeout: 300_000,
}, () => {
  const paths = { scratch: join(tmp, "scratch"), kept: join(tmp, "kept") };
  mkdirSync(paths.scratch);
  const args = {
    ...paths,
    module_dir: MODULE_DIR,
    cli: [process.execPath, ...cliCommand()],
    cache: join(tmp, "cache"),
    out: join(tmp, "out"),
  };
  writeFileSync(join(tmp, "run.py"), SCRIPT);
  // Not from the repository root, where `import torch` would find our torch/ folder.
  const r = spawnSync(PYTHON, [join(tmp, "run.py"), JSON.stringify(args)], {
    encoding: "utf8",
    cwd: tmp,
    env: { ...process.env, PYTHONDONTWRITEBYTECODE: "1" }, // no __pycache__ in python/
  });
  assert.equal(r.status, 0, r.stderr);
  const got = JSON.parse(r.stdout);
  const result = got.result;

  assert.equal(result.failed, 0);
  assert.ok(existsSync(result.report), "the report is written to out=");
  // The keywords reached the CLI as flags: the experiment it wrote has them.
  const yaml = readFileSync(result.experiment, "utf8");
  assert.match(yaml, /testLimit: 100/);
  assert.match(yaml, /normalization: fashion-mnist/, "normalization defaults to the dataset's");
  const pairs = Object.fromEntries(result.verdicts.map((v: { relation: string }) => [v.relation, v]));
  assert.deepEqual(Object.keys(pairs).sort(), ["A->B", "identical"]);
  // A model is named after its file (A.onnx, B.onnx), with or without the extension.
  const name = (v: { front: string; back: string }) => [v.front, v.back].map((n) => n.replace(/\.onnx$/, ""));
  assert.deepEqual(name(pairs["A->B"]), ["A", "B"]);
  assert.deepEqual(name(pairs.identical), ["B", "B"]);
  for (const v of result.verdicts) {
    assert.deepEqual(
      v.points.map((p: { point: string }) => p.point),
      ["block1.1", "block2.1"],
    );
    for (const p of v.points) {
      assert.ok(["close", "apart", "loose"].includes(p.state), `${v.relation} @ ${p.point}: state ${p.state}`);
      assert.ok(p.residual >= 0 && Number.isFinite(p.residual));
      for (const s of [p.standard, p.iris] as Interval[]) {
        assert.equal(s.n, 1);
        assert.ok(s.lo <= s.mean && s.mean <= s.hi && s.mean >= 0 && s.mean <= 1, JSON.stringify(s));
      }
    }
  }
  assert.equal(got.a_training, true, "the module's own mode is put back after the export");

  // The CLI's messages, in the exception's text and in full in .stderr.
  assert.match(got.errors.point?.text ?? "no exception", /no stitch point "nope" in onnx/);
  assert.match(got.errors.flag?.text ?? "no exception", /unknown option '--bogus-flag'/);
  assert.match(got.errors.point.stderr, /no stitch point "nope"/);
  // The temporary folders are removed; a workdir keeps its .onnx files.
  assert.deepEqual(readdirSync(paths.scratch), []);
  assert.deepEqual(readdirSync(paths.kept).sort(), ["A.onnx", "B.onnx"]);
});
