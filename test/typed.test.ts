// The typed calls (native/src/fast.cc) give what the generic boxed call gives: same values,
// dtypes and shapes (type promotion included), the same in-place effect, and errors that name
// the operator and its arguments.
import assert from "node:assert/strict";
import { test } from "node:test";
import * as torch from "../torch/index.js";

type T = torch.Tensor;
const same = (a: T, b: T, what: string) => {
  assert.equal(a.dtype, b.dtype, `${what}: dtype`);
  assert.deepEqual(a.shape, b.shape, `${what}: shape`);
  assert.deepEqual(a.tolist(), b.tolist(), `${what}: values`);
};

test("typed operators equal the boxed call, dtypes and promotion included", () => {
  torch.tidy(() => {
    torch.manualSeed(0);
    const f = torch.randn([3, 4]);
    const g = torch.randn([3, 4]).abs().add(0.5);
    const i = torch.randint(1, 9, [3, 4]);
    const m = torch.randn([4, 2]);
    const bm = torch.randn([2, 3, 4]);
    const bm2 = torch.randn([2, 4, 5]);
    for (const [name, x] of [
      ["float", f],
      ["int", i],
    ] as const) {
      same(x.add(g, 2), torch.call("add.Tensor", x, g, 2), `${name} add alpha`);
      same(x.sub(g), torch.call("sub.Tensor", x, g, 1), `${name} sub`);
      same(x.add(3), torch.call("add.Scalar", x, 3, 1), `${name} add int scalar`);
      same(x.add(2.5, 2), torch.call("add.Scalar", x, 2.5, 2), `${name} add float scalar, alpha`);
      same(x.mul(2), torch.call("mul.Scalar", x, 2), `${name} mul int scalar stays ${x.dtype}`);
      same(x.mul(0.5), torch.call("mul.Scalar", x, 0.5), `${name} mul float scalar promotes`);
      same(x.mul(g), torch.call("mul.Tensor", x, g), `${name} mul`);
      same(x.div(g), torch.call("div.Tensor", x, g), `${name} div`);
      same(x.gt(0), torch.call("gt.Scalar", x, 0), `${name} gt`);
      same(x.eq(x), torch.call("eq.Tensor", x, x), `${name} eq`);
      same(x.sum(), torch.call("sum", x), `${name} sum`);
      same(x.abs(), torch.call("abs", x), `${name} abs`);
    }
    assert.equal(i.mul(2).dtype, "int64");
    assert.equal(i.mul(0.5).dtype, "float32");
    same(f.mean(), torch.call("mean", f), "mean");
    same(f.relu(), torch.call("relu", f), "relu");
    same(f.exp(), torch.call("exp", f), "exp");
    same(f.sigmoid(), torch.call("sigmoid", f), "sigmoid");
    same(f.t(), torch.call("t", f), "t");
    same(f.matmul(m), torch.call("matmul", f, m), "matmul");
    same(f.mm(m), torch.call("mm", f, m), "mm");
    same(bm.bmm(bm2), torch.call("bmm", bm, bm2), "bmm");
    same(f.add(true), torch.call("add.Scalar", f, true, 1), "bool scalar");
  });
});

test("typed in-place operators change self as the boxed ones do, and keep autograd's rules", () => {
  torch.tidy(() => {
    torch.manualSeed(1);
    const base = torch.randn([5]);
    const other = torch.randn([5]);
    const pairs: [string, (x: T) => void, (x: T) => void][] = [
      ["add_", (x) => x.add_(other, 3), (x) => torch.call("add_.Tensor", x, other, 3)],
      ["sub_", (x) => x.sub_(other), (x) => torch.call("sub_.Tensor", x, other, 1)],
      ["mul_", (x) => x.mul_(other), (x) => torch.call("mul_.Tensor", x, other)],
      ["mul_ scalar", (x) => x.mul_(0.5), (x) => torch.call("mul_.Scalar", x, 0.5)],
      ["div_", (x) => x.div_(other), (x) => torch.call("div_.Tensor", x, other)],
      ["div_ scalar", (x) => x.div_(4), (x) => torch.call("div_.Scalar", x, 4)],
    ];
    for (const [name, typed, boxed] of pairs) {
      const a = base.clone();
      const b = base.clone();
      typed(a);
      boxed(b);
      same(a, b, name);
    }
    // A leaf that requires grad cannot be changed in place outside noGrad: libtorch's error, named.
    const leaf = torch.randn([5]).requiresGrad_(true);
    assert.throws(() => leaf.add_(other), /aten::add_\.Tensor\(self=\[5\] Float, other=\[5\] Float.*leaf Variable/s);
    torch.noGrad(() => leaf.add_(other));
  });
});

test("a typed call's error names the operator and its argument shapes; the process goes on", () => {
  const a = torch.ones([2, 3]);
  assert.throws(() => a.add(torch.ones([4])), /aten::add\.Tensor\(self=\[2, 3\] Float, other=\[4\] Float.*must match/s);
  assert.throws(() => a.matmul(torch.ones([4, 5])), /aten::matmul\(self=\[2, 3\] Float, other=\[4, 5\] Float/);
  assert.throws(() => a.mul("x" as never), /aten::mul\.Scalar argument 'other'.*a number or boolean/);
  const gone = torch.ones([2]);
  gone.dispose();
  assert.throws(() => gone.relu(), /disposed/);
  assert.deepEqual(a.add(1).tolist(), [
    [2, 2, 2],
    [2, 2, 2],
  ]);
});
