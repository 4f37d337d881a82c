// The convolution layout (torch/layout.ts): which layout runs where, that channels-last really
// reaches the kernels, and that a model computes the same in both layouts (the contiguous path
// is the one checked against PyTorch in models.test.ts and grad.test.ts): forward, the weights'
// and the input's gradients, a stitch through T, on the same weights and inputs.
import assert from "node:assert/strict";
import { after, test } from "node:test";
import { createModel } from "../models/registry.js";
import { StitchingLayer } from "../stitch/layer.js";
import * as torch from "../torch/index.js";

const threads = torch.getNumThreads();
after(() => {
  torch.setConvLayout("auto");
  torch.setNumThreads(threads);
});

/** Whether a 4-d tensor's memory is NHWC (channels vary fastest). */
const isChannelsLast = (t: torch.Tensor): boolean => t.stride()[1] === 1 && t.shape[1] > 1;

test("auto: channels-last on a CPU with one thread, contiguous with more and on a GPU", () => {
  torch.setConvLayout("auto");
  torch.setNumThreads(1);
  assert.equal(torch.convLayout("cpu"), "channels-last");
  assert.equal(torch.convLayout("cuda"), "contiguous");
  assert.equal(torch.convLayout("cuda:1"), "contiguous");
  torch.setNumThreads(2);
  assert.equal(torch.convLayout("cpu"), "contiguous");
  torch.setConvLayout("channels-last");
  assert.equal(torch.convLayout("cpu"), "channels-last");
  torch.setConvLayout("contiguous");
  torch.setNumThreads(1);
  assert.equal(torch.convLayout("cpu"), "contiguous");
  torch.setConvLayout("auto");
  assert.throws(() => torch.setConvLayout("nhwc" as "auto"), /'nhwc' is not auto, channels-last or contiguous/);
  torch.setNumThreads(threads);
});

test("toConvLayout converts 4-d tensors only, and the layout reaches every convolution of a ResNet", () => {
  torch.setConvLayout("channels-last");
  const x = torch.randn([2, 3, 8, 8]);
  assert.ok(!isChannelsLast(x));
  assert.ok(isChannelsLast(torch.toConvLayout(x)));
  const v = torch.randn([4, 5]);
  assert.deepEqual(torch.toConvLayout(v).stride(), v.stride());
  torch.manualSeed(0);
  const m = createModel("resnet18", { width: 0.125 });
  m.eval();
  // Features at each stage come out of the kernels channels-last, without a conversion between.
  for (const p of ["layer1.0", "layer2.1", "layer4.1"]) assert.ok(isChannelsLast(m.forwardTo(x, p)), p);
  torch.setConvLayout("contiguous");
  for (const p of ["layer1.0", "layer2.1", "layer4.1"]) assert.ok(m.forwardTo(x, p).isContiguous(), p);
  torch.setConvLayout("auto");
});

/** max |a - b| over max |b|, over every element. */
function relErr(a: torch.Tensor, b: torch.Tensor): number {
  const x = a.toTypedArray() as Float32Array;
  const y = b.toTypedArray() as Float32Array;
  assert.equal(x.length, y.length);
  let d = 0;
  let s = 0;
  for (let i = 0; i < x.length; i++) {
    d = Math.max(d, Math.abs(x[i] - y[i]));
    s = Math.max(s, Math.abs(y[i]));
  }
  return d / s;
}

/** A train-mode step's loss, logits, weight gradients and input gradient, in one layout. */
function trainStep(layout: torch.ConvLayout, x: torch.Tensor, y: torch.Tensor) {
  torch.setConvLayout(layout);
  torch.manualSeed(3);
  const m = createModel("resnet18", { width: 0.125 });
  m.train();
  const xi = x.clone().requiresGrad_(true);
  const logits = m.forward(xi);
  const loss = torch.crossEntropy(logits, y);
  loss.backward();
  const grads = m.namedParameters().map(([name, p]) => [name, (p.grad as torch.Tensor).clone()] as const);
  return { loss: loss.item(), logits: logits.detach(), grads, input: (xi.grad as torch.Tensor).clone() };
}

test("a ResNet's train-mode forward and backward agree in both layouts (weights' and input's gradients)", () => {
  torch.setNumThreads(1);
  torch.manualSeed(1);
  const x = torch.randn([16, 3, 32, 32]);
  const y = torch.randint(0, 10, [16]);
  const nchw = trainStep("contiguous", x, y);
  const nhwc = trainStep("channels-last", x, y);
  torch.setConvLayout("auto");
  torch.setNumThreads(threads);
  assert.ok(Math.abs(nchw.loss - nhwc.loss) < 1e-5, `loss ${nchw.loss} vs ${nhwc.loss}`);
  assert.ok(relErr(nhwc.logits, nchw.logits) < 1e-5, "logits");
  assert.ok(relErr(nhwc.input, nchw.input) < 1e-4, `input gradient: ${relErr(nhwc.input, nchw.input)}`);
  assert.equal(nhwc.grads.length, nchw.grads.length);
  for (let i = 0; i < nchw.grads.length; i++) {
    const [name, g] = nchw.grads[i];
    assert.equal(nhwc.grads[i][0], name);
    assert.deepEqual(nhwc.grads[i][1].shape, g.shape, name);
    assert.ok(relErr(nhwc.grads[i][1], g) < 1e-4, `${name}: ${relErr(nhwc.grads[i][1], g)}`);
  }
});

test("a stitch through T agrees in both layouts", () => {
  torch.manualSeed(2);
  const a = createModel("resnet18", { width: 0.125 });
  const b = createModel("resnet18", { width: 0.125 });
  a.eval();
  b.eval();
  const t = new StitchingLayer(a.stitchPoint("layer2.1"), b.stitchPoint("layer2.1"));
  const x = torch.randn([4, 3, 32, 32]);
  const run = (layout: torch.ConvLayout) => {
    torch.setConvLayout(layout);
    return b.forwardFrom(t.forward(a.forwardTo(x, "layer2.1")), "layer2.1");
  };
  const nchw = run("contiguous");
  const nhwc = run("channels-last");
  torch.setConvLayout("auto");
  assert.ok(relErr(nhwc, nchw) < 1e-5);
});

/**
 * A train-mode batch norm's output, running statistics and gradients (input, weight, bias) for
 * input x (float64 values; run in `dtype` and `layout`), with a fixed upstream gradient.
 */
function batchNormCase(x64: torch.Tensor, g64: torch.Tensor, dtype: "float32" | "float64", layout: torch.ConvLayout) {
  const C = x64.shape[1];
  const cast = (t: torch.Tensor) => {
    const c = t.to(dtype);
    return c.contiguous(layout);
  };
  const x = cast(x64).requiresGrad_(true);
  const ramp = (lo: number, hi: number) =>
    torch
      .arange(0, C)
      .mul((hi - lo) / (C - 1))
      .add(lo)
      .to(dtype);
  const w = ramp(0.5, 1.5).requiresGrad_(true);
  const b = ramp(-1, 1).requiresGrad_(true);
  const rm = ramp(0, 1);
  const rv = ramp(1, 2);
  const y = torch.batchNorm(x, rm, rv, { weight: w, bias: b, training: true, momentum: 0.3, eps: 1e-5 });
  const [gx, gw, gb] = torch.grad(y, [x, w, b], { gradOutputs: [cast(g64)] }) as torch.Tensor[];
  const f64 = (t: torch.Tensor) => t.detach().to("float64");
  return {
    y: f64(y),
    rm: f64(rm),
    rv: f64(rv),
    gx: f64(gx),
    gw: f64(gw),
    gb: f64(gb),
    yChannelsLast: isChannelsLast(y),
  };
}

test("train-mode batch norm on channels-last inputs: float64's results where channels are far from zero", () => {
  torch.setNumThreads(1);
  torch.manualSeed(4);
  // Channel means 0, 3 and 30 sds, and more (ReLU outputs sit far from zero): the case where
  // libtorch 1.13's own channels-last kernel is 40x further from float64 than its contiguous one.
  const C = 8;
  const offsets = torch.tensor([0, 3, 30, 300, -5, 1, 0.1, 50]).reshape(1, C, 1, 1).to("float64");
  // Rounded to float32 first, so that float64 computes on the very inputs float32 runs see.
  const x64 = torch.randn([6, C, 5, 7], { dtype: "float64" }).mul(0.1).add(offsets).to("float32").to("float64");
  const g64 = torch.randn([6, C, 5, 7], { dtype: "float64" });
  const ref = batchNormCase(x64, g64, "float64", "contiguous");
  const nchw = batchNormCase(x64, g64, "float32", "contiguous");
  const nhwc = batchNormCase(x64, g64, "float32", "channels-last");
  torch.setNumThreads(threads);
  assert.ok(nhwc.yChannelsLast, "the output keeps the input's layout");
  for (const k of ["y", "rm", "rv", "gx", "gw", "gb"] as const) {
    const ours = relErr(nhwc[k], ref[k]);
    const aten = relErr(nchw[k], ref[k]);
    // Within float32's reach, and never much further from float64 than aten's contiguous kernel
    // (libtorch's channels-last one was 2.4e-4 off in y at 300 sds).
    assert.ok(ours < 1e-4, `${k}: ${ours} from float64`);
    assert.ok(ours < Math.max(2 * aten, 1e-6), `${k}: ${ours} from float64, aten's contiguous ${aten}`);
  }
});

test("batch norm without running statistics, and no second derivative", () => {
  torch.setNumThreads(1);
  const x = torch.randn([4, 3, 5, 5]).contiguous("channels-last");
  const w = torch.ones([3]);
  const b = torch.zeros([3]);
  const ours = torch.batchNorm(x, null, null, { weight: w, bias: b, training: true });
  const aten = torch.batchNorm(x.contiguous(), null, null, { weight: w, bias: b, training: true });
  assert.ok(relErr(ours, aten) < 1e-5);
  // Without weight and bias too (the affine identity), on channels 3,000 sds from zero: float64's
  // output on the same float32 inputs, where libtorch's channels-last kernel is 8e-5 to 1.7e-4
  // off (and its contiguous one 2e-5 to 6e-5).
  const far = torch.randn([4, 3, 5, 5]).mul(0.1).add(300);
  const plain = torch.batchNorm(far.contiguous("channels-last"), null, null, { training: true });
  const exact = torch.batchNorm(far.double(), null, null, { training: true });
  assert.ok(relErr(plain.double(), exact) < 1e-6, `${relErr(plain.double(), exact)}`);
  // A second derivative through it would be silently zero: refused, naming the way out.
  const xg = torch.randn([4, 3, 5, 5]).contiguous("channels-last").requiresGrad_(true);
  const y = torch.batchNorm(xg, null, null, { weight: w, bias: b, training: true });
  assert.throws(() => torch.grad(y.square().sum(), xg, { createGraph: true }), /no second derivative.*contiguous/);
  torch.setNumThreads(threads);
});
