// The model zoo: stitch points as listed, forwardFrom(forwardTo(x, p), p) = forward(x) at
// every point, state dicts that move between stitchlab and PyTorch in both directions with
// the same logits, and strict loading that lists every mismatch.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { createModel, type ModelOptions, modelNames } from "../models/registry.js";
import * as torch from "../torch/index.js";
import { runCli } from "./helpers/cli.js";
import { PYTHON, skipUnlessPytorch } from "./helpers/pytorch.js";

// Tiny variants, so every point of every model runs in a few hundred milliseconds.
const TINY: Record<string, { opts: ModelOptions; points: number; size: number }> = {
  resnet18: { opts: { width: 0.125 }, points: 9, size: 32 },
  vgg16_bn: { opts: { width: 0.125 }, points: 6, size: 32 },
  vit_tiny_patch4_32: { opts: { embedDim: 24, depth: 12 }, points: 13, size: 32 },
  vit_base_patch16_224: { opts: { embedDim: 24, depth: 12, numHeads: 3, imageSize: 64 }, points: 7, size: 64 },
};

test("the registry has the four zoo models, and an unknown name is a clear error", () => {
  assert.deepEqual(modelNames().sort(), Object.keys(TINY).sort());
  assert.throws(() => createModel("resnet50"), /unknown model 'resnet50'; known models: resnet18/);
});

for (const [name, spec] of Object.entries(TINY)) {
  test(`${name}: every stitch point has the listed shape and forwardFrom(forwardTo(x, p), p) = forward(x)`, () => {
    torch.manualSeed(1);
    const m = createModel(name, spec.opts).eval();
    assert.equal(m.stitchPoints.length, spec.points);
    torch.tidy(() => {
      const x = torch.randn([2, 3, spec.size, spec.size]);
      const logits = torch.noGrad(() => m.forward(x));
      assert.deepEqual(logits.shape, [2, 10]);
      const { features } = torch.noGrad(() =>
        m.forwardFeatures(
          x,
          m.stitchPoints.map((p) => p.name),
        ),
      );
      for (const p of m.stitchPoints) {
        const h = torch.noGrad(() => m.forwardTo(x, p.name));
        const want = p.kind === "cnn" ? [2, p.channels, p.height, p.width] : [2, p.height, p.channels];
        assert.deepEqual(h.shape, want, `${name} ${p.name} shape`);
        assert.equal(features[p.name].sub(h).abs().max().item(), 0, `${name} ${p.name}: forwardFeatures = forwardTo`);
        const y = torch.noGrad(() => m.forwardFrom(h, p.name));
        const err = y.sub(logits).abs().max().item();
        assert.ok(err <= 1e-5 * (1 + logits.abs().max().item()), `${name} ${p.name}: |forwardFrom - forward| = ${err}`);
      }
    });
    assert.throws(
      () => m.forwardTo(torch.zeros([1, 3, spec.size, spec.size]), "layer9"),
      /has no stitch point 'layer9'; its points are: /,
    );
    m.dispose();
  });
}

test("ResNet-18 has torchvision's parameter names and count", () => {
  const m = createModel("resnet18", { width: 0.125 });
  const keys = Object.keys(m.stateDict());
  assert.equal(keys.length, 122);
  for (const k of [
    "conv1.weight",
    "bn1.running_var",
    "layer2.0.downsample.0.weight",
    "layer2.0.downsample.1.num_batches_tracked",
    "layer4.1.bn2.bias",
    "fc.weight",
  ])
    assert.ok(keys.includes(k), k);
  m.dispose();
});

test("loadStateDict lists every missing key, unexpected key and shape mismatch, and copies nothing", () => {
  const a = createModel("resnet18", { width: 0.125 });
  const b = createModel("resnet18", { width: 0.25 });
  const sd = { ...b.stateDict(), extra: torch.zeros([1]) } as Record<string, torch.Tensor>;
  delete sd["fc.bias"];
  const before = a.stateDict()["conv1.weight"].clone();
  assert.throws(
    () => a.loadStateDict(sd),
    (e: Error) =>
      /missing keys: fc\.bias/.test(e.message) &&
      /unexpected keys: extra/.test(e.message) &&
      /conv1\.weight: checkpoint \[16, 3, 3, 3\] vs model \[8, 3, 3, 3\]/.test(e.message),
  );
  assert.equal(a.stateDict()["conv1.weight"].sub(before).abs().max().item(), 0, "nothing was copied");
  a.dispose();
  b.dispose();
});

const PARITY: [string, ModelOptions][] = [
  ["resnet18", { width: 0.25 }],
  ["vit_tiny_patch4_32", { embedDim: 48, depth: 3, numHeads: 3 }],
];

for (const [arch, opts] of PARITY) {
  test(`${arch}: a PyTorch state dict gives the same logits here, and ours gives the same logits in PyTorch`, {
    skip: skipUnlessPytorch(),
  }, () => {
    const dir = mkdtempSync(join(tmpdir(), "stitchlab-zoo-"));
    const py = (mode: string) => {
      const r = spawnSync(
        PYTHON,
        [join(import.meta.dirname, "helpers", "zoo_reference.py"), arch, JSON.stringify(opts), mode, dir],
        {
          encoding: "utf8",
          cwd: dir,
        },
      );
      assert.equal(r.status, 0, r.stderr);
    };
    py("save");
    const m = createModel(arch, opts).eval();
    const sd = torch.torchLoad(join(dir, "py_state.pt")) as Record<string, torch.Tensor>;
    m.loadStateDict(sd);
    const x = (torch.torchLoad(join(dir, "input.pt")) as { x: torch.Tensor }).x;
    const want = (torch.torchLoad(join(dir, "py_logits.pt")) as { logits: torch.Tensor }).logits;
    const got = torch.noGrad(() => m.forward(x));
    const rel = got.sub(want).norm().item() / want.norm().item();
    assert.ok(rel < 1e-4, `PyTorch -> stitchlab: relative error ${rel}`);

    // The reverse: a freshly initialised stitchlab model, saved with torch.save's format.
    torch.manualSeed(7);
    const ours = createModel(arch, opts).eval();
    if (arch === "resnet18")
      torch.noGrad(() => {
        for (const [k, t] of Object.entries(ours.stateDict()))
          if (k.endsWith("running_mean")) t.normal_(0, 0.5);
          else if (k.endsWith("running_var")) t.uniform_(0.5, 2);
      });
    torch.torchSave(join(dir, "ts_state.pt"), ours.stateDict());
    py("load");
    const pyLogits = (torch.torchLoad(join(dir, "py_logits_from_ts.pt")) as { logits: torch.Tensor }).logits;
    const ourLogits = torch.noGrad(() => ours.forward(x));
    const rel2 = ourLogits.sub(pyLogits).norm().item() / pyLogits.norm().item();
    assert.ok(rel2 < 1e-4, `stitchlab -> PyTorch: relative error ${rel2}`);
    m.dispose();
    ours.dispose();
  });
}

test("stitchlab layers --json prints the stitch points, started from / and from a fresh temporary folder", () => {
  // The CLI must not depend on its working directory (a node_modules above it, say): issue 17.
  const fresh = mkdtempSync(join(tmpdir(), "stitchlab-cwd-"));
  try {
    for (const cwd of ["/", fresh]) {
      const r = runCli(["layers", "vit_tiny_patch4_32", "--json", "--embed-dim", "24"], { cwd });
      assert.equal(r.status, 0, `from ${cwd}: ${r.stderr}`);
      const pts = JSON.parse(r.stdout);
      assert.equal(pts.length, 13);
      assert.deepEqual(pts[12], { name: "norm", channels: 24, height: 65, width: 1 });
    }
  } finally {
    rmSync(fresh, { recursive: true, force: true });
  }
  const bad = runCli(["layers", "nope"], { cwd: "/" });
  assert.equal(bad.status, 1);
  assert.match(bad.stderr, /stitchlab: unknown model 'nope'/);
});
