// The stitching layer and its least-squares initialisation (stitch/).
import assert from "node:assert/strict";
import { test } from "node:test";
import { disposeDataset, fromBytes, normalize, pixelScale } from "../data/index.js";
import { AgreementMeter } from "../metrics/agreement.js";
import { linearCka } from "../metrics/cka.js";
import { createModel } from "../models/registry.js";
import { HEAD_POINT } from "../models/stitchable.js";
import { evaluateFrontAlone, evaluateStitch, frontAndBack } from "../stitch/evaluate.js";
import { leastSquaresInit, StitchingLayer } from "../stitch/layer.js";
import { StitchedModel } from "../stitch/stitched.js";
import * as torch from "../torch/index.js";
import { runReference, skipUnlessPytorch } from "./helpers/pytorch.js";

test("the least-squares initialisation equals torch.linalg.lstsq on the same features", {
  skip: skipUnlessPytorch(),
}, () => {
  torch.manualSeed(0);
  const xs = torch.randn([6, 5, 4, 4]);
  const ys = torch.tidy(() => torch.randn([6, 3, 4, 4]).add(torch.conv2d(xs, torch.randn([3, 5, 1, 1]))));
  const layer = new StitchingLayer(
    { name: "a", channels: 5, height: 4, width: 4, kind: "cnn" },
    { name: "b", channels: 3, height: 4, width: 4, kind: "cnn" },
  );
  leastSquaresInit(layer, xs, ys);
  const ref = runReference(
    [
      {
        name: "lstsq",
        expr:
          "(lambda X, Y: torch.linalg.lstsq(torch.cat([X, torch.ones(X.shape[0], 1, dtype=X.dtype)], 1), Y).solution)(" +
          "x.permute(0, 2, 3, 1).reshape(-1, 5).double(), y.permute(0, 2, 3, 1).reshape(-1, 3).double())",
        inputs: ["x", "y"],
      },
    ],
    { "lstsq/x": xs, "lstsq/y": ys },
  );
  assert.deepEqual(ref.errors, {});
  const W = ref.outputs.lstsq; // [6, 3]: weight rows then the bias row
  const wantWeight = W.narrow(0, 0, 5).t().float();
  const wantBias = W.select(0, 5).float();
  assert.ok(layer.weight.sub(wantWeight).abs().max().item() < 1e-5, "weight");
  assert.ok(layer.bias.sub(wantBias).abs().max().item() < 1e-5, "bias");
  layer.dispose();
});

for (const [name, opts, point, size] of [
  ["resnet18", { width: 0.125 }, "layer2.0", 32],
  ["vit_tiny_patch4_32", { embedDim: 24, depth: 4 }, "blocks.1", 32],
] as const) {
  test(`${name}: stitched with itself at ${point}, least squares recovers the identity and the stitched model equals B`, () => {
    torch.manualSeed(3);
    const m = createModel(name, opts).eval();
    const s = new StitchedModel(m, m, point);
    torch.tidy(() => {
      const { residual } = s.init("lstsq", torch.randn([8, 3, size, size]));
      assert.ok(residual! < 1e-4, `least-squares residual ${residual}`);
      const c = s.layer.source.channels;
      assert.ok(s.layer.weight.sub(torch.eye(c)).abs().max().item() < 1e-3, "weight = I");
      assert.ok(s.layer.bias.abs().max().item() < 1e-3, "bias = 0");
      const x = torch.randn([4, 3, size, size]);
      const want = torch.noGrad(() => m.forward(x));
      const got = torch.noGrad(() => s.forward(x));
      assert.ok(got.sub(want).abs().max().item() < 1e-3 * (1 + want.abs().max().item()), "stitched = B");
    });
    s.layer.dispose();
    m.dispose();
  });
}

test("identity initialisation makes the self-stitched model equal B exactly", () => {
  const m = createModel("resnet18", { width: 0.125 }).eval();
  const s = new StitchedModel(m, m, "stem");
  s.init("identity");
  torch.tidy(() => {
    const x = torch.randn([2, 3, 32, 32]);
    assert.ok(torch.noGrad(() => s.forward(x).sub(m.forward(x)).abs().max().item()) < 1e-5);
  });
  m.dispose();
});

/**
 * A bilinear 2x upscale of [N, C, H, W] maps, by hand. With PyTorch's align_corners=False output
 * pixel j reads input coordinate (j + 1/2) / 2 - 1/2, clamped at 0: i - 1/4 for j = 2i, i + 1/4
 * for j = 2i + 1. So along each axis out[2i] = 3/4 in[i] + 1/4 in[i-1] and
 * out[2i+1] = 3/4 in[i] + 1/4 in[i+1], the border pixel standing in for its missing neighbour.
 */
function upscale2x(h: torch.Tensor): torch.Tensor {
  const along = (t: torch.Tensor, dim: number) => {
    const n = t.shape[dim];
    const prev = torch.cat([t.narrow(dim, 0, 1), t.narrow(dim, 0, n - 1)], dim);
    const next = torch.cat([t.narrow(dim, 1, n - 1), t.narrow(dim, n - 1, 1)], dim);
    const even = t.mul(0.75).add(prev.mul(0.25));
    const odd = t.mul(0.75).add(next.mul(0.25));
    const shape = [...t.shape];
    shape[dim] = 2 * n;
    return torch.stack([even, odd], dim + 1).reshape(...shape);
  };
  return along(along(h, 2), 3);
}

test("bilinear 2x by hand: a 2x2 map [[1, 2], [3, 4]] becomes the 4x4 map PyTorch's align_corners=False gives", () => {
  torch.tidy(() => {
    const point = (size: number) => ({
      name: `p${size}`,
      channels: 1,
      height: size,
      width: size,
      kind: "cnn" as const,
    });
    const layer = new StitchingLayer(point(2), point(4));
    const got = layer.align(torch.tensor([1, 2, 3, 4]).reshape(1, 1, 2, 2));
    // Rows [1, 1.25, 1.75, 2] and [3, 3.25, 3.75, 4], then the same 3/4-1/4 blend down the columns.
    const want = [
      [1, 1.25, 1.75, 2],
      [1.5, 1.75, 2.25, 2.5],
      [2.5, 2.75, 3.25, 3.5],
      [3, 3.25, 3.75, 4],
    ];
    assert.deepEqual(got.reshape(4, 4).tolist(), want);
    assert.deepEqual(
      upscale2x(torch.tensor([1, 2, 3, 4]).reshape(1, 1, 2, 2))
        .reshape(4, 4)
        .tolist(),
      want,
    );
    layer.dispose();
  });
});

test("points of different spatial size are resized bilinearly; gradients reach T only", () => {
  const a = createModel("resnet18", { width: 0.125 }).eval(); // not frozen: the front pass itself records no graph
  const b = createModel("resnet18", { width: 0.25 }).eval().requiresGrad_(false);
  const s = new StitchedModel(a, b, "layer2.0", "layer1.1"); // 16 channels at 16x16 -> 16 channels at 32x32
  torch.tidy(() => {
    const x = torch.randn([2, 3, 32, 32]);
    // The stitched model's output is B's tail on T applied to A's features upscaled by hand.
    const h = torch.noGrad(() => a.forwardTo(x, "layer2.0"));
    assert.deepEqual(h.shape, [2, 16, 16, 16]);
    const resized = upscale2x(h);
    const aligned = s.layer.align(h);
    assert.ok(aligned.sub(resized).abs().max().item() < 1e-5, "A's map resized bilinearly");
    const want = torch.noGrad(() =>
      b.forwardFrom(torch.conv2d(resized, s.layer.weight.reshape(16, 16, 1, 1), s.layer.bias), "layer1.1"),
    );
    const got = torch.noGrad(() => s.forward(x));
    assert.ok(got.sub(want).abs().max().item() < 1e-4 * (1 + want.abs().max().item()), "stitched = B(T(resized A))");
    const logits = s.forward(x);
    assert.deepEqual(logits.shape, [2, 10]);
    logits.sum().backward();
    assert.ok(s.layer.weight.grad !== null, "T gets a gradient");
    assert.ok(
      a.parameters().every((p) => p.grad === null),
      "no gradient reaches the front",
    );
  });
  a.dispose();
  b.dispose();
});

test("bad pairs and points are clear errors", () => {
  const cnn = createModel("resnet18", { width: 0.125 });
  const vit = createModel("vit_tiny_patch4_32", { embedDim: 24, depth: 2 });
  const vit64 = createModel("vit_tiny_patch4_32", { embedDim: 24, depth: 2, imageSize: 64 });
  assert.throws(
    () => new StitchedModel(cnn, cnn, "layer9"),
    /front model resnet18 has no stitch point 'layer9'; its points: stem/,
  );
  assert.throws(
    () => new StitchedModel(cnn, vit, "stem", HEAD_POINT),
    /a vector \(a head's input\) stitches to a vector only \(A's stem: 8 x 32 x 32 map; B's head: vector of 24\)/,
  );
  assert.throws(() => new StitchedModel(vit, vit64, "blocks.0"), /different token counts/);
  assert.throws(() => new StitchedModel(cnn, cnn, "stem", "layer2.0").init("identity"), /equal widths/);
  for (const m of [cnn, vit, vit64]) m.dispose();
});

test("across architectures, A's positions are laid onto B's: a map onto tokens and tokens onto a map, by hand", () => {
  torch.tidy(() => {
    const map = (c: number, h: number) => ({ kind: "cnn" as const, name: `m${h}`, channels: c, height: h, width: h });
    const tokens = (c: number, t: number) => ({ kind: "vit" as const, name: `t${t}`, channels: c, tokens: t });
    // A 2-channel 2x2 map onto 5 tokens (a class token, then a 2x2 grid): the class token is the map's mean.
    const x = torch.tensor([1, 2, 3, 4, 10, 20, 30, 40]).reshape(1, 2, 2, 2);
    const toTokens = new StitchingLayer(map(2, 2), tokens(3, 5));
    assert.deepEqual(toTokens.align(x).tolist(), [
      [
        [2.5, 25],
        [1, 10],
        [2, 20],
        [3, 30],
        [4, 40],
      ],
    ]);
    assert.deepEqual(toTokens.forward(x).shape, [1, 5, 3]);
    // Back again: the leading token is dropped and the grid is a map, row-major.
    const toMap = new StitchingLayer(tokens(2, 5), map(3, 2));
    assert.deepEqual(toMap.align(toTokens.align(x)).tolist(), x.tolist());
    assert.deepEqual(toMap.forward(toTokens.align(x)).shape, [1, 3, 2, 2]);
    // A 4x4 map onto a 2x2 grid is resized bilinearly first (each 2x2 block's mean, at this size).
    const big = torch.arange(16, undefined, 1, { dtype: "float32" }).reshape(1, 1, 4, 4);
    assert.deepEqual(new StitchingLayer(map(1, 4), tokens(1, 4)).align(big).flatten().tolist(), [2.5, 4.5, 10.5, 12.5]);
    assert.throws(() => new StitchingLayer(map(2, 2), tokens(3, 7)), /7 tokens are not a square grid/);
    for (const l of [toTokens, toMap]) l.dispose();
  });
});

test("a ResNet front stitches into a ViT back and back again; least squares fits T on the laid-out positions", () => {
  torch.manualSeed(3);
  const cnn = createModel("resnet18", { width: 0.125 }).eval().requiresGrad_(false);
  const vit = createModel("vit_tiny_patch4_32", { embedDim: 24, depth: 2 }).eval().requiresGrad_(false);
  try {
    torch.tidy(() => {
      const x = torch.rand([4, 3, 32, 32]);
      const into = new StitchedModel(cnn, vit, "layer2.1", "blocks.0"); // 16 x 16 x 16 map -> 65 tokens x 24
      const { residual } = into.init("lstsq", x);
      assert.ok(Number.isFinite(residual) && (residual as number) < 1, `residual ${residual}`);
      assert.deepEqual(torch.noGrad(() => into.forward(x)).shape, [4, 10]);
      const out = new StitchedModel(vit, cnn, "blocks.1", "layer3.0"); // 65 tokens x 24 -> 32 x 8 x 8 map
      out.init("lstsq", x);
      assert.deepEqual(torch.noGrad(() => out.forward(x)).shape, [4, 10]);
      into.layer.dispose();
      out.layer.dispose();
    });
  } finally {
    cnn.dispose();
    vit.dispose();
  }
});

test("least squares drops directions below LSTSQ_RCOND: two near-identical samples with different targets do not blow T up", () => {
  torch.manualSeed(5);
  torch.tidy(() => {
    const vec = (name: string, channels: number) => ({ kind: "vector" as const, name, channels });
    const layer = new StitchingLayer(vec("a", 8), vec("b", 3));
    // Six samples, the last a copy of the fifth moved by 1e-7 (float32 rounding, not signal), with another target.
    const base = torch.rand([6, 8]);
    const xs = torch.cat([base.narrow(0, 0, 5), base.narrow(0, 4, 1).add(torch.rand([1, 8]).mul(1e-7))]);
    const ys = torch.rand([6, 3]);
    leastSquaresInit(layer, xs, ys);
    const largest = layer.weight.abs().max().item();
    // Fitting both exactly takes weights of order 1e7; without the near-null direction they stay O(1).
    assert.ok(largest < 100, `T's weights stay bounded: ${largest}`);
    layer.dispose();
  });
});

test("stitching at the head's input (the front-only end): T is a linear map into B's classifier", () => {
  torch.manualSeed(11);
  const a = createModel("resnet18", { width: 0.125 }).eval();
  torch.manualSeed(12);
  const b = createModel("resnet18", { width: 0.125 }).eval();
  const same = new StitchedModel(b, b, HEAD_POINT);
  same.init("identity");
  assert.deepEqual(same.layer.weight.shape, [64, 64], "a [D, D] map of the 64 penultimate features");
  torch.tidy(() => {
    const x = torch.randn([3, 3, 32, 32]);
    const d = torch.noGrad(() => same.forward(x).sub(b.forward(x)).abs().max().item());
    assert.ok(d < 1e-5, `B stitched to itself through the identity is B: ${d}`);
    // A's penultimate features, fitted by least squares into B's: a linear probe into B's head.
    const probe = new StitchedModel(a, b, HEAD_POINT);
    const { residual } = probe.init("lstsq", torch.randn([128, 3, 32, 32]));
    assert.ok(residual !== undefined && residual < 1, `least-squares residual ${residual}`);
    assert.deepEqual(torch.noGrad(() => probe.forward(x)).shape, [3, 10]);
    probe.layer.dispose();
  });
  same.layer.dispose();
  a.dispose();
  b.dispose();
});

test("the curves' front end: A alone (its own head, no T) scored against B, as the reference's 'front' mode", () => {
  torch.manualSeed(3);
  const a = createModel("resnet18", { width: 0.125, numClasses: 10 }).eval();
  const b = createModel("resnet18", { width: 0.125, numClasses: 10 }).eval();
  const n = 24;
  const pixels = new Uint8Array(n * 3 * 32 * 32).map((_, i) => (i * 37 + 11) % 256);
  const labels = Uint8Array.from({ length: n }, (_, i) => i % 10);
  const test = fromBytes(pixels, labels, [n, 3, 32, 32], [..."0123456789"], "synthetic");
  const opts = { normalization: pixelScale(3), batchSize: 10 };
  // Closed form: the meter fed A's and B's own logits on the same normalised images.
  const want = new AgreementMeter();
  torch.tidy(() => {
    const x = normalize(test.images, opts.normalization);
    torch.noGrad(() => want.update(a.forward(x), b.forward(x), test.labels));
  });
  const s = new StitchedModel(a, b, "layer2.0");
  const got = evaluateFrontAlone(s, test, opts);
  assert.ok(got, "same classes: scored");
  for (const k of ["accuracy", "backAccuracy", "agreementProbability", "hardAgreement"] as const)
    assert.ok(Math.abs(got[k] - want.result()[k]) < 1e-6, `${k}: ${got[k]} vs ${want.result()[k]}`);
  // A with itself agrees fully; models of other class counts have no front end.
  const self = evaluateFrontAlone(new StitchedModel(a, a, "layer2.0"), test, opts);
  assert.equal(self?.agreementProbability, 1);
  const other = createModel("resnet18", { width: 0.125, numClasses: 7 }).eval();
  assert.equal(evaluateFrontAlone(new StitchedModel(other, b, "layer2.0"), test, opts), null);
  for (const m of [a, b, other]) m.dispose();
  disposeDataset(test);
});

test("frontAndBack: one pass gives evaluateFrontAlone's score, CKA over the first n images and B's logits", () => {
  torch.manualSeed(4);
  const a = createModel("resnet18", { width: 0.125, numClasses: 10 }).eval();
  const b = createModel("resnet18", { width: 0.125, numClasses: 10 }).eval();
  const n = 26;
  // Images that differ from one another (CKA compares images), from a fixed generator.
  let state = 12345;
  const pixels = new Uint8Array(n * 3 * 32 * 32).map(() => {
    state = (state * 1103515245 + 12345) % 2 ** 31;
    return state >> 23;
  });
  const labels = Uint8Array.from({ length: n }, (_, i) => i % 10);
  const test_ = fromBytes(pixels, labels, [n, 3, 32, 32], [..."0123456789"], "synthetic");
  // Batches of 10, CKA over 13 images: the CKA rows end inside the second batch.
  const opts = { normalization: pixelScale(3), batchSize: 10 };
  const s = new StitchedModel(a, b, "layer2.0");
  s.layer.setIdentity();
  const got = frontAndBack(s, test_, { ...opts, ckaImages: 13 });
  try {
    assert.deepEqual(got.frontAlone, evaluateFrontAlone(s, test_, opts));
    torch.tidy(() =>
      torch.noGrad(() => {
        const x = normalize(test_.images, opts.normalization).narrow(0, 0, 13);
        const want = linearCka(a.forwardTo(x, "layer2.0"), b.forwardTo(x, "layer2.0"));
        assert.ok(Math.abs((got.cka as number) - want) < 1e-6, `CKA ${got.cka} vs ${want}`);
        const all = normalize(test_.images, opts.normalization);
        assert.ok(got.backLogits.sub(b.forward(all)).abs().max().item() < 1e-5, "B's logits");
      }),
    );
    // The stitched model's scores are the same with B's kept logits as with B run again.
    assert.deepEqual(evaluateStitch(s, test_, { ...opts, backLogits: got.backLogits }), evaluateStitch(s, test_, opts));
    assert.equal(frontAndBack(s, test_, { ...opts, ckaImages: 0 }).cka, null, "no CKA images: no CKA");
  } finally {
    got.backLogits.dispose();
    for (const m of [a, b]) m.dispose();
    disposeDataset(test_);
  }
});
