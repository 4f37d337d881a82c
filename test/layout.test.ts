// The convolution layout (torch/layout.ts): which layout runs where, that channels-last really
// reaches the kernels, and that a model computes the same in both layouts (the contiguous path
// is the one checked against PyTorch in models.test.ts and grad.test.ts): forward, the weights'
// and the input's gradients, a stitch through T, on the same weights and inputs. Then the odd
// shapes of issue 36 against float32's error bounds, and the whole file again under
// DNNL_MAX_CPU_ISA=AVX2 with glibc's malloc checks (the ISA where channels-last faulted).
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
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

test("auto: channels-last on a CPU with one thread where oneDNN runs AVX-512, contiguous with more and on a GPU", () => {
  torch.setConvLayout("auto");
  torch.setNumThreads(1);
  const avx512 = torch.onednnAvx512();
  assert.equal(torch.convLayout("cpu"), avx512 ? "channels-last" : "contiguous", torch.onednnIsa());
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

test("oneDNN's ISA is read from oneDNN and follows DNNL_MAX_CPU_ISA", () => {
  const isa = torch.onednnIsa();
  assert.match(isa, /^(sse41|avx|avx2|avx2_vnni|avx512_\w+)$/, "Debian's libtorch exports oneDNN's ISA query");
  const cap = process.env.DNNL_MAX_CPU_ISA ?? process.env.ONEDNN_MAX_CPU_ISA;
  if (cap?.toUpperCase() === "AVX2") assert.equal(isa, "avx2");
  // A forced channels-last keeps the convolutions with few channels contiguous unless AVX-512 runs.
  assert.equal(torch.channelsLastSafe(4, 8), torch.onednnAvx512());
  assert.equal(torch.channelsLastSafe(8, 12), true);
});

test("toConvLayout converts 4-d tensors only, and the layout reaches every convolution of a ResNet", () => {
  torch.setConvLayout("channels-last");
  const x = torch.randn([2, 3, 8, 8]);
  const h = torch.randn([2, 8, 8, 8]);
  assert.ok(!isChannelsLast(h));
  assert.ok(isChannelsLast(torch.toConvLayout(h, 8)));
  // A convolution unsafe in channels-last on this CPU gets a contiguous input, even from a channels-last one.
  const few = torch.toConvLayout(x.contiguous("channels-last"), 4);
  assert.equal(isChannelsLast(few), torch.channelsLastSafe(3, 4));
  const v = torch.randn([4, 5]);
  assert.deepEqual(torch.toConvLayout(v, 8).stride(), v.stride());
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
      .mul((hi - lo) / Math.max(C - 1, 1))
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

// Odd shapes (issue 36): channel counts that are not multiples of any vector width (1, 3, 4, 5, 7,
// 12), odd spatial sizes and batch 1, in both layouts, against libtorch's contiguous kernels. The
// same cases run again under DNNL_MAX_CPU_ISA=AVX2 below, where oneDNN's channels-last kernels
// corrupted the heap at 4 channels.
// 9 and 13: over AVX2's 8, so its channels-last kernels run in the AVX2 run below, at widths they were not measured at.
const ODD_CHANNELS = [1, 3, 4, 5, 7, 9, 12, 13];
const ODD_SHAPES: [number, number, number][] = [
  [1, 7, 5],
  [3, 9, 11],
];
/** float32's unit roundoff. */
const U = 2 ** -24;

/**
 * Every element of `a` and `b` within `slack` x gamma_K x bound of each other: a sum of K products
 * computed in float32, in any order and with or without FMA, is within gamma_K = K u / (1 - K u)
 * of Σ|a_i b_i| from the exact sum (Higham, Accuracy and Stability, 3.1), and `bound` holds those
 * Σ|a_i b_i|, so two such sums differ by at most twice that. The tolerance follows from the
 * operation, not from one CPU's result.
 */
function withinSumError(a: torch.Tensor, b: torch.Tensor, bound: torch.Tensor, K: number, what: string) {
  const gamma = (K * U) / (1 - K * U);
  const x = a.contiguous().toTypedArray() as Float32Array;
  const y = b.contiguous().toTypedArray() as Float32Array;
  const s = bound.contiguous().toTypedArray() as Float64Array;
  assert.equal(x.length, y.length, what);
  for (let i = 0; i < x.length; i++) {
    const tol = 2 * gamma * s[i] + 1e-30;
    if (!(Math.abs(x[i] - y[i]) <= tol))
      assert.fail(`${what}: element ${i}: ${x[i]} vs ${y[i]}, beyond the float32 bound ${tol.toExponential(2)}`);
  }
}

/** A convolution's output, input gradient and weight gradient, with the input in `layout`. */
function convCase(
  x: torch.Tensor,
  w: torch.Tensor,
  g: torch.Tensor,
  opts: { stride: number; padding: number },
  layout: torch.ConvLayout,
) {
  torch.setConvLayout(layout);
  const xi = torch.toConvLayout(x.clone(), w.shape[0]).requiresGrad_(true);
  const wi = w.clone().requiresGrad_(true);
  const y = torch.conv2d(xi, wi, null, opts);
  const [gx, gw] = torch.grad(y, [xi, wi], { gradOutputs: [g] }) as torch.Tensor[];
  return { y: y.detach(), gx, gw, channelsLast: isChannelsLast(xi) };
}

test("convolutions at odd channel counts, odd sizes and batch 1: both layouts within float32's error of the contiguous kernels", () => {
  torch.setNumThreads(1);
  torch.manualSeed(5);
  let checked = 0;
  for (const [N, H, W] of ODD_SHAPES)
    for (const [ci, cin] of ODD_CHANNELS.entries())
      for (const { k, stride } of [
        { k: 3, stride: 1 },
        { k: 1, stride: 2 },
        { k: 3, stride: 2 },
      ]) {
        const cout = ODD_CHANNELS[(ci + 2) % ODD_CHANNELS.length];
        const opts = { stride, padding: k === 3 ? 1 : 0 };
        const x = torch.randn([N, cin, H, W]);
        const w = torch.randn([cout, cin, k, k]);
        const Ho = Math.floor((H + 2 * opts.padding - k) / stride) + 1;
        const Wo = Math.floor((W + 2 * opts.padding - k) / stride) + 1;
        const g = torch.randn([N, cout, Ho, Wo]);
        const ref = convCase(x, w, g, opts, "contiguous");
        const cl = convCase(x, w, g, opts, "channels-last");
        torch.setConvLayout("auto");
        assert.equal(
          cl.channelsLast,
          torch.channelsLastSafe(cin, cout) && cin > 1,
          "a safe convolution runs channels-last",
        );
        // The bounds: the same sums over |x|, |w| and |g| in float64.
        const [ax, aw, ag] = [x, w, g].map((t) => t.abs().to("float64").requiresGrad_(true));
        const yb = torch.conv2d(ax, aw, null, opts);
        const [bx, bw] = torch.grad(yb, [ax, aw], { gradOutputs: [ag] }) as torch.Tensor[];
        const what = `${N}x${cin}x${H}x${W} -> ${cout}, k${k} s${stride}`;
        withinSumError(cl.y, ref.y, yb.detach(), cin * k * k, `${what}: output`);
        withinSumError(cl.gx, ref.gx, bx, cout * k * k, `${what}: input gradient`);
        withinSumError(cl.gw, ref.gw, bw, N * Ho * Wo, `${what}: weight gradient`);
        checked++;
      }
  torch.setNumThreads(threads);
  assert.equal(checked, ODD_SHAPES.length * ODD_CHANNELS.length * 3);
});

test("train-mode batch norm, pooling and resizing on channels-last inputs at odd shapes: libtorch's contiguous results", () => {
  torch.setNumThreads(1);
  torch.manualSeed(6);
  for (const [N, H, W] of ODD_SHAPES)
    for (const C of ODD_CHANNELS) {
      const what = `${N}x${C}x${H}x${W}`;
      // Batch norm: the mean and variance are sums of M = N H W terms; each is within M u of the
      // sum of magnitudes, so the normalised output and the gradients are within a few M u (8x:
      // two sums, a division and a square root) of float64, relative to their largest element.
      const M = N * H * W;
      const x64 = torch.randn([N, C, H, W], { dtype: "float64" }).mul(2).add(1).to("float32").to("float64");
      const g64 = torch.randn([N, C, H, W], { dtype: "float64" });
      if (M > 1) {
        const ref = batchNormCase(x64, g64, "float64", "contiguous");
        const nhwc = batchNormCase(x64, g64, "float32", "channels-last");
        for (const k of ["y", "rm", "rv", "gx", "gw", "gb"] as const) {
          const err = relErr(nhwc[k], ref[k]);
          assert.ok(err <= 8 * M * U, `${what}: batch norm ${k}: ${err} from float64, over 8 M u = ${8 * M * U}`);
        }
      }
      // Pooling and resizing only move or average values: the same float32 operations in either layout.
      const x = x64.to("float32");
      const cl = x.contiguous("channels-last");
      const pairs: [string, (t: torch.Tensor) => torch.Tensor][] = [
        ["max pool", (t) => torch.maxPool2d(t, 3, { stride: 2, padding: 1 })],
        ["adaptive average pool", (t) => torch.adaptiveAvgPool2d(t, [1, 1])],
        ["bilinear resize", (t) => torch.interpolateBilinear(t, [H + 2, W - 1])],
      ];
      for (const [name, f] of pairs) {
        const err = relErr(f(cl), f(x));
        // Averages of at most H W terms, each rounded once: H W u relative.
        assert.ok(err <= H * W * U, `${what}: ${name}: ${err}`);
      }
    }
  torch.setNumThreads(threads);
});

test("a width-1/16 ResNet-18 (4-channel stages) trains a step and agrees in both layouts at batch 1 and 8", () => {
  torch.setNumThreads(1);
  // 32 px at batch 8 is the training that aborted on an AVX2 CPU (issue 36); 17x15 at batch 1 the odd case.
  for (const [n, H, W] of [
    [1, 17, 15],
    [8, 32, 32],
  ]) {
    torch.manualSeed(7);
    const x = torch.randn([n, 3, H, W]);
    const y = torch.randint(0, 10, [n]);
    const step = (layout: torch.ConvLayout) => {
      torch.setConvLayout(layout);
      torch.manualSeed(8);
      const m = createModel("resnet18", { width: 0.0625 });
      // Batch norm in train mode needs more than one value per channel: eval at batch 1.
      if (n === 1) m.eval();
      else m.train();
      const xi = x.clone().requiresGrad_(true);
      const loss = torch.crossEntropy(m.forward(xi), y);
      loss.backward();
      return { loss: loss.item(), input: (xi.grad as torch.Tensor).clone() };
    };
    const nchw = step("contiguous");
    const nhwc = step("channels-last");
    torch.setConvLayout("auto");
    // Through 20 layers each sum's rounding compounds: 1e-4 relative is ~1,700 u, far above the
    // ~100 u a few layers of 100-term sums give, and far below a wrong kernel's O(1).
    assert.ok(
      Math.abs(nchw.loss - nhwc.loss) <= 1e-4 * Math.abs(nchw.loss),
      `batch ${n}: loss ${nchw.loss} vs ${nhwc.loss}`,
    );
    assert.ok(relErr(nhwc.input, nchw.input) < 1e-3, `batch ${n}: input gradient ${relErr(nhwc.input, nchw.input)}`);
  }
  torch.setNumThreads(threads);
});

test("oneDNN's blocked layout (an ONNX graph's no-gradient path, models/onnx/blocked.ts) at odd channels and shapes: the dense kernels' values", () => {
  torch.setNumThreads(1);
  torch.manualSeed(11);
  // The ops blocked.ts runs: the input reordered to a mkldnn tensor, the weight reordered once,
  // the convolution, batch norm in eval mode, ReLU, the addition of two maps, a max pool and a
  // global average pool on mkldnn tensors, then dense. 1x1 stride 2 at 16 px, batch 8: the shape
  // whose AVX2 channels-last kernel corrupted the heap; a 7x7 stride-2 stem; a dilated 3x3.
  const run = (x: torch.Tensor, w: torch.Tensor, bn: torch.Tensor[], k: number, s: number, d: number) =>
    torch.noGrad(() => {
      const p = d * Math.floor(k / 2);
      const [gamma, beta, mean, variance] = bn;
      const tail = (y: torch.Tensor) => {
        const normed = torch.call("batch_norm", y, gamma, beta, mean, variance, false, 0.1, 1e-5, false);
        const r = torch.call("relu", normed);
        const pooled = torch.call(
          "max_pool2d",
          torch.call("add.Tensor", r, r, 1),
          [3, 3],
          [2, 2],
          [1, 1],
          [1, 1],
          false,
        );
        return [pooled, torch.call("adaptive_avg_pool2d", pooled, [1, 1])] as torch.Tensor[];
      };
      const wb = torch.call(
        "mkldnn_reorder_conv2d_weight",
        torch.call("to_mkldnn", w, null),
        [p, p],
        [s, s],
        [d, d],
        1,
      );
      const y = torch.call("mkldnn_convolution", torch.call("to_mkldnn", x, null), wb, null, [p, p], [s, s], [d, d], 1);
      const blocked = tail(y).map((t) => torch.call("to_dense", t, null) as torch.Tensor);
      const ref = tail(torch.conv2d(x, w, null, { stride: s, padding: p, dilation: d }));
      return { blocked, ref };
    });
  for (const ic of ODD_CHANNELS)
    for (const oc of [4, 8, 13])
      for (const [n, hw, k, s, d] of [
        [8, 16, 1, 2, 1],
        [1, 15, 3, 1, 1],
        [2, 32, 7, 2, 1],
        [2, 15, 3, 1, 2],
      ]) {
        const x = torch.randn([n, ic, hw, hw]);
        const w = torch.randn([oc, ic, k, k]);
        const bn = [torch.rand([oc]).add(0.5), torch.randn([oc]), torch.randn([oc]), torch.rand([oc]).add(0.5)];
        for (let rep = 0; rep < 3; rep++) {
          // repeated, as passes repeat: a corrupted heap shows at a later free
          const { blocked, ref } = run(x, w, bn, k, s, d);
          for (const [i, t] of blocked.entries()) {
            const err = relErr(t, ref[i] as torch.Tensor);
            assert.ok(err < 1e-5, `${ic}->${oc}, ${k}x${k} stride ${s} dilation ${d}, ${hw} px, output ${i}: ${err}`);
          }
        }
      }
  torch.setNumThreads(threads);
});

/** glibc's malloc checker (Debian 12's libc6 ships it), which turns a corrupted heap into an abort. */
const MALLOC_DEBUG = [
  "/usr/lib/x86_64-linux-gnu/libc_malloc_debug.so.0",
  "/lib/x86_64-linux-gnu/libc_malloc_debug.so.0",
].find(existsSync);

test("every case above again with oneDNN capped at AVX2 and glibc's malloc checks: no fault, the same numbers", {
  skip: process.env.STITCHLAB_LAYOUT_CHILD === "1" ? "this is the AVX2 run itself" : false,
}, () => {
  // oneDNN fixes its ISA when a process first asks, so the cap needs a process of its own.
  // With the checks, a heap write out of bounds aborts (an AVX2 channels-last 1x1 stride-2
  // convolution from 4 to 8 channels did) where it could otherwise pass unseen.
  const env: NodeJS.ProcessEnv = { ...process.env, DNNL_MAX_CPU_ISA: "AVX2", STITCHLAB_LAYOUT_CHILD: "1" };
  // Else the child reports to this runner's protocol instead of printing its results.
  delete env.NODE_TEST_CONTEXT;
  // Under AddressSanitizer (test/sanitize.test.ts) ASan's allocator is the check, and glibc's
  // must not replace it.
  if (process.env.STITCHLAB_ADDON === "asan") console.error("layout test: the AVX2 run goes under AddressSanitizer");
  else if (MALLOC_DEBUG) Object.assign(env, { LD_PRELOAD: MALLOC_DEBUG, GLIBC_TUNABLES: "glibc.malloc.check=3" });
  else console.error("layout test: glibc's libc_malloc_debug.so.0 not found; the AVX2 run goes without malloc checks");
  const r = spawnSync(process.execPath, ["--expose-gc", "--import", "tsx", "--test", import.meta.filename], {
    env,
    encoding: "utf8",
    timeout: 300_000,
  });
  const out = `${r.stdout}\n${r.stderr}`;
  assert.equal(r.signal, null, `the AVX2 run was killed by ${r.signal}:\n${out.slice(-3000)}`);
  assert.equal(r.status, 0, `the AVX2 run failed:\n${out.slice(-3000)}`);
  assert.match(r.stdout, /# pass [1-9]/, "the AVX2 run ran the cases");
  assert.match(r.stdout, /# fail 0/);
});
