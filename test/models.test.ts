// The model zoo: stitch points as listed, forwardFrom(forwardTo(x, p), p) = forward(x) at
// every point, state dicts that move between stitchlab and PyTorch in both directions with
// the same logits, and strict loading that lists every mismatch.
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";
import { FASHION_MNIST_NORMALIZATION } from "../data/transforms.js";
import { torchLoad, torchSave } from "../io/torchsave.js";
import { linearCka } from "../metrics/cka.js";
import { createModel, type ModelOptions, modelNames } from "../models/registry.js";
import { HEAD_POINT, pointShape } from "../models/stitchable.js";
import { IRI_DEFAULTS } from "../stitch/iri-options.js";
import { generateIriBatch } from "../stitch/iris.js";
import { leastSquaresInit } from "../stitch/layer.js";
import { stitchLoss } from "../stitch/objectives.js";
import { StitchedModel } from "../stitch/stitched.js";
import * as torch from "../torch/index.js";
import { runCli } from "./helpers/cli.js";
import { PYTHON, skipUnlessPytorch, skipUnlessTorchvision } from "./helpers/pytorch.js";

// Tiny variants, so every point of every model runs in a few hundred milliseconds.
const TINY: Record<string, { opts: ModelOptions; points: number; size: number }> = {
  resnet18: { opts: { width: 0.125 }, points: 9, size: 32 },
  vgg16_bn: { opts: { width: 0.125 }, points: 6, size: 32 },
  vit_tiny_patch4_32: { opts: { embedDim: 24, depth: 12 }, points: 13, size: 32 },
  vit_base_patch16_224: { opts: { embedDim: 24, depth: 12, numHeads: 3, imageSize: 64 }, points: 7, size: 64 },
  resnet50: { opts: { width: 0.125 }, points: 9, size: 32 },
  vit_small_patch16_224: { opts: { embedDim: 24, depth: 12, numHeads: 3, imageSize: 64 }, points: 7, size: 64 },
  vit_tiny_patch16_224: { opts: { embedDim: 24, depth: 12, numHeads: 3, imageSize: 64 }, points: 7, size: 64 },
};

test("the registry has the seven zoo models, and an unknown name is a clear error", () => {
  assert.deepEqual(modelNames().sort(), Object.keys(TINY).sort());
  assert.throws(() => createModel("resnet101"), /unknown model 'resnet101'; known models: resnet18/);
});

test("resnet50's stitch points are the reference's: the stem and the first and last block of each stage", () => {
  const m = createModel("resnet50", { width: 0.125 });
  assert.deepEqual(
    m.stitchPoints.map((p) => [p.name, p.channels, p.kind === "cnn" && p.height]),
    [
      ["stem", 8, 32],
      ["layer1.0", 32, 32],
      ["layer1.2", 32, 32],
      ["layer2.0", 64, 16],
      ["layer2.3", 64, 16],
      ["layer3.0", 128, 8],
      ["layer3.5", 128, 8],
      ["layer4.0", 256, 4],
      ["layer4.2", 256, 4],
    ],
  );
  m.dispose();
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
        m.forwardIntermediates(x, [...m.stitchPoints.map((p) => p.name), HEAD_POINT]),
      );
      // The paper's points, then the head's input (HEAD_POINT, the "front only" end), named only.
      assert.ok(!m.stitchPoints.some((p) => p.name === HEAD_POINT));
      const head = m.stitchPoint(HEAD_POINT);
      assert.equal(head.kind, "vector");
      for (const p of [...m.stitchPoints, head]) {
        const h = torch.noGrad(() => m.forwardTo(x, p.name));
        assert.deepEqual(h.shape, pointShape(p, 2), `${name} ${p.name} shape`);
        assert.equal(
          features[p.name].sub(h).abs().max().item(),
          0,
          `${name} ${p.name}: forwardIntermediates = forwardTo`,
        );
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

test("ResNets start from the reference's initialisation: convolutions N(0, 2/fan_out), the 32 px stem nn.Conv2d's U(-1/sqrt(fan_in), 1/sqrt(fan_in)), batch norm 1 and 0", () => {
  // The reference's models are torchvision's resnet18 (kaiming_normal_, mode fan_out, relu), whose
  // conv1 its low-resolution branch replaces afterwards by a fresh 3x3 nn.Conv2d
  // (models/resnet/resnet_architecture.py): that one keeps PyTorch's default,
  // kaiming_uniform_(a=sqrt(5)), i.e. bound sqrt(6 / ((1 + a^2) fan_in)) = 1/sqrt(fan_in).
  // The tolerances come from the sample size n: five standard errors of each statistic.
  const values = (w: torch.Tensor) => Array.from(torch.tidy(() => w.flatten().toTypedArray()) as Float32Array);
  const moments = (v: number[]) => {
    const mean = v.reduce((a, b) => a + b, 0) / v.length;
    const std = Math.sqrt(v.reduce((a, b) => a + (b - mean) ** 2, 0) / (v.length - 1));
    return { mean, std };
  };
  const normal = (name: string, w: torch.Tensor, fanOut: number) => {
    const v = values(w);
    const { mean, std } = moments(v);
    const want = Math.sqrt(2 / fanOut);
    // A normal sample's std has relative standard error 1/sqrt(2n); its mean sigma/sqrt(n).
    assert.ok(Math.abs(std / want - 1) < 5 / Math.sqrt(2 * v.length), `${name}: std ${std}, torchvision's ${want}`);
    assert.ok(Math.abs(mean) < (5 * want) / Math.sqrt(v.length), `${name}: mean ${mean} near 0`);
  };
  torch.manualSeed(0);
  const m = createModel("resnet18", { width: 0.5 });
  const params = Object.fromEntries(m.namedParameters());
  for (const [name, fanOut] of [
    ["layer1.0.conv1.weight", 32 * 9],
    ["layer4.1.conv2.weight", 256 * 9],
    ["layer3.0.downsample.0.weight", 128],
  ] as const)
    normal(name, params[name], fanOut);

  // The 32 px stem: U(-b, b), b = 1/sqrt(fan_in), fan_in = 3 x 3 x 3.
  const v = values(params["conv1.weight"]);
  const n = v.length;
  assert.equal(n, 32 * 27);
  const b = 1 / Math.sqrt(27);
  const { mean, std } = moments(v);
  const top = Math.max(...v.map(Math.abs));
  assert.ok(top <= b * (1 + 1e-6), `within the bound: ${top} <= ${b}`);
  // The largest of n draws falls below b (1 - d) with probability (1 - d)^n; d = 20/n makes that e^-20.
  assert.ok(top >= b * (1 - 20 / n), `reaches the bound: ${top} (b ${b})`);
  // U(-b, b): std b/sqrt(3); a uniform sample's std has relative standard error sqrt(1/(5n))
  // (kurtosis 9/5). Torchvision's kaiming-normal would give sqrt(2/(32 x 9)) = 0.083, not 0.111.
  assert.ok(
    Math.abs(std / (b / Math.sqrt(3)) - 1) < 5 * Math.sqrt(1 / (5 * n)),
    `stem std ${std}, want ${b / Math.sqrt(3)}`,
  );
  assert.ok(Math.abs(mean) < (5 * b) / Math.sqrt(3 * n), `stem mean ${mean} near 0`);
  // Flat, not bell-shaped: half the draws within b/2 (a normal of that std puts 61% there).
  const inner = v.filter((x) => Math.abs(x) < b / 2).length / n;
  assert.ok(Math.abs(inner - 0.5) < 5 * Math.sqrt(0.25 / n), `share within b/2: ${inner}`);

  assert.equal(
    torch.tidy(() => params["layer2.0.bn1.weight"].sub(1).abs().max().item()),
    0,
  );
  assert.equal(
    torch.tidy(() => params["layer2.0.bn1.bias"].abs().max().item()),
    0,
  );
  // The classifier keeps nn.Linear's default U(-1/sqrt(fan_in), 1/sqrt(fan_in)).
  const fc = torch.tidy(() => params["fc.weight"].abs().max().item());
  assert.ok(fc <= 1 / Math.sqrt(256) && fc > 0.5 / Math.sqrt(256), `fc bound ${fc}`);
  m.dispose();

  // The ImageNet stem is torchvision's own 7x7 conv1: kaiming-normal like the rest.
  torch.manualSeed(0);
  const big = createModel("resnet18", { width: 0.5, stem: "imagenet" });
  const stem = big.namedParameters().find(([name]) => name === "conv1.weight")?.[1];
  assert.ok(stem);
  normal("imagenet conv1.weight", stem, 32 * 49);
  big.dispose();
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
  ["resnet18", { width: 0.25, stem: "imagenet", imageSize: 64 }],
  ["vit_tiny_patch4_32", { embedDim: 48, depth: 3, numHeads: 3 }],
  // torchvision's resnet50 itself, both stems; timm's ViT-Small and ViT-Tiny at 224 px (2 blocks).
  ["resnet50", {}],
  ["resnet50", { stem: "imagenet", imageSize: 64 }],
  ["vit_small_patch16_224", { depth: 2 }],
  ["vit_tiny_patch16_224", { depth: 2 }],
  // ViT-Base at its own width and 224 px (768 wide, 12 heads), 2 blocks to keep it short.
  ["vit_base_patch16_224", { depth: 2 }],
];

for (const [arch, opts] of PARITY) {
  test(`${arch} ${JSON.stringify(opts)}: a PyTorch state dict gives the same logits here, and ours gives the same logits in PyTorch`, {
    skip: arch === "resnet50" ? skipUnlessTorchvision() : skipUnlessPytorch(),
  }, (t) => {
    const dir = mkdtempSync(join(tmpdir(), "stitchlab-zoo-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
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
    const sd = torchLoad(join(dir, "py_state.pt")) as Record<string, torch.Tensor>;
    m.loadStateDict(sd);
    const x = (torchLoad(join(dir, "input.pt")) as { x: torch.Tensor }).x;
    const want = (torchLoad(join(dir, "py_logits.pt")) as { logits: torch.Tensor }).logits;
    const got = torch.noGrad(() => m.forward(x));
    const rel = got.sub(want).norm().item() / want.norm().item();
    assert.ok(rel < 1e-4, `PyTorch -> stitchlab: relative error ${rel}`);

    // The reverse: a freshly initialised stitchlab model, saved with torch.save's format.
    torch.manualSeed(7);
    const ours = createModel(arch, opts).eval();
    if (arch.startsWith("resnet"))
      torch.noGrad(() => {
        for (const [k, t] of Object.entries(ours.stateDict()))
          if (k.endsWith("running_mean")) t.normal_(0, 0.5);
          else if (k.endsWith("running_var")) t.uniform_(0.5, 2);
      });
    torchSave(join(dir, "ts_state.pt"), ours.stateDict());
    py("load");
    const pyLogits = (torchLoad(join(dir, "py_logits_from_ts.pt")) as { logits: torch.Tensor }).logits;
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
      // The head input is the pooled class token [N, D], a vector point: its dimension only.
      assert.deepEqual(pts[12], { name: "norm", kind: "vector", channels: 24 });
      assert.deepEqual(pts[11], { name: "blocks.11", kind: "vit", channels: 24, tokens: 65 });
    }
  } finally {
    rmSync(fresh, { recursive: true, force: true });
  }
  const bad = runCli(["layers", "nope"], { cwd: "/" });
  assert.equal(bad.status, 1);
  assert.match(bad.stderr, /stitchlab: unknown model 'nope'/);
});

test("stitchlab layers vgg16_bn names torchvision's six post-ReLU points", () => {
  const r = runCli(["layers", "vgg16_bn", "--json"], { cwd: "/" });
  assert.equal(r.status, 0, r.stderr);
  const pts = JSON.parse(r.stdout) as { name: string; kind: string; channels: number; height: number }[];
  // features.2 is conv1_1's ReLU; the others are each stage's last ReLU, before its max-pool.
  assert.deepEqual(
    pts.map((p) => p.name),
    ["features.2", "features.5", "features.12", "features.22", "features.32", "features.42"],
  );
  assert.deepEqual(
    pts.map((p) => [p.kind, p.channels, p.height]),
    [
      ["cnn", 64, 32],
      ["cnn", 64, 32],
      ["cnn", 128, 16],
      ["cnn", 256, 8],
      ["cnn", 512, 4],
      ["cnn", 512, 2],
    ],
  );
});

test("vgg16_bn: torchvision's vgg16_bn(num_classes=10) state dict loads strictly and gives its logits and features; ours gives the same logits in torchvision", {
  skip: skipUnlessTorchvision(),
}, () => {
  const dir = mkdtempSync(join(tmpdir(), "stitchlab-vgg-"));
  try {
    // The reverse direction's model first (a fresh stitchlab vgg16_bn with non-trivial batch-norm
    // statistics, saved with torch.save's format), so that one Python process does both.
    torch.manualSeed(7);
    const ours = createModel("vgg16_bn").eval();
    torch.noGrad(() => {
      for (const [k, t] of Object.entries(ours.stateDict()))
        if (k.endsWith("running_mean")) t.normal_(0, 0.5);
        else if (k.endsWith("running_var")) t.uniform_(0.5, 2);
    });
    torchSave(join(dir, "ts_state.pt"), ours.stateDict());
    const r = spawnSync(
      PYTHON,
      [join(import.meta.dirname, "helpers", "zoo_reference.py"), "vgg16_bn", "{}", "save,load", dir],
      { encoding: "utf8", cwd: dir },
    );
    assert.equal(r.status, 0, r.stderr);
    torch.tidy(() => {
      const x = (torchLoad(join(dir, "input.pt")) as { x: torch.Tensor }).x;
      const pyLogits = (torchLoad(join(dir, "py_logits_from_ts.pt")) as { logits: torch.Tensor }).logits;
      const ourLogits = torch.noGrad(() => ours.forward(x));
      const rel = ourLogits.sub(pyLogits).norm().item() / pyLogits.norm().item();
      assert.ok(rel < 1e-5, `stitchlab -> torchvision: relative error ${rel}`);
    });
    ours.dispose();
    const m = createModel("vgg16_bn").eval(); // the defaults are torchvision's layout
    const sd = torchLoad(join(dir, "py_state.pt")) as Record<string, torch.Tensor>;
    assert.deepEqual(Object.keys(m.stateDict()).sort(), Object.keys(sd).sort(), "the same parameter names");
    m.loadStateDict(sd); // strict: any missing, unexpected or mis-shaped key throws
    for (const k of Object.keys(sd)) sd[k].dispose();
    torch.tidy(() => {
      // 32 px: the features end at 1x1 and the adaptive pool repeats it into 7x7, as in PyTorch.
      const x = (torchLoad(join(dir, "input.pt")) as { x: torch.Tensor }).x;
      const want = (torchLoad(join(dir, "py_logits.pt")) as { logits: torch.Tensor }).logits;
      const points = m.stitchPoints.map((p) => p.name);
      const { features, logits } = torch.noGrad(() => m.forwardIntermediates(x, points));
      const rel = logits.sub(want).norm().item() / want.norm().item();
      assert.ok(rel < 1e-5, `logits: relative error ${rel}`);
      // Each point's features are PyTorch's features[:k+1](x).
      const pyFeatures = torchLoad(join(dir, "py_features.pt")) as Record<string, torch.Tensor>;
      assert.deepEqual(Object.keys(pyFeatures).sort(), [...points].sort());
      for (const p of points) {
        assert.deepEqual(features[p].shape, pyFeatures[p].shape, `${p} shape`);
        const e = features[p].sub(pyFeatures[p]).norm().item() / pyFeatures[p].norm().item();
        assert.ok(e < 1e-5, `${p}: relative error ${e}`);
      }
    });
    m.dispose();
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test("ViT head point: the pooled class token [N, D]; least squares, DM/FuLA, CKA and IRIs work on it", () => {
  torch.manualSeed(5);
  const d = 24;
  const m = createModel("vit_tiny_patch4_32", { embedDim: d, depth: 2, numHeads: 2 }).eval();
  const point = m.stitchPoints.at(-1);
  assert.deepEqual(point, { name: "norm", channels: d, kind: "vector" });
  const s = new StitchedModel(m, m, "norm");
  torch.tidy(() => {
    const x = torch.randn([4, 3, 32, 32]);
    const h = torch.noGrad(() => m.forwardTo(x, "norm"));
    assert.deepEqual(h.shape, [4, d], "timm's head_drop input: [N, D]");
    // Least squares has one sample per image here, so it needs more images than D + 1.
    const { residual } = s.init("lstsq", torch.randn([64, 3, 32, 32]));
    assert.ok(residual! < 1e-4, `least-squares residual ${residual}`);
    assert.deepEqual(s.layer.weight.shape, [d, d], "a linear map over D");
    // The identity on A's features. LayerNorm's output sums to zero over D, so [X 1] has an exact
    // null direction, which the least-squares cutoff (LSTSQ_RCOND) leaves out: T is I there up to it.
    const mapped = torch.noGrad(() => torch.linear(h, s.layer.weight, s.layer.bias));
    assert.ok(mapped.sub(h).abs().max().item() < 1e-3, "T maps A's features to themselves");
    assert.ok(s.layer.bias.abs().max().item() < 1e-3, "bias = 0");
    const want = torch.noGrad(() => m.forward(x));
    const got = torch.noGrad(() => s.forward(x));
    assert.ok(got.sub(want).abs().max().item() < 1e-4 * (1 + want.abs().max().item()), "stitched = B");
    const labels = torch.tensor([0, 1, 2, 3], { dtype: "int64" });
    const loss = torch.noGrad(() => stitchLoss(s, x, labels, { dm: 1, fula: 1 })).item();
    assert.ok(loss < 1e-3, `DM + FuLA at the head point of a self-stitch: ${loss}`);
    assert.ok(Math.abs(linearCka(h, h) - 1) < 1e-9, "CKA of the [N, D] features with themselves");
    // Features of the wrong rank for a vector point are a clear error, not a silent reshape.
    assert.throws(
      () => leastSquaresInit(s.layer, h.unsqueeze(1), h.unsqueeze(1)),
      /a vector point holds 2-d features, got \[4,1,24\]/,
    );
  });
  // IRIs matched at the head point: the residual is over the [N, D] vectors.
  const images = torch.randint(0, 256, [2, 3, 32, 32], { dtype: "uint8" });
  const iri = generateIriBatch(m, "norm", images, FASHION_MNIST_NORMALIZATION, { ...IRI_DEFAULTS, steps: 3 }, 0);
  assert.deepEqual(iri.images.shape, [2, 3, 32, 32]);
  assert.equal(iri.residuals.length, 2);
  assert.ok(Number.isFinite(iri.batchResidual));
  torch.dispose([images, iri.images]);
  s.layer.dispose();
  m.dispose();
});

test("resnet18 ImageNet stem: the stem point is before the max-pool, which runs after it", () => {
  torch.manualSeed(2);
  const m = createModel("resnet18", { width: 0.125, stem: "imagenet", imageSize: 64 }).eval();
  const [stem, first] = m.stitchPoints;
  assert.ok(stem.kind === "cnn" && first.kind === "cnn");
  assert.deepEqual([stem.name, stem.height, stem.width], ["stem", 32, 32], "H/2: after the stride-2 conv only");
  assert.deepEqual([first.name, first.height], ["layer1.0", 16], "H/4 after the max-pool");
  torch.tidy(() => {
    const x = torch.randn([2, 3, 64, 64]);
    const h = torch.noGrad(() => m.forwardTo(x, "stem"));
    assert.deepEqual(h.shape, [2, 8, 32, 32]);
    assert.ok(h.min().item() >= 0, "after the stem's ReLU");
    const want = torch.noGrad(() => m.forward(x));
    const got = torch.noGrad(() => m.forwardFrom(h, "stem"));
    assert.equal(got.sub(want).abs().max().item(), 0, "forwardFrom(forwardTo(x, stem), stem) = forward(x)");
  });
  m.dispose();
});
