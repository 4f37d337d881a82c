// Every operator's forward result against Python's PyTorch on the same inputs.
//
// A table of cases: each names its inputs (shape, dtype and how they are drawn, seeded per case
// and input), computes a result with our API, and gives the Python expression that computes the
// same with torch. The inputs of all cases go to Python in one safetensors file, one Python
// process evaluates every expression (see helpers/torch_reference.py), and its results come back
// in another safetensors file. Then one test per case compares shape, dtype and values: floats
// within a tolerance, integers and booleans exactly.
import assert from "node:assert/strict";
import { test } from "node:test";
import type { TypedArray } from "../torch/dtype.js";
import * as torch from "../torch/index.js";
import { type ReferenceResults, runReference, skipUnlessPytorch } from "./helpers/pytorch.js";
import {
  assertClose,
  awayFromZero,
  bools,
  generate,
  hashSeed,
  type InputSpec,
  ints,
  normal,
  positive,
  type Tolerance,
  tensorOf,
  uniform,
  values,
} from "./helpers/tensors.js";

type T = torch.Tensor;
type Result = T | number | boolean | Result[];
type Inputs = Record<string, T>;

interface OpCase {
  name: string;
  inputs: Record<string, InputSpec>;
  ours: (x: Inputs) => Result;
  /** The same computation in Python: the inputs by name, torch, F (torch.nn.functional), math. */
  py: string;
  tol?: Tolerance;
}

const cases: OpCase[] = [];
function op(name: string, inputs: Record<string, InputSpec>, ours: (x: Inputs) => Result, py: string, tol?: Tolerance) {
  if (name.includes("#")) throw new Error(`case names must not contain '#': ${name}`);
  if (cases.some((c) => c.name === name)) throw new Error(`duplicate case ${name}`);
  cases.push({ name, inputs, ours, py, tol });
}
const none = {};

// ---------------------------------------------------------------- creation
op(
  "tensor from Float32Array",
  none,
  () => torch.tensor(new Float32Array([1.5, -2, 3.25, 0.1, 1e-8, 65504]), { shape: [2, 3] }),
  "torch.tensor([[1.5, -2, 3.25], [0.1, 1e-8, 65504]], dtype=torch.float32)",
  { rtol: 0, atol: 0 },
);
op(
  "tensor from Float64Array",
  none,
  () => torch.tensor(new Float64Array([0.1, -1e300, Math.PI, 5e-324])),
  "torch.tensor([0.1, -1e300, math.pi, 5e-324], dtype=torch.float64)",
  { rtol: 0, atol: 0 },
);
op(
  "tensor from BigInt64Array",
  none,
  () => torch.tensor(new BigInt64Array([1n, -2n, 2n ** 62n + 1n, -(2n ** 63n)]), { shape: [2, 2] }),
  "torch.tensor([[1, -2], [2**62 + 1, -2**63]])",
);
op(
  "tensor from Int32Array",
  none,
  () => torch.tensor(new Int32Array([7, -8, 2147483647, -2147483648]), { shape: [2, 2] }),
  "torch.tensor([[7, -8], [2147483647, -2147483648]], dtype=torch.int32)",
);
op(
  "tensor from Uint8Array",
  none,
  () => torch.tensor(new Uint8Array([0, 1, 128, 255])),
  "torch.tensor([0, 1, 128, 255], dtype=torch.uint8)",
);
op(
  "tensor bool from Uint8Array",
  none,
  () => torch.tensor(new Uint8Array([1, 0, 0, 1]), { dtype: "bool" }),
  "torch.tensor([True, False, False, True])",
);
op(
  "tensor typed array converted to float64",
  none,
  () => torch.tensor(new Int32Array([1, -2, 3]), { dtype: "float64" }),
  "torch.tensor([1, -2, 3], dtype=torch.float64)",
);
op(
  "tensor nested numbers",
  none,
  () =>
    torch.tensor([
      [1, 2.5],
      [-3, 4],
    ]),
  "torch.tensor([[1, 2.5], [-3, 4]], dtype=torch.float32)",
);
op(
  "tensor nested with dtype int64",
  none,
  () => torch.tensor([[1, 2, -3]], { dtype: "int64" }),
  "torch.tensor([[1, 2, -3]])",
);
op(
  "tensor nested booleans",
  none,
  () =>
    torch.tensor([
      [true, false],
      [false, true],
    ]),
  "torch.tensor([[True, False], [False, True]])",
);
op("tensor scalar", none, () => torch.tensor(3.5), "torch.tensor(3.5)");
op("zeros", none, () => torch.zeros([2, 3]), "torch.zeros(2, 3)");
op("zeros int64", none, () => torch.zeros([4], { dtype: "int64" }), "torch.zeros(4, dtype=torch.int64)");
op("ones", none, () => torch.ones([3, 1]), "torch.ones(3, 1)");
op("ones bool", none, () => torch.ones([2], { dtype: "bool" }), "torch.ones(2, dtype=torch.bool)");
op("full", none, () => torch.full([2, 2], 7.5), "torch.full((2, 2), 7.5)");
op("full int32", none, () => torch.full([3], -4, { dtype: "int32" }), "torch.full((3,), -4, dtype=torch.int32)");
op(
  "full float64",
  none,
  () => torch.full([2], 0.1, { dtype: "float64" }),
  "torch.full((2,), 0.1, dtype=torch.float64)",
);
op("arange end", none, () => torch.arange(5), "torch.arange(5)");
op("arange start end step", none, () => torch.arange(2, 11, 3), "torch.arange(2, 11, 3)");
op("arange negative step", none, () => torch.arange(5, -3, -2), "torch.arange(5, -3, -2)");
op("arange float step", none, () => torch.arange(1, 2, 0.25), "torch.arange(1, 2, 0.25)");
op(
  "arange float64",
  none,
  () => torch.arange(0, 1, 0.1, { dtype: "float64" }),
  "torch.arange(0, 1, 0.1, dtype=torch.float64)",
);
op(
  "arange int with float dtype",
  none,
  () => torch.arange(-3, 3, 1, { dtype: "float32" }),
  "torch.arange(-3, 3, dtype=torch.float32)",
);
op("eye", none, () => torch.eye(3), "torch.eye(3)");
op("eye int64", none, () => torch.eye(2, { dtype: "int64" }), "torch.eye(2, dtype=torch.int64)");
op("zerosLike", { x: ints([2, 3], 1, 5) }, ({ x }) => torch.zerosLike(x), "torch.zeros_like(x)");
op(
  "onesLike with dtype",
  { x: normal([2, 3]) },
  ({ x }) => torch.onesLike(x, { dtype: "float64" }),
  "torch.ones_like(x, dtype=torch.float64)",
);

// ---------------------------------------------------------------- seeded random numbers
// The same seed on the same libtorch build gives the same numbers in Python and here.
const seeded = (seed: number, fn: () => Result) => () => {
  torch.manualSeed(seed);
  return fn();
};
op(
  "rand seeded",
  none,
  seeded(1234, () => torch.rand([3, 5])),
  "(torch.manual_seed(1234), torch.rand(3, 5))[1]",
  {
    rtol: 0,
    atol: 0,
  },
);
op(
  "rand seeded twice",
  none,
  seeded(5, () => [torch.rand([4]), torch.rand([2, 2], { dtype: "float64" })]),
  "(torch.manual_seed(5), torch.rand(4), torch.rand(2, 2, dtype=torch.float64))[1:]",
  { rtol: 0, atol: 0 },
);
op(
  "randn seeded small",
  none,
  seeded(99, () => torch.randn([7])),
  "(torch.manual_seed(99), torch.randn(7))[1]",
  {
    rtol: 0,
    atol: 0,
  },
);
// 16 elements and more take libtorch's vectorised normal path.
op(
  "randn seeded large",
  none,
  seeded(7, () => torch.randn([4, 9])),
  "(torch.manual_seed(7), torch.randn(4, 9))[1]",
  {
    rtol: 0,
    atol: 0,
  },
);
op(
  "randn seeded float64",
  none,
  seeded(11, () => torch.randn([20], { dtype: "float64" })),
  "(torch.manual_seed(11), torch.randn(20, dtype=torch.float64))[1]",
  { rtol: 0, atol: 0 },
);
op(
  "randint seeded",
  none,
  seeded(3, () => torch.randint(-5, 10, [2, 6])),
  "(torch.manual_seed(3), torch.randint(-5, 10, (2, 6)))[1]",
);
op(
  "randLike randnLike seeded",
  { x: normal([3, 2], "float64") },
  ({ x }) => seeded(21, () => [torch.randLike(x), torch.randnLike(x)])(),
  "(torch.manual_seed(21), torch.rand_like(x), torch.randn_like(x))[1:]",
  { rtol: 0, atol: 0 },
);
op(
  "uniform_ normal_ seeded",
  none,
  seeded(8, () => [torch.empty([5]).uniform_(-2, 3), torch.empty([5]).normal_(1, 0.5)]),
  "(torch.manual_seed(8), torch.empty(5).uniform_(-2, 3), torch.empty(5).normal_(1, 0.5))[1:]",
  { rtol: 0, atol: 0 },
);
op(
  "dropout seeded",
  { x: positive([4, 25]) },
  ({ x }) => seeded(3, () => torch.dropout(x, 0.5))(),
  "(torch.manual_seed(3), F.dropout(x, 0.5))[1]",
);

// ---------------------------------------------------------------- dtype conversion
op("float16", { x: normal([2, 5], "float32", 100) }, ({ x }) => x.to("float16"), "x.half()", { rtol: 0, atol: 0 });
op(
  "float16 round trip",
  { x: normal([2, 5], "float32", 100) },
  ({ x }) => x.to("float16").to("float32"),
  "x.half().float()",
  { rtol: 0, atol: 0 },
);
op("bfloat16", { x: normal([2, 5], "float32", 100) }, ({ x }) => x.to("bfloat16"), "x.bfloat16()", {
  rtol: 0,
  atol: 0,
});
op(
  "bfloat16 round trip",
  { x: normal([2, 5], "float32", 100) },
  ({ x }) => x.to("bfloat16").float(),
  "x.bfloat16().float()",
  { rtol: 0, atol: 0 },
);
op("float to int64", { x: normal([8], "float32", 5) }, ({ x }) => x.long(), "x.long()");
op("float to int32", { x: normal([8], "float32", 5) }, ({ x }) => x.to("int32"), "x.to(torch.int32)");
op("float to bool", { x: values([0, 1.5, -2, 0, 1e-30]) }, ({ x }) => x.to("bool"), "x.bool()");
op("int to float", { x: ints([6], -100, 100) }, ({ x }) => x.float(), "x.float()");
op("bool to float64", { x: bools([6]) }, ({ x }) => x.double(), "x.double()");
op("float64 to float32", { x: normal([6], "float64") }, ({ x }) => x.float(), "x.float()", { rtol: 0, atol: 0 });
op("clone", { x: normal([2, 3]) }, ({ x }) => x.clone(), "x.clone()");

// ---------------------------------------------------------------- shape
const X234 = { x: normal([2, 3, 4]) };
op("reshape", X234, ({ x }) => x.reshape(4, -1), "x.reshape(4, -1)");
op("reshape array", X234, ({ x }) => x.reshape([3, 8]), "x.reshape(3, 8)");
op("view", X234, ({ x }) => x.view(6, 4), "x.view(6, 4)");
op("permute", X234, ({ x }) => x.permute(2, 0, 1), "x.permute(2, 0, 1)");
op("transpose", X234, ({ x }) => x.transpose(0, 2), "x.transpose(0, 2)");
op("transpose negative dims", X234, ({ x }) => x.transpose(-1, -2), "x.transpose(-1, -2)");
op("t", { x: normal([2, 3]) }, ({ x }) => x.t(), "x.t()");
op("mT", X234, ({ x }) => x.mT, "x.mT");
op("flatten", X234, ({ x }) => x.flatten(), "x.flatten()");
op("flatten from 1", X234, ({ x }) => x.flatten(1), "x.flatten(1)");
op("flatten 0 to 1", X234, ({ x }) => x.flatten(0, 1), "x.flatten(0, 1)");
op("squeeze", { x: normal([2, 1, 3, 1]) }, ({ x }) => x.squeeze(), "x.squeeze()");
op("squeeze dim", { x: normal([2, 1, 3, 1]) }, ({ x }) => x.squeeze(1), "x.squeeze(1)");
op("squeeze negative dim", { x: normal([2, 1, 3, 1]) }, ({ x }) => x.squeeze(-1), "x.squeeze(-1)");
op("squeeze non-unit dim", { x: normal([2, 1, 3, 1]) }, ({ x }) => x.squeeze(0), "x.squeeze(0)");
op("unsqueeze", X234, ({ x }) => x.unsqueeze(0), "x.unsqueeze(0)");
op("unsqueeze negative", X234, ({ x }) => x.unsqueeze(-1), "x.unsqueeze(-1)");
op("expand", { x: normal([3, 1]) }, ({ x }) => x.expand(2, 3, 4), "x.expand(2, 3, 4)");
op("expand -1", { x: normal([3, 1]) }, ({ x }) => x.expand([-1, 5]), "x.expand(-1, 5)");
op("expandAs", { x: normal([1, 3]), y: normal([4, 3]) }, ({ x, y }) => x.expandAs(y), "x.expand_as(y)");
op("repeat", { x: normal([2, 3]) }, ({ x }) => x.repeat(2, 1, 3), "x.repeat(2, 1, 3)");
op(
  "contiguous",
  X234,
  ({ x }) => {
    const t = x.transpose(0, 2);
    const c = t.contiguous();
    return [c, c.isContiguous(), t.isContiguous()];
  },
  "(x.transpose(0, 2).contiguous(), x.transpose(0, 2).contiguous().is_contiguous(), x.transpose(0, 2).is_contiguous())",
);
op(
  "cat dim 0",
  { a: normal([2, 3]), b: normal([1, 3]), c: normal([3, 3]) },
  ({ a, b, c }) => torch.cat([a, b, c]),
  "torch.cat([a, b, c])",
);
op("cat dim 1", { a: normal([2, 3]), b: normal([2, 1]) }, ({ a, b }) => torch.cat([a, b], 1), "torch.cat([a, b], 1)");
op(
  "cat negative dim",
  { a: normal([2, 2, 3]), b: normal([2, 2, 2]) },
  ({ a, b }) => torch.cat([a, b], -1),
  "torch.cat([a, b], -1)",
);
op("stack", { a: normal([2, 3]), b: normal([2, 3]) }, ({ a, b }) => torch.stack([a, b]), "torch.stack([a, b])");
op(
  "stack dim 1",
  { a: normal([2, 3]), b: normal([2, 3]), c: normal([2, 3]) },
  ({ a, b, c }) => torch.stack([a, b, c], 1),
  "torch.stack([a, b, c], 1)",
);
op(
  "stack dim -1",
  { a: normal([2, 3]), b: normal([2, 3]) },
  ({ a, b }) => torch.stack([a, b], -1),
  "torch.stack([a, b], -1)",
);
const X56 = { x: normal([5, 6]) };
op("narrow", X56, ({ x }) => x.narrow(1, 1, 3), "x.narrow(1, 1, 3)");
op("slice from", X56, ({ x }) => x.slice(1, 2), "x[:, 2:]");
op("slice step", X56, ({ x }) => x.slice(0, 0, 5, 2), "x[0:5:2]");
op("slice negative start", X56, ({ x }) => x.slice(1, -2), "x[:, -2:]");
op("slice end", X56, ({ x }) => x.slice(1, undefined, 4), "x[:, :4]");
op("select", X56, ({ x }) => x.select(1, 2), "x.select(1, 2)");
op("select negative", X56, ({ x }) => x.select(0, -1), "x[-1]");
op("indexSelect", { x: normal([3, 4]), i: ints([5], 0, 4) }, ({ x, i }) => x.indexSelect(1, i), "x.index_select(1, i)");
op(
  "indexSelect dim 0",
  { x: normal([3, 4]), i: ints([2], 0, 3) },
  ({ x, i }) => x.indexSelect(0, i),
  "x.index_select(0, i)",
);
op("gather", { x: normal([3, 4]), i: ints([3, 5], 0, 4) }, ({ x, i }) => x.gather(1, i), "x.gather(1, i)");
op("gather dim 0", { x: normal([3, 4]), i: ints([2, 4], 0, 3) }, ({ x, i }) => x.gather(0, i), "x.gather(0, i)");
op("pad constant", X234, ({ x }) => x.pad([1, 2]), "F.pad(x, [1, 2])");
op("pad constant value", X234, ({ x }) => x.pad([1, 1, 2, 0], "constant", 0.5), "F.pad(x, [1, 1, 2, 0], value=0.5)");
op("pad negative crops", X234, ({ x }) => x.pad([-1, 1]), "F.pad(x, [-1, 1])");
op("pad reflect", { x: normal([1, 2, 5]) }, ({ x }) => x.pad([2, 1], "reflect"), "F.pad(x, [2, 1], mode='reflect')");
op(
  "pad replicate",
  { x: normal([1, 2, 3, 3]) },
  ({ x }) => x.pad([1, 2, 0, 1], "replicate"),
  "F.pad(x, [1, 2, 0, 1], mode='replicate')",
);
op(
  "pad circular",
  { x: normal([1, 2, 3, 3]) },
  ({ x }) => x.pad([1, 1, 1, 0], "circular"),
  "F.pad(x, [1, 1, 1, 0], mode='circular')",
);
const X45 = normal([4, 5]);
op("index rows", { x: X45, i: ints([3], 0, 4) }, ({ x, i }) => x.index([i]), "x[i]");
op("index columns", { x: X45, j: ints([3], 0, 5) }, ({ x, j }) => x.index([null, j]), "x[:, j]");
op("index pairs", { x: X45, i: ints([3], 0, 4), j: ints([3], 0, 5) }, ({ x, i, j }) => x.index([i, j]), "x[i, j]");
op("index 2-d index", { x: X45, i: ints([2, 2], 0, 4) }, ({ x, i }) => x.index([i]), "x[i]");
op("index bool mask", { x: X45, m: bools([4, 5]) }, ({ x, m }) => x.index([m]), "x[m]");
op("index row mask", { x: X45, m: bools([4]) }, ({ x, m }) => x.index([m]), "x[m]");
op("chunk", X56, ({ x }) => x.chunk(3), "x.chunk(3)");
op("chunk uneven dim 1", X56, ({ x }) => x.chunk(4, 1), "x.chunk(4, 1)");
op("split", X56, ({ x }) => x.split(2), "x.split(2)");
op("split dim 1", X56, ({ x }) => x.split(4, 1), "x.split(4, 1)");
op("split sizes", X56, ({ x }) => x.split([1, 4]), "x.split([1, 4])");
op("unbind", { x: normal([2, 3]) }, ({ x }) => x.unbind(1), "x.unbind(1)");
op("maskedFill", { x: X45, m: bools([4, 5]) }, ({ x, m }) => x.maskedFill(m, -1.5), "x.masked_fill(m, -1.5)");

// ---------------------------------------------------------------- elementwise arithmetic
const XY = { x: normal([2, 3]), y: normal([2, 3]) };
const XYB = { x: normal([2, 3]), y: normal([3]) };
op("add", XY, ({ x, y }) => x.add(y), "x + y");
op("add broadcast", XYB, ({ x, y }) => x.add(y), "x + y");
op("add broadcast both", { x: normal([2, 1, 3]), y: normal([4, 1]) }, ({ x, y }) => x.add(y), "x + y");
op("add scalar", XY, ({ x }) => x.add(2.5), "x + 2.5");
op("add int scalar", XY, ({ x }) => x.add(3), "x + 3");
op("add alpha", XY, ({ x, y }) => x.add(y, 0.5), "torch.add(x, y, alpha=0.5)");
op("add int64", { a: ints([4], -9, 9), b: ints([4], -9, 9) }, ({ a, b }) => a.add(b), "a + b");
op("add int64 float scalar", { a: ints([4], -9, 9) }, ({ a }) => a.add(2.5), "a + 2.5");
op("add int64 float tensor", { a: ints([4], -9, 9), y: normal([4]) }, ({ a, y }) => a.add(y), "a + y");
op("add float32 float64", { x: normal([3]), y: normal([3], "float64") }, ({ x, y }) => x.add(y), "x + y");
op("sub", XY, ({ x, y }) => x.sub(y), "x - y");
op("sub broadcast", XYB, ({ x, y }) => x.sub(y), "x - y");
op("sub scalar", XY, ({ x }) => x.sub(1.25), "x - 1.25");
op("sub alpha", XY, ({ x, y }) => x.sub(y, 2), "torch.sub(x, y, alpha=2)");
op("mul", XY, ({ x, y }) => x.mul(y), "x * y");
op("mul broadcast", XYB, ({ x, y }) => x.mul(y), "x * y");
op("mul scalar", XY, ({ x }) => x.mul(-3), "x * -3");
op("mul bool float", { m: bools([2, 3]), y: normal([2, 3]) }, ({ m, y }) => m.mul(y), "m * y");
op("div", { x: normal([2, 3]), y: awayFromZero([2, 3], "float32", 0.3) }, ({ x, y }) => x.div(y), "x / y");
op("div broadcast", { x: normal([2, 3]), y: positive([3]) }, ({ x, y }) => x.div(y), "x / y");
op("div scalar", XY, ({ x }) => x.div(4), "x / 4");
op("div int64 true division", { a: ints([5], -9, 9), b: ints([5], 1, 4) }, ({ a, b }) => a.div(b), "torch.div(a, b)");
op("pow 2", XY, ({ x }) => x.pow(2), "x.pow(2)");
op("pow 0.5", { x: positive([2, 3]) }, ({ x }) => x.pow(0.5), "x.pow(0.5)");
op("pow -1.5", { x: positive([2, 3]) }, ({ x }) => x.pow(-1.5), "x.pow(-1.5)");
op("pow tensor", { x: positive([2, 3]), y: normal([2, 3]) }, ({ x, y }) => x.pow(y), "x.pow(y)");
op("pow int64", { a: ints([5], -4, 4) }, ({ a }) => a.pow(3), "a.pow(3)");
op("neg", XY, ({ x }) => x.neg(), "-x");
op("abs", XY, ({ x }) => x.abs(), "x.abs()");
op("exp", XY, ({ x }) => x.exp(), "x.exp()");
op("log", { x: uniform([2, 3], 0.01, 10) }, ({ x }) => x.log(), "x.log()");
op("log of non-positive", { x: values([0, -1, 1]) }, ({ x }) => x.log(), "x.log()");
op("sqrt", { x: uniform([2, 3], 0, 10) }, ({ x }) => x.sqrt(), "x.sqrt()");
op("rsqrt", { x: uniform([2, 3], 0.01, 10) }, ({ x }) => x.rsqrt(), "x.rsqrt()");
op("square", XY, ({ x }) => x.square(), "x.square()");
op("reciprocal", { x: awayFromZero([2, 3], "float32", 0.3) }, ({ x }) => x.reciprocal(), "x.reciprocal()");
op("sin", { x: normal([2, 3], "float32", 3) }, ({ x }) => x.sin(), "x.sin()");
op("cos", { x: normal([2, 3], "float32", 3) }, ({ x }) => x.cos(), "x.cos()");
op("tanh", { x: normal([2, 3], "float32", 3) }, ({ x }) => x.tanh(), "x.tanh()");
op("sigmoid", { x: normal([2, 3], "float32", 5) }, ({ x }) => x.sigmoid(), "x.sigmoid()");
op("sign", { x: values([-2, 0, 3.5, -0.1, 0, 1e-20]) }, ({ x }) => x.sign(), "x.sign()");
op("floor", { x: normal([8], "float32", 3) }, ({ x }) => x.floor(), "x.floor()");
op("ceil", { x: normal([8], "float32", 3) }, ({ x }) => x.ceil(), "x.ceil()");
op("round", { x: values([0.5, 1.5, 2.5, -0.5, -1.5, 1.49, -2.51, 3]) }, ({ x }) => x.round(), "x.round()");
op("relu method", XY, ({ x }) => x.relu(), "x.relu()");
op("float64 exp log", { x: positive([4], "float64") }, ({ x }) => [x.exp(), x.log()], "(x.exp(), x.log())");

// ---------------------------------------------------------------- comparisons and logic
// Integer-valued floats in a small range, so that ties (equal elements) occur.
const CMP = { x: ints([3, 4], 0, 3, "float32"), y: ints([3, 4], 0, 3, "float32") };
for (const [name, pyop] of [
  ["eq", "=="],
  ["ne", "!="],
  ["lt", "<"],
  ["le", "<="],
  ["gt", ">"],
  ["ge", ">="],
] as const) {
  op(name, CMP, ({ x, y }) => x[name](y), `x ${pyop} y`);
  op(`${name} scalar`, CMP, ({ x }) => x[name](1), `x ${pyop} 1`);
}
op("lt broadcast", { x: ints([3, 4], 0, 3, "float32"), y: ints([4], 0, 3, "float32") }, ({ x, y }) => x.lt(y), "x < y");
op("eq int64", { a: ints([6], 0, 3), b: ints([6], 0, 3) }, ({ a, b }) => a.eq(b), "a == b");
const AB = { a: bools([2, 5]), b: bools([2, 5]) };
op("logicalAnd", AB, ({ a, b }) => a.logicalAnd(b), "torch.logical_and(a, b)");
op("logicalOr", AB, ({ a, b }) => a.logicalOr(b), "torch.logical_or(a, b)");
op("logicalNot", AB, ({ a }) => a.logicalNot(), "torch.logical_not(a)");
op("logicalAnd floats", CMP, ({ x, y }) => x.logicalAnd(y), "torch.logical_and(x, y)");
op("maximum", XY, ({ x, y }) => x.maximum(y), "torch.maximum(x, y)");
op("minimum", XY, ({ x, y }) => x.minimum(y), "torch.minimum(x, y)");
op("maximum broadcast", XYB, ({ x, y }) => x.maximum(y), "torch.maximum(x, y)");
op("minimum broadcast", XYB, ({ x, y }) => x.minimum(y), "torch.minimum(x, y)");
op(
  "all any",
  AB,
  ({ a }) => [a.all(), a.any(), a.logicalOr(a.logicalNot()).all()],
  "(a.all(), a.any(), (a | ~a).all())",
);

const WH = { c: bools([2, 3]), x: normal([2, 3]), y: normal([2, 3]) };
op("where", WH, ({ c, x, y }) => torch.where(c, x, y), "torch.where(c, x, y)");
op(
  "where broadcast",
  { c: bools([2, 1]), x: normal([3]), y: normal([2, 3]) },
  ({ c, x, y }) => torch.where(c, x, y),
  "torch.where(c, x, y)",
);
op("where scalar other", WH, ({ c, x }) => torch.where(c, x, 0.5), "torch.where(c, x, 0.5)");
op("where scalar self", WH, ({ c, y }) => torch.where(c, -1, y), "torch.where(c, -1, y)");
op("where scalars", WH, ({ c }) => torch.where(c, 1.5, -2.5), "torch.where(c, 1.5, -2.5)");

const CL = { x: normal([3, 4]), lo: uniform([3, 4], -1, 0), hi: uniform([4], 0, 1) };
op("clamp", CL, ({ x }) => x.clamp(-0.5, 0.5), "x.clamp(-0.5, 0.5)");
op("clamp min", CL, ({ x }) => x.clamp(0), "x.clamp(min=0)");
op("clamp max", CL, ({ x }) => x.clamp(null, 0.3), "x.clamp(max=0.3)");
op("clamp tensors", CL, ({ x, lo, hi }) => x.clamp(lo, hi), "x.clamp(lo, hi)");
op("clamp tensor min", CL, ({ x, lo }) => x.clamp(lo), "x.clamp(min=lo)");
op("clamp tensor max", CL, ({ x, hi }) => x.clamp(null, hi), "x.clamp(max=hi)");
op("clamp int64", { a: ints([8], -9, 9) }, ({ a }) => a.clamp(-2, 5), "a.clamp(-2, 5)");

// ---------------------------------------------------------------- reductions
const R = { x: normal([3, 4, 5]) };
op("sum", R, ({ x }) => x.sum(), "x.sum()");
op("sum dim", R, ({ x }) => x.sum(1), "x.sum(1)");
op("sum negative dim", R, ({ x }) => x.sum(-1), "x.sum(-1)");
op("sum dims keepdim", R, ({ x }) => x.sum([0, 2], true), "x.sum((0, 2), keepdim=True)");
op("sum int64", { a: ints([3, 4], -9, 9) }, ({ a }) => [a.sum(), a.sum(0)], "(a.sum(), a.sum(0))");
op("sum bool", { a: bools([3, 4]) }, ({ a }) => a.sum(), "a.sum()");
op("mean", R, ({ x }) => x.mean(), "x.mean()");
op("mean dim", R, ({ x }) => x.mean(1), "x.mean(1)");
op("mean dims keepdim", R, ({ x }) => x.mean([0, 2], true), "x.mean((0, 2), keepdim=True)");
op("prod", { x: uniform([6], 0.5, 1.5) }, ({ x }) => x.prod(), "x.prod()");
op("max", R, ({ x }) => x.max(), "x.max()");
op("max dim", R, ({ x }) => x.max(1), "x.max(1)");
op("max dim keepdim", R, ({ x }) => x.max(0, true), "x.max(0, keepdim=True)");
op("min", R, ({ x }) => x.min(), "x.min()");
op("min dim", R, ({ x }) => x.min(2), "x.min(2)");
op("min dim keepdim", R, ({ x }) => x.min(-1, true), "x.min(-1, keepdim=True)");
op("max int64", { a: ints([3, 4], -9, 9) }, ({ a }) => [a.max(), a.max(1)], "(a.max(), a.max(1))");
op("argmax", R, ({ x }) => x.argmax(), "x.argmax()");
op("argmax dim", R, ({ x }) => x.argmax(1), "x.argmax(1)");
op("argmax dim keepdim", R, ({ x }) => x.argmax(2, true), "x.argmax(2, keepdim=True)");
op("argmin", R, ({ x }) => x.argmin(), "x.argmin()");
op("argmin dim", R, ({ x }) => x.argmin(0), "x.argmin(0)");
op("argmax ties", CMP, ({ x }) => [x.argmax(1), x.argmin(0)], "(x.argmax(1), x.argmin(0))");
op("var", R, ({ x }) => x.var(), "x.var()");
op("var dim", R, ({ x }) => x.var(1), "x.var(1)");
op("var dims keepdim", R, ({ x }) => x.var([0, 1], { keepdim: true }), "x.var((0, 1), keepdim=True)");
op("var biased", R, ({ x }) => x.var(1, { unbiased: false }), "x.var(1, unbiased=False)");
op("std", R, ({ x }) => x.std(), "x.std()");
op("std dim", R, ({ x }) => x.std(0), "x.std(0)");
op(
  "std biased keepdim",
  R,
  ({ x }) => x.std(1, { unbiased: false, keepdim: true }),
  "x.std(1, unbiased=False, keepdim=True)",
);
op("norm", R, ({ x }) => x.norm(), "x.norm()");
op("norm p1", R, ({ x }) => x.norm(1), "x.norm(p=1)");
op("norm dim", R, ({ x }) => x.norm(2, 1), "x.norm(dim=1)");
op("norm p1 dims keepdim", R, ({ x }) => x.norm(1, [0, 2], true), "x.norm(p=1, dim=(0, 2), keepdim=True)");
op("norm inf", R, ({ x }) => x.norm(Number.POSITIVE_INFINITY, 1), "torch.linalg.vector_norm(x, ord=math.inf, dim=1)");
op("logsumexp", R, ({ x }) => x.logsumexp(1), "x.logsumexp(1)");
op("logsumexp dims keepdim", R, ({ x }) => x.logsumexp([0, 2], true), "x.logsumexp((0, 2), keepdim=True)");
op("logsumexp large", { x: normal([3, 4], "float32", 100) }, ({ x }) => x.logsumexp(1), "x.logsumexp(1)");

// ---------------------------------------------------------------- linear algebra
op("matmul", { a: normal([3, 4]), b: normal([4, 5]) }, ({ a, b }) => a.matmul(b), "a @ b");
op(
  "matmul batched broadcast",
  { a: normal([2, 1, 3, 4]), b: normal([3, 4, 2]) },
  ({ a, b }) => torch.matmul(a, b),
  "torch.matmul(a, b)",
);
op("matmul vector matrix", { a: normal([4]), b: normal([4, 5]) }, ({ a, b }) => a.matmul(b), "a @ b");
op("matmul matrix vector", { a: normal([3, 4]), b: normal([4]) }, ({ a, b }) => a.matmul(b), "a @ b");
op("matmul batch vector", { a: normal([2, 3, 4]), b: normal([4]) }, ({ a, b }) => a.matmul(b), "a @ b");
op("matmul dot", { a: normal([4]), b: normal([4]) }, ({ a, b }) => a.matmul(b), "a @ b");
op("mm", { a: normal([3, 4]), b: normal([4, 2]) }, ({ a, b }) => a.mm(b), "a.mm(b)");
op("bmm", { a: normal([2, 3, 4]), b: normal([2, 4, 5]) }, ({ a, b }) => torch.bmm(a, b), "torch.bmm(a, b)");
op("bmm method", { a: normal([2, 3, 4]), b: normal([2, 4, 5]) }, ({ a, b }) => a.bmm(b), "a.bmm(b)");
op(
  "matmul float64",
  { a: normal([3, 4], "float64"), b: normal([4, 2], "float64") },
  ({ a, b }) => a.matmul(b),
  "a @ b",
);
op("pinv", { a: normal([4, 3], "float64") }, ({ a }) => torch.pinv(a), "torch.linalg.pinv(a)");
op("pinv wide float32", { a: normal([2, 5]) }, ({ a }) => torch.pinv(a), "torch.linalg.pinv(a)", { atol: 1e-4 });
// Singular values 3, 1, 0.01: an rtol of 0.1 drops the smallest.
op(
  "pinv rtol",
  { a: values([3, 0, 0, 0, 1, 0, 0, 0, 0.01, 1, 1, 1], [4, 3], "float64") },
  ({ a }) => [torch.pinv(a, { rtol: 0.1 }), torch.pinv(a, { atol: 0.5 }), torch.pinv(a)],
  "(torch.linalg.pinv(a, rtol=0.1), torch.linalg.pinv(a, atol=0.5), torch.linalg.pinv(a))",
);
op(
  "lstsq",
  { a: normal([6, 3], "float64"), b: normal([6, 2], "float64") },
  ({ a, b }) => torch.lstsq(a, b),
  "torch.linalg.lstsq(a, b).solution",
);
op(
  "lstsq float32",
  { a: normal([5, 2]), b: normal([5, 3]) },
  ({ a, b }) => torch.lstsq(a, b),
  "torch.linalg.lstsq(a, b).solution",
  { atol: 1e-4 },
);
op(
  "lstsq gelsd batched",
  { a: normal([2, 5, 3], "float64"), b: normal([2, 5, 1], "float64") },
  ({ a, b }) => torch.lstsq(a, b, { driver: "gelsd" }),
  "torch.linalg.lstsq(a, b, driver='gelsd').solution",
);
// The singular vectors are unique only up to sign, so compare what is unique: the singular
// values, U diag(S) Vh against the input, and the orthonormality of U and Vh.
op(
  "svd",
  { a: normal([4, 3], "float64") },
  ({ a }) => {
    const { U, S, Vh } = torch.svd(a);
    return [S, U.mul(S.unsqueeze(0)).matmul(Vh), U.mT.matmul(U), Vh.matmul(Vh.mT)];
  },
  "(torch.linalg.svd(a).S, a, torch.eye(3, dtype=torch.float64), torch.eye(3, dtype=torch.float64))",
);
op(
  "svd full matrices",
  { a: normal([4, 3], "float64") },
  ({ a }) => {
    const { U, S, Vh } = torch.svd(a, true);
    return [S, U.mT.matmul(U), Vh.shape[0]];
  },
  "(torch.linalg.svdvals(a), torch.eye(4, dtype=torch.float64), 3)",
);
op("svd float32", { a: normal([3, 5]) }, ({ a }) => torch.svd(a).S, "torch.linalg.svd(a).S", { atol: 1e-4 });
op("svdvals", { a: normal([2, 4, 3], "float64") }, ({ a }) => torch.svdvals(a), "torch.linalg.svdvals(a)");

// ---------------------------------------------------------------- convolution and pooling
const CV = { x: normal([2, 3, 6, 6]), w: normal([4, 3, 3, 3]), b: normal([4]) };
op("conv2d", CV, ({ x, w, b }) => torch.conv2d(x, w, b), "F.conv2d(x, w, b)");
op("conv2d no bias", CV, ({ x, w }) => torch.conv2d(x, w), "F.conv2d(x, w)");
op(
  "conv2d stride padding",
  CV,
  ({ x, w, b }) => torch.conv2d(x, w, b, { stride: 2, padding: 1 }),
  "F.conv2d(x, w, b, stride=2, padding=1)",
);
op(
  "conv2d dilation",
  CV,
  ({ x, w, b }) => torch.conv2d(x, w, b, { dilation: 2, padding: 2 }),
  "F.conv2d(x, w, b, dilation=2, padding=2)",
);
op(
  "conv2d pairs",
  { x: normal([1, 3, 5, 6]), w: normal([2, 3, 3, 2]), b: normal([2]) },
  ({ x, w, b }) => torch.conv2d(x, w, b, { stride: [2, 1], padding: [1, 0], dilation: [1, 2] }),
  "F.conv2d(x, w, b, stride=(2, 1), padding=(1, 0), dilation=(1, 2))",
);
op(
  "conv2d groups",
  { x: normal([1, 4, 5, 5]), w: normal([6, 2, 3, 3]), b: normal([6]) },
  ({ x, w, b }) => torch.conv2d(x, w, b, { groups: 2, padding: 1 }),
  "F.conv2d(x, w, b, groups=2, padding=1)",
);
op(
  "conv2d depthwise",
  { x: normal([2, 3, 4, 4]), w: normal([3, 1, 2, 2]) },
  ({ x, w }) => torch.conv2d(x, w, null, { groups: 3 }),
  "F.conv2d(x, w, groups=3)",
);
op(
  "conv2d float64",
  { x: normal([1, 2, 5, 5], "float64"), w: normal([3, 2, 3, 3], "float64"), b: normal([3], "float64") },
  ({ x, w, b }) => torch.conv2d(x, w, b, { stride: 2 }),
  "F.conv2d(x, w, b, stride=2)",
);
const PL = { x: normal([2, 3, 6, 6]) };
const PL5 = { x: normal([1, 2, 5, 5]) };
op("maxPool2d", PL, ({ x }) => torch.maxPool2d(x, 2), "F.max_pool2d(x, 2)");
op(
  "maxPool2d stride padding",
  PL,
  ({ x }) => torch.maxPool2d(x, 3, { stride: 2, padding: 1 }),
  "F.max_pool2d(x, 3, stride=2, padding=1)",
);
op(
  "maxPool2d ceil mode",
  PL5,
  ({ x }) => torch.maxPool2d(x, 2, { ceilMode: true }),
  "F.max_pool2d(x, 2, ceil_mode=True)",
);
op(
  "maxPool2d dilation",
  PL,
  ({ x }) => torch.maxPool2d(x, 2, { stride: 1, dilation: 2 }),
  "F.max_pool2d(x, 2, stride=1, dilation=2)",
);
op("maxPool2d pair kernel", PL, ({ x }) => torch.maxPool2d(x, [2, 3]), "F.max_pool2d(x, (2, 3))");
op("avgPool2d", PL, ({ x }) => torch.avgPool2d(x, 2), "F.avg_pool2d(x, 2)");
op(
  "avgPool2d stride padding",
  PL,
  ({ x }) => torch.avgPool2d(x, 3, { stride: 2, padding: 1 }),
  "F.avg_pool2d(x, 3, stride=2, padding=1)",
);
op(
  "avgPool2d exclude pad",
  PL,
  ({ x }) => torch.avgPool2d(x, 3, { stride: 2, padding: 1, countIncludePad: false }),
  "F.avg_pool2d(x, 3, stride=2, padding=1, count_include_pad=False)",
);
op(
  "avgPool2d ceil mode",
  PL5,
  ({ x }) => torch.avgPool2d(x, 2, { ceilMode: true }),
  "F.avg_pool2d(x, 2, ceil_mode=True)",
);
op(
  "adaptiveAvgPool2d",
  { x: normal([1, 2, 7, 5]) },
  ({ x }) => torch.adaptiveAvgPool2d(x, [3, 2]),
  "F.adaptive_avg_pool2d(x, (3, 2))",
);
op("adaptiveAvgPool2d global", PL, ({ x }) => torch.adaptiveAvgPool2d(x, 1), "F.adaptive_avg_pool2d(x, 1)");
op(
  "adaptiveAvgPool2d 3-d input",
  { x: normal([2, 6, 4]) },
  ({ x }) => torch.adaptiveAvgPool2d(x, [4, 3]),
  "F.adaptive_avg_pool2d(x, (4, 3))",
);
op(
  "adaptiveMaxPool2d",
  { x: normal([1, 2, 7, 5]) },
  ({ x }) => torch.adaptiveMaxPool2d(x, [3, 2]),
  "F.adaptive_max_pool2d(x, (3, 2))",
);
op("adaptiveMaxPool2d global", PL, ({ x }) => torch.adaptiveMaxPool2d(x, 1), "F.adaptive_max_pool2d(x, 1)");

// ---------------------------------------------------------------- normalisation and layers
const BN = {
  x: normal([4, 3, 2, 2], "float32", 2),
  rm: normal([3], "float32", 0.1),
  rv: positive([3]),
  w: normal([3]),
  b: normal([3]),
};
// Training mode updates the running statistics in place: compare them too.
op(
  "batchNorm training",
  BN,
  ({ x, rm, rv, w, b }) => [torch.batchNorm(x, rm, rv, { weight: w, bias: b, training: true, momentum: 0.2 }), rm, rv],
  "(F.batch_norm(x, rm, rv, w, b, training=True, momentum=0.2), rm, rv)",
);
op(
  "batchNorm training 2-d defaults",
  { x: normal([5, 3]), rm: normal([3]), rv: positive([3]) },
  ({ x, rm, rv }) => [torch.batchNorm(x, rm, rv, { training: true }), rm, rv],
  "(F.batch_norm(x, rm, rv, training=True), rm, rv)",
);
op(
  "batchNorm training without running stats",
  BN,
  ({ x, w, b }) => torch.batchNorm(x, null, null, { weight: w, bias: b, training: true, eps: 0.1 }),
  "F.batch_norm(x, None, None, w, b, training=True, eps=0.1)",
);
op(
  "batchNorm eval",
  BN,
  ({ x, rm, rv, w, b }) => [torch.batchNorm(x, rm, rv, { weight: w, bias: b }), rm, rv],
  "(F.batch_norm(x, rm, rv, w, b), rm, rv)",
);
op(
  "batchNorm eval eps",
  BN,
  ({ x, rm, rv }) => torch.batchNorm(x, rm, rv, { training: false, eps: 0.5 }),
  "F.batch_norm(x, rm, rv, training=False, eps=0.5)",
);
const LN = { x: normal([2, 3, 4], "float32", 3), w: normal([4]), b: normal([4]), w2: normal([3, 4]) };
op("layerNorm", LN, ({ x, w, b }) => torch.layerNorm(x, [4], w, b), "F.layer_norm(x, [4], w, b)");
op("layerNorm no affine", LN, ({ x }) => torch.layerNorm(x, [3, 4]), "F.layer_norm(x, [3, 4])");
op(
  "layerNorm 2 dims eps",
  LN,
  ({ x, w2 }) => torch.layerNorm(x, [3, 4], w2, null, 1e-2),
  "F.layer_norm(x, [3, 4], w2, None, eps=1e-2)",
);
const LIN = { x: normal([5, 4]), w: normal([3, 4]), b: normal([3]), x3: normal([2, 5, 4]) };
op("linear", LIN, ({ x, w, b }) => torch.linear(x, w, b), "F.linear(x, w, b)");
op("linear no bias", LIN, ({ x, w }) => torch.linear(x, w), "F.linear(x, w)");
op("linear 3-d input", LIN, ({ x3, w, b }) => torch.linear(x3, w, b), "F.linear(x3, w, b)");
op("dropout p=0", { x: normal([4, 5]) }, ({ x }) => torch.dropout(x, 0), "F.dropout(x, 0.0)");
op(
  "dropout not training",
  { x: normal([4, 5]) },
  ({ x }) => torch.dropout(x, 0.5, false),
  "F.dropout(x, 0.5, training=False)",
);
op("relu", XY, ({ x }) => torch.relu(x), "F.relu(x)");
op("gelu", { x: normal([3, 4], "float32", 3) }, ({ x }) => torch.gelu(x), "F.gelu(x)");
op("gelu tanh", { x: normal([3, 4], "float32", 3) }, ({ x }) => torch.gelu(x, "tanh"), "F.gelu(x, approximate='tanh')");
op("softmax", R, ({ x }) => torch.softmax(x, 1), "F.softmax(x, 1)");
op("softmax dim 0", R, ({ x }) => x.softmax(0), "x.softmax(0)");
op("softmax large", { x: normal([2, 5], "float32", 100) }, ({ x }) => torch.softmax(x, -1), "F.softmax(x, -1)");
op("logSoftmax", R, ({ x }) => torch.logSoftmax(x, -1), "F.log_softmax(x, -1)");
op("logSoftmax method", R, ({ x }) => x.logSoftmax(1), "x.log_softmax(1)");
op("logSoftmax large", { x: normal([2, 5], "float32", 100) }, ({ x }) => torch.logSoftmax(x, 1), "F.log_softmax(x, 1)");

// ---------------------------------------------------------------- losses
const CE = { x: normal([4, 5]), t: ints([4], 0, 5), p: positive([4, 5]), w: positive([5]) };
const soft = (p: T) => p.div(p.sum(1, true));
const SOFT = "p / p.sum(1, keepdim=True)";
op("crossEntropy", CE, ({ x, t }) => torch.crossEntropy(x, t), "F.cross_entropy(x, t)");
op(
  "crossEntropy sum",
  CE,
  ({ x, t }) => torch.crossEntropy(x, t, { reduction: "sum" }),
  "F.cross_entropy(x, t, reduction='sum')",
);
op(
  "crossEntropy none",
  CE,
  ({ x, t }) => torch.crossEntropy(x, t, { reduction: "none" }),
  "F.cross_entropy(x, t, reduction='none')",
);
op(
  "crossEntropy label smoothing",
  CE,
  ({ x, t }) => torch.crossEntropy(x, t, { labelSmoothing: 0.1 }),
  "F.cross_entropy(x, t, label_smoothing=0.1)",
);
op(
  "crossEntropy weight",
  CE,
  ({ x, t, w }) => torch.crossEntropy(x, t, { weight: w }),
  "F.cross_entropy(x, t, weight=w)",
);
op(
  "crossEntropy ignore index",
  { x: normal([6, 3]), t: values([0, 2, 1, 2, 2, 0], [6], "int64") },
  ({ x, t }) => torch.crossEntropy(x, t, { ignoreIndex: 2 }),
  "F.cross_entropy(x, t, ignore_index=2)",
);
op(
  "crossEntropy spatial",
  { x: normal([2, 3, 2, 2]), t: ints([2, 2, 2], 0, 3) },
  ({ x, t }) => torch.crossEntropy(x, t),
  "F.cross_entropy(x, t)",
);
op("crossEntropy soft", CE, ({ x, p }) => torch.crossEntropy(x, soft(p)), `F.cross_entropy(x, ${SOFT})`);
op(
  "crossEntropy soft none",
  CE,
  ({ x, p }) => torch.crossEntropy(x, soft(p), { reduction: "none" }),
  `F.cross_entropy(x, ${SOFT}, reduction='none')`,
);
op(
  "crossEntropy soft label smoothing",
  CE,
  ({ x, p }) => torch.crossEntropy(x, soft(p), { labelSmoothing: 0.2 }),
  `F.cross_entropy(x, ${SOFT}, label_smoothing=0.2)`,
);
op("mseLoss", XY, ({ x, y }) => torch.mseLoss(x, y), "F.mse_loss(x, y)");
op("mseLoss sum", XY, ({ x, y }) => torch.mseLoss(x, y, "sum"), "F.mse_loss(x, y, reduction='sum')");
op("mseLoss none", XY, ({ x, y }) => torch.mseLoss(x, y, "none"), "F.mse_loss(x, y, reduction='none')");

// ---------------------------------------------------------------- interpolation
const IP = { x: normal([1, 2, 3, 4]) };
for (const [label, size] of [
  ["up", [6, 7]],
  ["down", [2, 3]],
  ["same", [3, 4]],
] as const)
  for (const ac of [false, true])
    op(
      `interpolateBilinear ${label} alignCorners=${ac}`,
      IP,
      ({ x }) => torch.interpolateBilinear(x, [size[0], size[1]], ac),
      `F.interpolate(x, size=(${size[0]}, ${size[1]}), mode='bilinear', align_corners=${ac ? "True" : "False"})`,
    );

// ---------------------------------------------------------------- in place
const IPL = { x: normal([2, 3]), y: normal([2, 3]), v: normal([3]), p: positive([2, 3]) };
op("add_", IPL, ({ x, y }) => x.add_(y), "x.add_(y)");
op("add_ alpha", IPL, ({ x, y }) => x.add_(y, 2), "x.add_(y, alpha=2)");
op("add_ scalar", IPL, ({ x }) => x.add_(1.5), "x.add_(1.5)");
op("add_ broadcast", IPL, ({ x, v }) => x.add_(v), "x.add_(v)");
op("sub_", IPL, ({ x, y }) => x.sub_(y, 0.5), "x.sub_(y, alpha=0.5)");
op("mul_", IPL, ({ x, v }) => x.mul_(v), "x.mul_(v)");
op("mul_ scalar", IPL, ({ x }) => x.mul_(-2.5), "x.mul_(-2.5)");
op("div_", IPL, ({ x, p }) => x.div_(p), "x.div_(p)");
op("div_ scalar", IPL, ({ x }) => x.div_(3), "x.div_(3)");
op("addcmul_", IPL, ({ x, y, v }) => x.addcmul_(y, v, 0.5), "x.addcmul_(y, v, value=0.5)");
op("addcmul_ default value", IPL, ({ x, y, v }) => x.addcmul_(y, v), "x.addcmul_(y, v)");
op("addcdiv_", IPL, ({ x, y, p }) => x.addcdiv_(y, p, -2), "x.addcdiv_(y, p, value=-2)");
op("clamp_", IPL, ({ x }) => x.clamp_(-0.3, 0.4), "x.clamp_(-0.3, 0.4)");
op("clamp_ min", IPL, ({ x }) => x.clamp_(0), "x.clamp_(min=0)");
op("clamp_ tensors", IPL, ({ x, y, p }) => x.clamp_(y.sub(1), p), "x.clamp_(y - 1, p)");
op("copy_", IPL, ({ x, y }) => x.copy_(y), "x.copy_(y)");
op("copy_ broadcast", IPL, ({ x, v }) => x.copy_(v), "x.copy_(v)");
op(
  "copy_ converts dtype",
  IPL,
  ({ y }) => torch.zeros([2, 3], { dtype: "float64" }).copy_(y),
  "torch.zeros(2, 3, dtype=torch.float64).copy_(y)",
);
op("zero_", IPL, ({ x }) => x.zero_(), "x.zero_()");
op("fill_", IPL, ({ x }) => x.fill_(2.5), "x.fill_(2.5)");
op("fill_ int64", { a: ints([3], 0, 9) }, ({ a }) => a.fill_(-7), "a.fill_(-7)");
op(
  "in-place through views",
  IPL,
  ({ x }) => {
    x.narrow(0, 0, 1).fill_(3);
    x.select(1, 2).mul_(10);
    x.slice(1, 0, 2).add_(1);
    return x;
  },
  "(x[0:1].fill_(3), x[:, 2].mul_(10), x[:, 0:2].add_(1), x)[3]",
);

// ---------------------------------------------------------------- item
op("item float", R, ({ x }) => x.sum().item(), "x.sum().item()");
op("item int64", { a: ints([3, 4], -9, 9) }, ({ a }) => a.sum().item(), "a.sum().item()");
op("item bool", AB, ({ a }) => a.any().item(), "a.any().item()");
op("item argmax", R, ({ x }) => x.argmax().item(), "x.argmax().item()");

// ---------------------------------------------------------------- the run
const skip = skipUnlessPytorch();
const data = new Map<string, TypedArray>();
for (const c of cases)
  for (const [k, spec] of Object.entries(c.inputs))
    data.set(`${c.name}/${k}`, generate(spec, hashSeed(`${c.name}/${k}`)));

function inputsOf(c: OpCase): Inputs {
  const out: Inputs = {};
  for (const [k, spec] of Object.entries(c.inputs)) out[k] = tensorOf(spec, data.get(`${c.name}/${k}`)!);
  return out;
}

let reference: ReferenceResults | undefined;
function ref(): ReferenceResults {
  if (!reference) {
    reference = torch.tidy(() => {
      const all: Record<string, T> = {};
      for (const c of cases) for (const [k, t] of Object.entries(inputsOf(c))) all[`${c.name}/${k}`] = t;
      return runReference(
        cases.map((c) => ({ name: c.name, expr: c.py, inputs: Object.keys(c.inputs) })),
        all,
      );
    });
    for (const t of Object.values(reference.outputs)) torch.keep(t);
  }
  return reference;
}

function flatten(name: string, r: Result, out: Map<string, T | number | boolean>): void {
  if (!Array.isArray(r)) out.set(name, r);
  else for (const [i, x] of r.entries()) flatten(`${name}#${i}`, x, out);
}

function compare(key: string, actual: T | number | boolean, expected: T, tol: Tolerance | undefined): void {
  if (actual instanceof torch.Tensor) {
    assertClose(actual, expected, { ...tol, label: key });
    return;
  }
  // A JavaScript number or boolean (item()) against Python's int, float or bool.
  assert.deepEqual(expected.shape, [], `${key}: Python returned a tensor of shape [${expected.shape}]`);
  if (expected.dtype === "bool") {
    assert.equal(typeof actual, "boolean", `${key}: expected a boolean, got ${typeof actual}`);
    assert.equal(actual, expected.item(), key);
    return;
  }
  assert.equal(typeof actual, "number", `${key}: expected a number, got ${typeof actual}`);
  const e = expected.item();
  if (expected.dtype === "int64") assert.equal(actual, e, key);
  else {
    const t = (tol?.atol ?? 1e-5) * Math.max(1, Math.abs(e)) + (tol?.rtol ?? 1e-5) * Math.abs(e);
    assert.ok(Math.abs((actual as number) - e) <= t, `${key}: ${actual} vs expected ${e}`);
  }
}

for (const c of cases) {
  test(`op: ${c.name}`, { skip }, () => {
    const { outputs, errors } = ref();
    if (errors[c.name]) assert.fail(`Python failed on "${c.py}":\n${errors[c.name]}`);
    torch.tidy(() => {
      const ours = new Map<string, T | number | boolean>();
      flatten(c.name, c.ours(inputsOf(c)), ours);
      const theirs = Object.keys(outputs).filter((k) => k === c.name || k.startsWith(`${c.name}#`));
      assert.deepEqual([...ours.keys()].sort(), theirs.sort(), "our results and PyTorch's differ in number or nesting");
      for (const [k, v] of ours) compare(k, v, outputs[k], c.tol);
    });
  });
}

test("reference: Python's PyTorch is the version of our libtorch", { skip }, () => {
  // Seeded random numbers agree only on the same build; the other results should at least
  // come from the same version.
  const ours = torch.buildInfo().torch.split(".").slice(0, 2).join(".");
  const theirs = ref().torchVersion.split(".").slice(0, 2).join(".");
  assert.equal(theirs, ours, `Python has torch ${ref().torchVersion}, libtorch is ${torch.buildInfo().torch}`);
});

// ---------------------------------------------------------------- checks without Python

test("assertClose fails on a different shape, dtype or value", () => {
  torch.tidy(() => {
    const x = torch.tensor([1, 2, 3]);
    assertClose(x, torch.tensor([1, 2, 3.00001]));
    assert.throws(() => assertClose(x, torch.tensor([1, 2, 3.001])), /1 of 3 elements differ/);
    assert.throws(() => assertClose(x, torch.tensor([1, 2, 3, 4])), /shape/);
    assert.throws(() => assertClose(x, x.reshape(3, 1)), /shape/);
    assert.throws(() => assertClose(x, x.double()), /dtype/);
    assert.throws(() => assertClose(x, torch.tensor([1, Number.NaN, 3])), /NaN/);
    assert.throws(() => assertClose(torch.tensor([1, Number.NaN, 3]), x), /differ/);
    assert.throws(() => assertClose(x, torch.tensor([1, 2, Number.POSITIVE_INFINITY])), /Infinity/);
    const big = torch.tensor(new BigInt64Array([2n ** 62n]));
    assertClose(big, torch.tensor(new BigInt64Array([2n ** 62n])));
    assert.throws(() => assertClose(big, torch.tensor(new BigInt64Array([2n ** 62n + 1n]))), /exact/);
    assert.throws(() => assertClose(torch.tensor([true, false]), torch.tensor([true, true])), /exact/);
    // atol scales with the largest expected magnitude.
    assertClose(torch.tensor([1000, 0.005]), torch.tensor([1000, 0]));
    assert.throws(() => assertClose(torch.tensor([1, 0.005]), torch.tensor([1, 0])), /differ/);
  });
});

test("random: rand is uniform in [0, 1), with the dtype and shape asked for", () => {
  torch.tidy(() => {
    torch.manualSeed(101); // the bounds below are 4 to 6 standard errors wide
    const r = torch.rand([4000]);
    assert.equal(r.dtype, "float32");
    assert.deepEqual(r.shape, [4000]);
    const a = r.toTypedArray() as Float32Array;
    assert.ok(
      a.every((v) => v >= 0 && v < 1),
      "a value outside [0, 1)",
    );
    const mean = r.mean().item();
    assert.ok(Math.abs(mean - 0.5) < 0.03, `mean ${mean}`);
    const below = a.filter((v) => v < 0.25).length / a.length;
    assert.ok(Math.abs(below - 0.25) < 0.03, `fraction below 0.25: ${below}`);
    assert.equal(torch.rand([2, 3], { dtype: "float64" }).dtype, "float64");
    assert.deepEqual(torch.rand([2, 3]).shape, [2, 3]);
  });
});

test("random: randn has mean 0 and standard deviation 1", () => {
  torch.tidy(() => {
    torch.manualSeed(102); // the bounds below are 4 to 6 standard errors wide
    const r = torch.randn([4000], { dtype: "float64" });
    assert.equal(r.dtype, "float64");
    const mean = r.mean().item();
    const std = r.std().item();
    assert.ok(Math.abs(mean) < 0.06, `mean ${mean}`);
    assert.ok(Math.abs(std - 1) < 0.05, `std ${std}`);
    const tail = r.abs().gt(1.96).float().mean().item();
    assert.ok(Math.abs(tail - 0.05) < 0.015, `fraction beyond 1.96: ${tail}`);
  });
});

test("random: randint gives int64 integers in [low, high), each value", () => {
  torch.tidy(() => {
    torch.manualSeed(103); // the bounds below are 4 to 6 standard errors wide
    const r = torch.randint(3, 7, [1000]);
    assert.equal(r.dtype, "int64");
    const vals = Array.from(r.toTypedArray() as BigInt64Array, Number);
    assert.ok(
      vals.every((v) => v >= 3 && v < 7),
      "a value outside [3, 7)",
    );
    assert.deepEqual([...new Set(vals)].sort(), [3, 4, 5, 6]);
    assert.equal(torch.randint(0, 5, [2, 2], { dtype: "int32" }).dtype, "int32");
  });
});

test("random: manualSeed repeats rand, randn and randint; another seed does not", () => {
  torch.tidy(() => {
    const draw = (seed: number) => {
      torch.manualSeed(seed);
      return [torch.rand([5]), torch.randn([20]), torch.randint(0, 1000, [5])];
    };
    const a = draw(42);
    const b = draw(42);
    const c = draw(43);
    for (let i = 0; i < a.length; i++) {
      assertClose(a[i], b[i], { rtol: 0, atol: 0, label: `draw ${i}, same seed` });
      assert.ok(a[i].ne(c[i]).any().item(), `draw ${i}: seeds 42 and 43 gave the same numbers`);
    }
  });
});

test("dropout: p=0.5 zeroes about half and doubles the rest", () => {
  torch.tidy(() => {
    torch.manualSeed(104); // the bounds below are 4 to 6 standard errors wide
    const x = torch.rand([10000], { dtype: "float64" }).add(0.5);
    const y = torch.dropout(x, 0.5);
    const zero = y.eq(0);
    const frac = zero.double().mean().item();
    assert.ok(Math.abs(frac - 0.5) < 0.03, `zero fraction ${frac}`);
    const kept = zero.logicalNot();
    assertClose(y.index([kept]), x.index([kept]).mul(2), { label: "survivors" });
    const z = torch.dropout(x, 0.2);
    const frac2 = z.eq(0).double().mean().item();
    assert.ok(Math.abs(frac2 - 0.2) < 0.03, `zero fraction at p=0.2: ${frac2}`);
    assertClose(z.index([z.ne(0)]), x.index([z.ne(0)]).div(0.8), { label: "survivors at p=0.2" });
  });
});

test("data out: toTypedArray gives the typed array of each dtype", () => {
  torch.tidy(() => {
    const f = torch.tensor([1.5, -2], { dtype: "float32" }).toTypedArray();
    assert.ok(f instanceof Float32Array);
    assert.deepEqual(Array.from(f), [1.5, -2]);
    const d = torch.tensor([0.1, 2], { dtype: "float64" }).toTypedArray();
    assert.ok(d instanceof Float64Array);
    assert.deepEqual(Array.from(d), [0.1, 2]);
    const l = torch.tensor(new BigInt64Array([2n ** 60n + 1n, -3n])).toTypedArray();
    assert.ok(l instanceof BigInt64Array);
    assert.deepEqual(Array.from(l), [2n ** 60n + 1n, -3n]);
    const i = torch.arange(3, undefined, 1, { dtype: "int32" }).toTypedArray();
    assert.ok(i instanceof Int32Array);
    assert.deepEqual(Array.from(i), [0, 1, 2]);
    const u = torch.tensor(new Uint8Array([255, 0])).toTypedArray();
    assert.ok(u instanceof Uint8Array);
    assert.deepEqual(Array.from(u), [255, 0]);
    const b = torch.tensor([true, false, true]).toTypedArray();
    assert.ok(b instanceof Uint8Array);
    assert.deepEqual(Array.from(b), [1, 0, 1]);
    const h = torch.tensor([1.5, 65504, 1e-3]).to("float16").toTypedArray();
    assert.ok(h instanceof Float32Array);
    assert.deepEqual(Array.from(h), [1.5, 65504, 0.0010004043579101562]);
    // A non-contiguous view comes out row-major.
    const t = torch.arange(6, undefined, 1, { dtype: "float32" }).reshape(2, 3).t().toTypedArray() as Float32Array;
    assert.deepEqual(Array.from(t), [0, 3, 1, 4, 2, 5]);
    // The array is a copy: writing to it does not change the tensor.
    const src = torch.zeros([2]);
    (src.toTypedArray() as Float32Array)[0] = 9;
    assert.equal(src.sum().item(), 0);
  });
});

test("data out: tolist nests by shape, as PyTorch's tolist", () => {
  torch.tidy(() => {
    assert.deepEqual(torch.arange(6).reshape(2, 3).tolist(), [
      [0, 1, 2],
      [3, 4, 5],
    ]);
    assert.deepEqual(torch.tensor([1.5, -2]).reshape(2, 1, 1).tolist(), [[[1.5]], [[-2]]]);
    assert.deepEqual(torch.tensor(new Float64Array([0.1, 0.2])).tolist(), [0.1, 0.2]);
    assert.equal(torch.tensor(2.5).tolist(), 2.5);
    assert.deepEqual(torch.zeros([0, 3]).tolist(), []);
    assert.deepEqual(torch.tensor([true, false]).tolist(), [true, false]);
    assert.deepEqual(torch.arange(4).reshape(2, 2).t().tolist(), [
      [0, 2],
      [1, 3],
    ]);
  });
});

test("data out: item returns a number (a boolean for bool) and refuses several elements", () => {
  torch.tidy(() => {
    assert.equal(torch.tensor([[2.5]]).item(), 2.5);
    assert.equal(torch.tensor(new BigInt64Array([-7n])).item(), -7);
    assert.equal(torch.tensor([true]).item(), true);
    assert.throws(() => torch.zeros([2]).item(), /2 elements/);
  });
});

test("in place: the methods return the tensor itself", () => {
  torch.tidy(() => {
    const x = torch.zeros([3]);
    const y = torch.ones([3]);
    for (const r of [
      x.add_(y),
      x.sub_(y),
      x.mul_(2),
      x.div_(2),
      x.addcmul_(y, y),
      x.addcdiv_(y, y),
      x.clamp_(0, 1),
      x.copy_(y),
      x.zero_(),
      x.fill_(4),
    ])
      assert.equal(r, x);
    assert.deepEqual(x.tolist(), [4, 4, 4]);
  });
});
