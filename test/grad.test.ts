// Gradients of the differentiable operators against central finite differences, in float64 on
// tiny inputs, and the autograd API: explicit output gradients, accumulation in .grad, second
// derivatives with createGraph, noGrad and detach.
import assert from "node:assert/strict";
import { test } from "node:test";
import * as torch from "../torch/index.js";
import {
  assertClose,
  awayFromZero,
  bools,
  hashSeed,
  type InputSpec,
  ints,
  make,
  normal,
  positive,
  uniform,
  values,
} from "./helpers/tensors.js";

type T = torch.Tensor;

interface FiniteDifferenceOptions {
  /** Indices of the inputs to differentiate: every float64 input by default. */
  wrt?: number[];
  eps?: number;
  rtol?: number;
  atol?: number;
  /** Seed of the random projection of the output. */
  seed?: number;
}

/**
 * Checks autograd's gradient of fn against central finite differences. The output is reduced to
 * a scalar through a fixed random projection, L = sum(fn(inputs) * r), so every element of the
 * Jacobian contributes (a plain sum would hide, for instance, all of softmax's gradient). The
 * inputs differentiated must be float64; the others (targets, indices, masks) are held fixed.
 * Fails when an element of dL/dx differs by more than atol * max(1, max |numeric|) + rtol * |numeric|,
 * and when the numeric gradient is zero everywhere (a check that could not fail).
 */
function finiteDifferenceCheck(fn: (...inputs: T[]) => T, inputs: T[], opts: FiniteDifferenceOptions = {}): void {
  const wrt = opts.wrt ?? inputs.flatMap((t, i) => (t.dtype === "float64" ? [i] : []));
  const eps = opts.eps ?? 1e-6;
  const rtol = opts.rtol ?? 1e-6;
  const atol = opts.atol ?? 1e-6;
  assert.ok(wrt.length > 0, "finiteDifferenceCheck: nothing to differentiate");
  torch.tidy(() => {
    for (const i of wrt) assert.equal(inputs[i].dtype, "float64", `input ${i} must be float64`);
    const leaves = inputs.map((t, i) => (wrt.includes(i) ? t.detach().requiresGrad_() : t));
    const out = fn(...leaves);
    assert.equal(out.dtype, "float64", "the output must be float64");
    assert.ok(out.requiresGrad, "the output does not require grad: no autograd history");
    const r = make(normal(out.shape, "float64"), opts.seed ?? 1234);
    const loss = out.mul(r).sum();
    const analytic = torch.grad(
      loss,
      wrt.map((i) => leaves[i]),
    );
    const lossAt = (args: T[]) =>
      torch.noGrad(() =>
        torch.tidy(() =>
          fn(...args)
            .mul(r)
            .sum()
            .item(),
        ),
      );
    for (const [k, i] of wrt.entries()) {
      const base = inputs[i].toTypedArray() as Float64Array;
      const shape = inputs[i].shape;
      const numeric = new Float64Array(base.length);
      for (let j = 0; j < base.length; j++) {
        const at = (delta: number) => {
          const v = base.slice();
          v[j] += delta;
          const args = inputs.slice();
          args[i] = torch.tensor(v, { shape });
          return lossAt(args);
        };
        numeric[j] = (at(eps) - at(-eps)) / (2 * eps);
      }
      assert.ok(
        numeric.some((v) => Math.abs(v) > 1e-8),
        `input ${i}: the numeric gradient is zero everywhere, so the check proves nothing`,
      );
      const g = analytic[k];
      assert.ok(g !== null, `input ${i}: no gradient`);
      assertClose(g, torch.tensor(numeric, { shape }), { rtol, atol, label: `d/d input ${i}` });
    }
  });
}

interface GradCase {
  name: string;
  inputs: InputSpec[];
  fn: (...x: T[]) => T;
  opts?: FiniteDifferenceOptions;
}
const cases: GradCase[] = [];
function grad(name: string, inputs: InputSpec[], fn: (...x: T[]) => T, opts?: FiniteDifferenceOptions) {
  cases.push({ name, inputs, fn, opts });
}
const N = (...shape: number[]) => normal(shape, "float64");
const P = (...shape: number[]) => positive(shape, "float64");
const Z = (...shape: number[]) => awayFromZero(shape, "float64", 0.05);

// ---------------------------------------------------------------- elementwise
grad("add", [N(2, 3), N(2, 3)], (a, b) => a.add(b));
grad("add broadcast alpha", [N(2, 3), N(3)], (a, b) => a.add(b, 0.5));
grad("add scalar", [N(2, 3)], (a) => a.add(2));
grad("sub broadcast", [N(2, 1), N(3)], (a, b) => a.sub(b, 2));
grad("mul", [N(2, 3), N(2, 3)], (a, b) => a.mul(b));
grad("mul broadcast", [N(2, 3), N(2, 1)], (a, b) => a.mul(b));
grad("mul scalar", [N(4)], (a) => a.mul(-1.5));
grad("div", [N(2, 3), Z(2, 3)], (a, b) => a.div(b));
grad("div broadcast", [N(2, 3), P(3)], (a, b) => a.div(b));
grad("pow scalar", [P(2, 3)], (a) => a.pow(2.5));
grad("pow 2", [N(2, 3)], (a) => a.pow(2));
grad("pow tensor", [P(2, 3), N(2, 3)], (a, b) => a.pow(b));
grad("exp", [N(2, 3)], (a) => a.exp());
grad("log", [P(2, 3)], (a) => a.log());
grad("sqrt", [P(2, 3)], (a) => a.sqrt());
grad("rsqrt", [P(2, 3)], (a) => a.rsqrt());
grad("tanh", [N(2, 3)], (a) => a.tanh());
grad("sigmoid", [N(2, 3)], (a) => a.sigmoid());
grad("sin cos", [N(2, 3)], (a) => a.sin().mul(a.cos()));
grad("abs", [Z(2, 3)], (a) => a.abs());
grad("neg square reciprocal", [Z(2, 3)], (a) => a.neg().square().add(a.reciprocal()));
grad("maximum minimum", [N(2, 3), N(2, 3)], (a, b) => a.maximum(b).mul(a.minimum(b).add(2)));
grad("relu", [values([-1.2, 0.3, 0.8, -0.4, 2, -0.1, 0.05, -2.5], [2, 4], "float64")], (a) => torch.relu(a));
grad("relu random", [Z(3, 4)], (a) => a.relu());
grad("gelu", [N(2, 4)], (a) => torch.gelu(a));
grad("gelu tanh", [N(2, 4)], (a) => torch.gelu(a, "tanh"));
// clamp away from its kinks: no value within 0.05 of a bound.
const CLAMPED = values([-1.2, -0.7, -0.3, 0, 0.2, 0.45, 0.6, 1.3], [2, 4], "float64");
grad("clamp numbers", [CLAMPED], (a) => a.clamp(-0.5, 0.5));
grad("clamp min", [CLAMPED], (a) => a.clamp(0.1));
grad(
  "clamp tensors",
  [CLAMPED, values([-0.5, -0.5, -0.5, -0.5], [4], "float64"), values([0.5, 0.5, 0.5, 0.5], [4], "float64")],
  (a, lo, hi) => a.clamp(lo, hi),
);
grad("where", [bools([2, 3]), N(2, 3), N(2, 3)], (c, a, b) => torch.where(c, a, b));
grad("where scalar", [bools([2, 3]), N(2, 3)], (c, a) => torch.where(c, a, 0.5));
grad("maskedFill", [N(2, 3), bools([2, 3])], (a, m) => a.maskedFill(m, 1));

// ---------------------------------------------------------------- reductions
grad("sum", [N(2, 3)], (a) => a.sum());
grad("sum dims keepdim", [N(2, 3, 2)], (a) => a.sum([0, 2], true));
grad("mean", [N(2, 3)], (a) => a.mean());
grad("mean dim", [N(2, 3, 2)], (a) => a.mean(1));
grad("norm", [N(2, 3)], (a) => a.norm());
grad("norm p1", [Z(2, 3)], (a) => a.norm(1));
grad("norm dim", [N(2, 3)], (a) => a.norm(2, 1));
grad("logsumexp", [N(2, 3)], (a) => a.logsumexp(1));
grad("logsumexp dims", [N(2, 3, 2)], (a) => a.logsumexp([0, 2], true));
grad("var std", [N(3, 4)], (a) => a.var(1).add(a.std(0).sum()));
grad("max dim", [N(3, 4)], (a) => a.max(1)[0]);
grad("prod", [P(5)], (a) => a.prod());

// ---------------------------------------------------------------- shape
grad("pad constant", [N(1, 2, 3)], (a) => a.pad([1, 2], "constant", 0.5));
grad("pad reflect", [N(1, 2, 4)], (a) => a.pad([2, 1], "reflect"));
grad("pad replicate", [N(1, 1, 3, 3)], (a) => a.pad([1, 0, 1, 2], "replicate"));
grad("cat", [N(2, 3), N(2, 2)], (a, b) => torch.cat([a, b], 1));
grad("stack", [N(2, 3), N(2, 3)], (a, b) => torch.stack([a, b], 1));
// Repeated indices: the gradient must accumulate.
grad("indexSelect", [N(3, 4), values([2, 0, 2, 3, 2], [5], "int64")], (a, i) => a.indexSelect(1, i));
grad("gather", [N(3, 4), values([0, 0, 3, 1, 2, 2, 2, 1, 3, 3, 0, 1], [3, 4], "int64")], (a, i) => a.gather(1, i));
grad("index", [N(4, 3), values([3, 1, 3], [3], "int64")], (a, i) => a.index([i]));
grad("views", [N(2, 3, 4)], (a) =>
  a.permute(2, 0, 1).reshape(4, 6).transpose(0, 1).narrow(0, 1, 4).slice(1, 1, 4).select(1, 0),
);
grad("expand squeeze unsqueeze", [N(3, 1)], (a) => a.expand(3, 4).unsqueeze(0).squeeze(0).mul(a.t().t()));
grad("chunk split", [N(4, 3)], (a) => {
  const [p, q] = a.chunk(2);
  const [r, s] = a.split(1, 1);
  return p.mul(q).sum().add(r.mul(s).sum());
});

// ---------------------------------------------------------------- linear algebra and layers
grad("matmul", [N(3, 4), N(4, 2)], (a, b) => a.matmul(b));
grad("matmul batched broadcast", [N(2, 1, 2, 3), N(2, 3, 2)], (a, b) => torch.matmul(a, b));
grad("mm bmm", [N(2, 2, 3), N(2, 3, 2)], (a, b) => a.bmm(b).add(a.select(0, 0).mm(b.select(0, 1))));
grad("linear", [N(3, 4), N(2, 4), N(2)], (x, w, b) => torch.linear(x, w, b));
grad("linear no bias 3-d", [N(2, 2, 3), N(2, 3)], (x, w) => torch.linear(x, w));
grad("conv2d", [N(1, 2, 5, 5), N(3, 2, 3, 3), N(3)], (x, w, b) => torch.conv2d(x, w, b));
grad("conv2d stride padding", [N(1, 2, 5, 5), N(2, 2, 3, 3), N(2)], (x, w, b) =>
  torch.conv2d(x, w, b, { stride: 2, padding: 1 }),
);
grad("conv2d dilation groups", [N(1, 4, 5, 5), N(2, 2, 2, 2)], (x, w) =>
  torch.conv2d(x, w, null, { dilation: 2, groups: 2, padding: 1 }),
);
grad("maxPool2d", [N(1, 2, 4, 4)], (x) => torch.maxPool2d(x, 2));
grad("maxPool2d overlapping", [N(1, 1, 5, 5)], (x) => torch.maxPool2d(x, 3, { stride: 2, padding: 1 }));
grad("avgPool2d", [N(1, 2, 4, 4)], (x) => torch.avgPool2d(x, 2));
grad("avgPool2d padding", [N(1, 1, 5, 5)], (x) =>
  torch.avgPool2d(x, 3, { stride: 2, padding: 1, countIncludePad: false }),
);
grad("adaptiveAvgPool2d", [N(1, 2, 5, 5)], (x) => torch.adaptiveAvgPool2d(x, [3, 2]));
grad("adaptiveMaxPool2d", [N(1, 2, 5, 4)], (x) => torch.adaptiveMaxPool2d(x, [2, 3]));
// Training mode: the running statistics are updated in place, so each evaluation gets copies.
const RM = N(3);
const RV = P(3);
grad(
  "batchNorm training",
  [N(4, 3, 2), N(3), N(3), RM, RV],
  (x, w, b, rm, rv) => torch.batchNorm(x, rm.clone(), rv.clone(), { weight: w, bias: b, training: true }),
  { wrt: [0, 1, 2] },
);
grad("batchNorm training 4-d no affine", [N(3, 2, 2, 2)], (x) =>
  torch.batchNorm(x, null, null, { training: true, eps: 1e-3 }),
);
grad(
  "batchNorm eval",
  [N(4, 3), N(3), N(3), RM, RV],
  (x, w, b, rm, rv) => torch.batchNorm(x, rm, rv, { weight: w, bias: b }),
  { wrt: [0, 1, 2] },
);
grad("layerNorm", [N(2, 3, 4), N(4), N(4)], (x, w, b) => torch.layerNorm(x, [4], w, b));
grad("layerNorm 2 dims no affine", [N(2, 3, 4)], (x) => torch.layerNorm(x, [3, 4]));
grad("softmax", [N(2, 4)], (x) => torch.softmax(x, 1));
grad("softmax dim 0", [N(3, 2)], (x) => x.softmax(0));
grad("logSoftmax", [N(2, 4)], (x) => torch.logSoftmax(x, -1));
grad("crossEntropy", [N(4, 5), ints([4], 0, 5)], (x, t) => torch.crossEntropy(x, t));
grad("crossEntropy sum label smoothing", [N(4, 5), ints([4], 0, 5)], (x, t) =>
  torch.crossEntropy(x, t, { reduction: "sum", labelSmoothing: 0.1 }),
);
grad(
  "crossEntropy weight none",
  [N(4, 3), ints([4], 0, 3), P(3)],
  (x, t, w) => torch.crossEntropy(x, t, { weight: w, reduction: "none" }),
  { wrt: [0] },
);
// Soft targets: differentiable in the logits and in the target probabilities.
grad("crossEntropy soft", [N(3, 4), uniform([3, 4], 0.1, 1, "float64")], (x, p) =>
  torch.crossEntropy(x, p.div(p.sum(1, true))),
);
grad("crossEntropy soft label smoothing", [N(3, 4), uniform([3, 4], 0.1, 1, "float64")], (x, p) =>
  torch.crossEntropy(x, p.div(p.sum(1, true)), { labelSmoothing: 0.2 }),
);
grad("mseLoss", [N(2, 3), N(2, 3)], (a, b) => torch.mseLoss(a, b));
grad("mseLoss sum", [N(2, 3), N(2, 3)], (a, b) => torch.mseLoss(a, b, "sum"));
grad("mseLoss none", [N(2, 3), N(2, 3)], (a, b) => torch.mseLoss(a, b, "none"));
grad("interpolateBilinear up", [N(1, 2, 3, 3)], (x) => torch.interpolateBilinear(x, [5, 4]));
grad("interpolateBilinear down", [N(1, 1, 5, 6)], (x) => torch.interpolateBilinear(x, [3, 2]));
grad("interpolateBilinear align corners", [N(1, 1, 3, 4)], (x) => torch.interpolateBilinear(x, [5, 7], true));
grad("dropout p=0", [N(2, 3)], (x) => torch.dropout(x, 0));

for (const c of cases) {
  test(`grad: ${c.name}`, () => {
    torch.tidy(() => {
      const inputs = c.inputs.map((s, i) => make(s, hashSeed(`${c.name}/${i}`)));
      finiteDifferenceCheck(c.fn, inputs, c.opts);
    });
  });
}

// ---------------------------------------------------------------- the checker itself

test("finiteDifferenceCheck fails on a wrong gradient", () => {
  torch.tidy(() => {
    const x = make(N(2, 3), 1);
    // x * detach(x): autograd sees x, the true derivative of x^2 is 2x.
    assert.throws(() => finiteDifferenceCheck((a) => a.mul(a.detach()), [x]), /differ/);
    // A gradient that is right except for its scale.
    assert.throws(() => finiteDifferenceCheck((a) => a.mul(1.00001).sub(a.detach().mul(1e-5)).exp(), [x]), /differ/);
    finiteDifferenceCheck((a) => a.mul(a), [x]);
  });
});

// ---------------------------------------------------------------- the autograd API

test("backward with an explicit gradient tensor", () => {
  torch.tidy(() => {
    const x = torch.tensor([1, 2, -3], { dtype: "float64", requiresGrad: true });
    const y = x.mul(x);
    y.backward(torch.tensor([1, 0.5, 2], { dtype: "float64" }));
    assert.deepEqual(x.grad!.tolist(), [2, 2, -12]);
    assert.throws(() => x.mul(x).backward(), /scalar|implicitly/);
  });
});

test(".grad accumulates across backward calls and can be reset", () => {
  torch.tidy(() => {
    const x = torch.tensor([1, 2], { dtype: "float64", requiresGrad: true });
    assert.equal(x.grad, null);
    const y = x.mul(3).sum();
    y.backward(undefined, { retainGraph: true });
    assert.deepEqual(x.grad!.tolist(), [3, 3]);
    y.backward();
    assert.deepEqual(x.grad!.tolist(), [6, 6]);
    x.pow(2).sum().backward();
    assert.deepEqual(x.grad!.tolist(), [8, 10]);
    x.grad!.zero_();
    x.mul(x).sum().backward();
    assert.deepEqual(x.grad!.tolist(), [2, 4]);
    x.grad = null;
    assert.equal(x.grad, null);
  });
});

test("grad() leaves .grad alone and returns one gradient per input", () => {
  torch.tidy(() => {
    const a = torch.tensor([1, 2], { dtype: "float64", requiresGrad: true });
    const b = torch.tensor([3, 4], { dtype: "float64", requiresGrad: true });
    const c = torch.tensor([5], { dtype: "float64", requiresGrad: true });
    const [ga, gb] = torch.grad(a.mul(b).sum(), [a, b]);
    assert.deepEqual(ga!.tolist(), [3, 4]);
    assert.deepEqual(gb!.tolist(), [1, 2]);
    assert.equal(a.grad, null);
    const [gv] = torch.grad(a.mul(2), a, { gradOutputs: [torch.tensor([1, -1], { dtype: "float64" })] });
    assert.deepEqual(gv!.tolist(), [2, -2]);
    assert.throws(() => torch.grad(a.sum(), [a, c]));
    const [, gc] = torch.grad(a.sum(), [a, c], { allowUnused: true });
    assert.equal(gc, null);
  });
});

test("createGraph gives second derivatives: d2/dx2 x^3 = 6x", () => {
  torch.tidy(() => {
    const x = torch.tensor([-1.5, 0.5, 2], { dtype: "float64", requiresGrad: true });
    const y = x.pow(3).sum();
    const [g] = torch.grad(y, x, { createGraph: true });
    assert.ok(g!.requiresGrad, "the first derivative must carry a graph");
    assertClose(g!, torch.tensor([6.75, 0.75, 12], { dtype: "float64" }), { label: "3x^2" });
    const [g2] = torch.grad(g!.sum(), x);
    assertClose(g2!, torch.tensor([-9, 3, 12], { dtype: "float64" }), { label: "6x" });
    // The same through backward(createGraph): x.grad carries a graph.
    const z = torch.tensor([2], { dtype: "float64", requiresGrad: true });
    z.pow(3).sum().backward(undefined, { createGraph: true });
    const gz = z.grad!;
    assert.ok(gz.requiresGrad);
    const [h] = torch.grad(gz.sum(), z);
    assert.deepEqual(h!.tolist(), [12]);
  });
});

test("second derivatives of softmax cross-entropy match finite differences of the gradient", () => {
  torch.tidy(() => {
    const t = torch.tensor([2, 0], { dtype: "int64" });
    finiteDifferenceCheck(
      // Under the finite differences (run without grad) x is a plain tensor: make it a leaf.
      (x) =>
        torch.enableGrad(() => {
          const leaf = x.requiresGrad ? x : x.detach().requiresGrad_();
          const [g] = torch.grad(torch.crossEntropy(leaf, t), leaf, { createGraph: true });
          return g!;
        }),
      [make(N(2, 3), 5)],
    );
  });
});

test("noGrad: results do not require grad; the mode is restored, also after a throw", () => {
  torch.tidy(() => {
    const x = torch.ones([2], { dtype: "float64", requiresGrad: true });
    assert.ok(x.requiresGrad);
    assert.ok(x.mul(2).requiresGrad);
    assert.ok(torch.isGradEnabled());
    const y = torch.noGrad(() => {
      assert.equal(torch.isGradEnabled(), false);
      const inner = torch.enableGrad(() => x.mul(2));
      assert.ok(inner.requiresGrad, "enableGrad inside noGrad records again");
      return x.mul(2).add(1);
    });
    assert.equal(y.requiresGrad, false);
    assert.ok(torch.isGradEnabled());
    assert.throws(() =>
      torch.noGrad(() => {
        throw new Error("boom");
      }),
    );
    assert.ok(torch.isGradEnabled(), "grad mode not restored after a throw");
    assert.ok(x.mul(2).requiresGrad);
  });
});

test("detach: no grad, no history, same storage", () => {
  torch.tidy(() => {
    const x = torch.tensor([1, 2, 3], { dtype: "float64", requiresGrad: true });
    const d = x.mul(2).detach();
    assert.equal(d.requiresGrad, false);
    assert.ok(d.isLeaf);
    const y = x.detach();
    y.fill_(7); // shares x's storage
    assert.deepEqual(x.tolist(), [7, 7, 7]);
    const z = x.mul(x.detach());
    z.sum().backward();
    assert.deepEqual(x.grad!.tolist(), [7, 7, 7]);
    const w = x.mul(3);
    assert.equal(w.isLeaf, false);
    w.detach_();
    assert.equal(w.requiresGrad, false);
  });
});

test("requiresGrad_ and leaves", () => {
  torch.tidy(() => {
    const x = torch.zeros([2], { dtype: "float64" });
    assert.equal(x.requiresGrad, false);
    assert.equal(x.requiresGrad_(), x);
    assert.ok(x.requiresGrad);
    assert.ok(x.isLeaf);
    x.requiresGrad_(false);
    assert.equal(x.requiresGrad, false);
    assert.throws(() => x.sum().backward(), /does not require grad|grad_fn/);
  });
});
