// ONNX operators on stitchlab's libtorch tensors: each is one ATen call or a short composition,
// so autograd (input gradients for IRIs, parameter gradients through a back's tail) and CUDA come
// from libtorch as for the zoo. Semantics follow the ONNX operator specification
// (onnx/docs/Operators.md) at opsets 13-17, the range torch.onnx.export writes for torchvision's
// classification models; where an opset changed an operator (axes moved from attribute to input
// at 13 for Squeeze/Unsqueeze/ReduceSum/Split, at 18 for the other reductions), both forms are read.
// BatchNormalization is not here: the model runs it as a BatchNorm2d module (models/onnx/model.ts),
// so that the batch-norm modes of stitching (stitch/train.ts) reach it as they reach the zoo's.
import * as torch from "../../torch/index.js";
import { type AttrValue, dtypeOf, type TensorProto, tensorOf } from "./proto.js";

type Tensor = torch.Tensor;

/** What an operator sees: its inputs (null where the graph leaves an optional one out) and attributes. */
export interface OpCall {
  inputs: (Tensor | null)[];
  attrs: Record<string, AttrValue>;
  /** For errors: the node's name and type. */
  where: string;
}

export type OpFn = (c: OpCall) => Tensor | (Tensor | null)[];

const call = torch.call;

/** An input the operator needs; one error naming the node if the graph leaves it out. */
function need(c: OpCall, i: number): Tensor {
  const t = c.inputs[i];
  if (!t) throw new Error(`${c.where}: input ${i} is missing`);
  return t;
}
/**
 * A small tensor's values as numbers (shapes, axes, pads, bounds), read to the host once per
 * tensor and version. The shapes a graph computes are kept per batch size (model.ts batchCache),
 * so after the first pass every read here is one made before: on a GPU a read is a copy and a
 * wait for the device, which would stall every pass (a Swin's graph reads about 300) and cannot
 * happen inside a CUDA graph's capture (torch/graphs.ts).
 */
const onHost = new WeakMap<Tensor, { version: number; values: number[] }>();
export function hostValues(t: Tensor): number[] {
  const version = t.version();
  const had = onHost.get(t);
  if (had?.version === version) return had.values;
  const values = Array.from(t.toTypedArray() as ArrayLike<number | bigint>, Number);
  onHost.set(t, { version, values });
  return values;
}
/** An int64/int32 tensor's values as numbers (shapes, axes, indices of a few elements). */
export const ints = hostValues;
/** A one-element tensor's value (hostValues). */
const scalarOf = (t: Tensor): number => hostValues(t)[0] as number;
export const attrInt = (c: OpCall, k: string, d: number): number =>
  typeof c.attrs[k] === "number" ? (c.attrs[k] as number) : d;
const attrFloat = attrInt;
export const attrInts = (c: OpCall, k: string): number[] | null =>
  Array.isArray(c.attrs[k]) ? (c.attrs[k] as number[]) : null;
const attrString = (c: OpCall, k: string, d: string): string =>
  typeof c.attrs[k] === "string" ? (c.attrs[k] as string) : d;
/** Axes from the attribute (older opsets) or the input (newer), or null for "all". */
function axesOf(c: OpCall, inputIndex: number): number[] | null {
  const given = c.inputs[inputIndex];
  if (given) return ints(given);
  return attrInts(c, "axes");
}
const norm = (axis: number, rank: number) => (axis < 0 ? axis + rank : axis);
const isFloat = (t: Tensor) => torch.isFloating(t.dtype);

const unary =
  (aten: string): OpFn =>
  (c) =>
    call(aten, need(c, 0));
const binary =
  (aten: string): OpFn =>
  (c) =>
    call(aten, need(c, 0), need(c, 1));

/**
 * The spatial padding of Conv and the pools as ONNX gives it, begin and end per axis (pads: [x1_begin,
 * x2_begin, ..., x1_end, x2_end, ...]) or auto_pad, for input size `spatial`.
 */
export function padsOf(
  c: OpCall,
  spatial: number[],
  kernel: number[],
  strides: number[],
  dilations: number[],
): { begin: number[]; end: number[] } {
  const rank = kernel.length;
  let pads = attrInts(c, "pads") ?? new Array(2 * rank).fill(0);
  const auto = attrString(c, "auto_pad", "NOTSET");
  if (auto === "SAME_UPPER" || auto === "SAME_LOWER") {
    pads = new Array(2 * rank).fill(0);
    for (let i = 0; i < rank; i++) {
      const out = Math.ceil((spatial[i] as number) / (strides[i] as number));
      const span = ((kernel[i] as number) - 1) * (dilations[i] as number) + 1;
      const total = Math.max(0, (out - 1) * (strides[i] as number) + span - (spatial[i] as number));
      const small = Math.floor(total / 2);
      pads[i] = auto === "SAME_UPPER" ? small : total - small;
      pads[i + rank] = total - (pads[i] as number);
    }
  } else if (auto === "VALID") pads = new Array(2 * rank).fill(0);
  return { begin: pads.slice(0, rank), end: pads.slice(rank) };
}

/**
 * The padding ATen takes, one symmetric value per axis: ONNX's (padsOf) where it is symmetric;
 * an asymmetric one pads explicitly first (with `fill`).
 */
function spatialPadding(
  c: OpCall,
  x: Tensor,
  kernel: number[],
  strides: number[],
  dilations: number[],
  fill: number,
): { x: Tensor; padding: number[] } {
  const rank = kernel.length;
  const { begin, end } = padsOf(c, x.shape.slice(2) as number[], kernel, strides, dilations);
  if (begin.every((b, i) => b === end[i])) return { x, padding: begin };
  // constant_pad_nd takes (last axis begin, last axis end, previous axis begin, ...).
  const torchPad: number[] = [];
  for (let i = rank - 1; i >= 0; i--) torchPad.push(begin[i] as number, end[i] as number);
  return { x: call("constant_pad_nd", x, torchPad, fill), padding: new Array(rank).fill(0) };
}

/**
 * A Conv's geometry with ONNX's defaults: the kernel (else the weight's spatial shape), strides and
 * dilations (1 per axis), group (1). The one reading of them (the dense op here, blocked.ts).
 */
export function convGeometry(
  c: OpCall,
  w: Tensor,
): { kernel: number[]; strides: number[]; dilations: number[]; groups: number } {
  const rank = w.shape.length - 2;
  return {
    kernel: attrInts(c, "kernel_shape") ?? (w.shape.slice(2) as number[]),
    strides: attrInts(c, "strides") ?? new Array(rank).fill(1),
    dilations: attrInts(c, "dilations") ?? new Array(rank).fill(1),
    groups: attrInt(c, "group", 1),
  };
}

function conv(c: OpCall): Tensor {
  const x = need(c, 0);
  const w = need(c, 1);
  const rank = w.shape.length - 2;
  if (rank < 1 || rank > 3) throw new Error(`${c.where}: Conv over ${rank} spatial axes is not supported`);
  const { kernel, strides, dilations, groups } = convGeometry(c, w);
  const { x: padded, padding } = spatialPadding(c, x, kernel, strides, dilations, 0);
  // In the layout the zoo's convolutions run in (torch/layout.ts), which also keeps the ones oneDNN
  // gets wrong under AVX2 contiguous, whatever strides the graph's transposes left.
  const input = rank === 2 ? torch.toConvLayout(padded, w.shape[0] as number) : padded;
  return call(`conv${rank}d`, input, w, c.inputs[2] ?? null, strides, padding, dilations, groups);
}

function pool(kind: "max" | "avg"): OpFn {
  return (c) => {
    const x = need(c, 0);
    const kernel = attrInts(c, "kernel_shape");
    if (!kernel) throw new Error(`${c.where}: kernel_shape is missing`);
    const rank = kernel.length;
    if (rank !== 1 && rank !== 2) throw new Error(`${c.where}: ${kind} pooling over ${rank} axes is not supported`);
    const strides = attrInts(c, "strides") ?? new Array(rank).fill(1);
    const dilations = attrInts(c, "dilations") ?? new Array(rank).fill(1);
    const ceil = attrInt(c, "ceil_mode", 0) === 1;
    if (kind === "max") {
      const { x: padded, padding } = spatialPadding(c, x, kernel, strides, dilations, Number.NEGATIVE_INFINITY);
      return call(`max_pool${rank}d`, padded, kernel, strides, padding, dilations, ceil);
    }
    if (dilations.some((d) => d !== 1)) throw new Error(`${c.where}: AveragePool with dilations is not supported`);
    const countPad = attrInt(c, "count_include_pad", 0) === 1;
    const { x: padded, padding } = spatialPadding(c, x, kernel, strides, dilations, 0);
    if (padded !== x && !countPad)
      throw new Error(`${c.where}: AveragePool with asymmetric pads and count_include_pad 0 is not supported`);
    return rank === 1
      ? call("avg_pool1d", padded, kernel, strides, padding, ceil, countPad)
      : call("avg_pool2d", padded, kernel, strides, padding, ceil, countPad, null);
  };
}

function gemm(c: OpCall): Tensor {
  const alpha = attrFloat(c, "alpha", 1);
  const beta = attrFloat(c, "beta", 1);
  let a = need(c, 0);
  let b = need(c, 1);
  const bias = c.inputs[2] ?? null;
  if (attrInt(c, "transA", 0)) a = a.t();
  // The common form (nn.Linear's export): A [N, in], B [out, in] transposed, C [out].
  if (attrInt(c, "transB", 0) && alpha === 1 && beta === 1) return call("linear", a, b, bias);
  if (attrInt(c, "transB", 0)) b = b.t();
  let y: Tensor = call("mm", a, b);
  if (alpha !== 1) y = y.mul(alpha);
  if (bias) y = y.add(beta === 1 ? bias : bias.mul(beta));
  return y;
}

/** ONNX Reshape: 0 copies the input's size on that axis (unless allowzero), -1 is inferred. */
function reshape(c: OpCall): Tensor {
  const x = need(c, 0);
  const shape = ints(need(c, 1));
  const allowZero = attrInt(c, "allowzero", 0) === 1;
  const target = shape.map((s, i) => (s === 0 && !allowZero ? (x.shape[i] as number) : s));
  return x.reshape(target);
}

function flatten(c: OpCall): Tensor {
  const x = need(c, 0);
  const axis = norm(attrInt(c, "axis", 1), x.shape.length);
  const outer = x.shape.slice(0, axis).reduce((p, q) => p * q, 1);
  return x.reshape([outer, -1]);
}

function transpose(c: OpCall): Tensor {
  const x = need(c, 0);
  const perm = attrInts(c, "perm") ?? x.shape.map((_, i) => x.shape.length - 1 - i);
  return x.permute(perm);
}

/** Gather along `axis`: output shape data[:axis] + indices + data[axis+1:], negative indices counted from the end. */
function gather(c: OpCall): Tensor {
  const data = need(c, 0);
  const indices = need(c, 1);
  const axis = norm(attrInt(c, "axis", 0), data.shape.length);
  const size = data.shape[axis] as number;
  const idx = torch.where(indices.lt(0), indices.add(size), indices).to("int64").reshape([-1]);
  const picked: Tensor = call("index_select", data, axis, idx);
  const shape = [...data.shape.slice(0, axis), ...indices.shape, ...data.shape.slice(axis + 1)] as number[];
  return picked.reshape(shape);
}

function unsqueeze(c: OpCall): Tensor {
  let x = need(c, 0);
  const axes = axesOf(c, 1);
  if (!axes) throw new Error(`${c.where}: axes are missing`);
  const rank = x.shape.length + axes.length;
  for (const a of axes.map((a) => norm(a, rank)).sort((p, q) => p - q)) x = x.unsqueeze(a);
  return x;
}

function squeeze(c: OpCall): Tensor {
  const x = need(c, 0);
  const axes = axesOf(c, 1);
  if (!axes) return call("squeeze", x);
  const drop = new Set(axes.map((a) => norm(a, x.shape.length)));
  return x.reshape(x.shape.filter((_, i) => !drop.has(i)) as number[]);
}

/** Slice with starts/ends/axes/steps as inputs (opset >= 10), ends past the axis clamped, negative steps by flipping. */
function slice(c: OpCall): Tensor {
  let x = need(c, 0);
  const starts = ints(need(c, 1));
  const ends = ints(need(c, 2));
  const axes = c.inputs[3] ? ints(c.inputs[3]) : starts.map((_, i) => i);
  const steps = c.inputs[4] ? ints(c.inputs[4]) : starts.map(() => 1);
  for (let i = 0; i < axes.length; i++) {
    const axis = norm(axes[i] as number, x.shape.length);
    const size = x.shape[axis] as number;
    const step = steps[i] as number;
    const clampIndex = (v: number, lo: number, hi: number) => Math.min(Math.max(v < 0 ? v + size : v, lo), hi);
    if (step > 0) {
      const s = clampIndex(starts[i] as number, 0, size);
      const e = clampIndex(ends[i] as number, 0, size);
      x = call("slice.Tensor", x, axis, s, Math.max(s, e), step);
    } else if (step < 0) {
      // Elements start, start+step, ... down to (not including) end; on the flipped axis index size-1-k.
      const s = clampIndex(starts[i] as number, 0, size - 1);
      const e = clampIndex(ends[i] as number, -1, size - 1);
      const flipped: Tensor = call("flip", x, [axis]);
      x = call("slice.Tensor", flipped, axis, size - 1 - s, Math.max(size - 1 - s, size - 1 - e), -step);
    } else throw new Error(`${c.where}: a step of 0`);
  }
  return x;
}

/** Expand: the input broadcast with `shape` (in both directions, as numpy's broadcast). */
function expand(c: OpCall): Tensor {
  const x = need(c, 0);
  const shape = ints(need(c, 1));
  const rank = Math.max(shape.length, x.shape.length);
  const pad = (s: number[]) => [...new Array(rank - s.length).fill(1), ...s];
  const a = pad(x.shape as number[]);
  const b = pad(shape);
  const target = a.map((d, i) => (d === 1 ? (b[i] as number) : d));
  return x.reshape(a).expand(target);
}

function concat(c: OpCall): Tensor {
  const parts = c.inputs.filter((t): t is Tensor => t !== null && t.numel() > 0);
  const axis = attrInt(c, "axis", 0);
  if (parts.length === 0) return need(c, 0);
  return torch.cat(parts, norm(axis, (parts[0] as Tensor).shape.length));
}

function reduce(aten: "mean" | "sum" | "amax" | "amin", axesInput: (c: OpCall) => number): OpFn {
  return (c) => {
    const x = need(c, 0);
    let axes = axesOf(c, axesInput(c));
    const keep = attrInt(c, "keepdims", 1) === 1;
    if (!axes || axes.length === 0) {
      if (attrInt(c, "noop_with_empty_axes", 0) === 1) return x;
      axes = x.shape.map((_, i) => i);
    }
    const dims = axes.map((a) => norm(a, x.shape.length));
    if (aten === "mean") return call("mean.dim", x, dims, keep, null);
    if (aten === "sum") return call("sum.dim_IntList", x, dims, keep, null);
    return call(aten, x, dims, keep);
  };
}

function softmax(aten: "softmax.int" | "log_softmax.int"): OpFn {
  return (c) => {
    const x = need(c, 0);
    return call(aten, x, norm(attrInt(c, "axis", -1), x.shape.length), null);
  };
}

function layerNorm(c: OpCall): Tensor {
  const x = need(c, 0);
  const axis = norm(attrInt(c, "axis", -1), x.shape.length);
  return call(
    "layer_norm",
    x,
    x.shape.slice(axis),
    c.inputs[1] ?? null,
    c.inputs[2] ?? null,
    attrFloat(c, "epsilon", 1e-5),
    true,
  );
}

/** ConstantOfShape: the shape filled with the attribute's one value (default float 0). */
function constantOfShape(c: OpCall): Tensor {
  const shape = ints(need(c, 0));
  const device = need(c, 0).device;
  const v = c.attrs.value;
  if (!v || typeof v !== "object" || Array.isArray(v)) return torch.zeros(shape, { device });
  const value = tensorOf(v as TensorProto, "", `${c.where}: its value`);
  try {
    const fill = Number((value.toTypedArray() as ArrayLike<number | bigint>)[0]);
    return torch.full(shape, value.dtype === "bool" ? fill !== 0 : fill, { dtype: value.dtype, device });
  } finally {
    value.dispose();
  }
}

function split(c: OpCall): (Tensor | null)[] {
  const x = need(c, 0);
  const axis = norm(attrInt(c, "axis", 0), x.shape.length);
  const size = x.shape[axis] as number;
  let sizes = c.inputs[1] ? ints(c.inputs[1]) : attrInts(c, "split");
  if (!sizes) {
    const n = attrInt(c, "num_outputs", attrInt(c, "__outputs", 1));
    const each = Math.ceil(size / n);
    sizes = Array.from({ length: n }, (_, i) => Math.min(each, size - i * each));
  }
  return call("split_with_sizes", x, sizes, axis) as Tensor[];
}

function pad(c: OpCall): Tensor {
  const x = need(c, 0);
  const pads = ints(need(c, 1));
  const value = c.inputs[2] ? scalarOf(c.inputs[2]) : 0;
  const rank = x.shape.length;
  const axes = c.inputs[3] ? ints(c.inputs[3]).map((a) => norm(a, rank)) : x.shape.map((_, i) => i);
  const n = axes.length;
  const mode = attrString(c, "mode", "constant");
  const perAxis = new Map(axes.map((a, i) => [a, [pads[i] as number, pads[i + n] as number]]));
  const torchPad: number[] = [];
  for (let a = rank - 1; a >= 0; a--) torchPad.push(...(perAxis.get(a) ?? [0, 0]));
  if (mode === "constant") return call("constant_pad_nd", x, torchPad, value);
  // reflection_padNd / replication_padNd pad the last N axes of an [N, C, ...] input.
  if (rank < 3 || rank > 5 || torchPad.slice(2 * (rank - 2)).some((p) => p !== 0))
    throw new Error(`${c.where}: Pad mode '${mode}' pads only the spatial axes of a 3- to 5-d input`);
  const spatial = rank - 2;
  torchPad.splice(2 * spatial);
  if (mode === "reflect") return call(`reflection_pad${spatial}d`, x, torchPad);
  if (mode === "edge") return call(`replication_pad${spatial}d`, x, torchPad);
  throw new Error(`${c.where}: Pad mode '${mode}' is not supported`);
}

/** ScatterND: a copy of data with the slices indices[..., :] set to updates (reduction none). */
function scatterND(c: OpCall): Tensor {
  const data = need(c, 0);
  const indices = need(c, 1);
  const updates = need(c, 2);
  if (attrString(c, "reduction", "none") !== "none")
    throw new Error(`${c.where}: ScatterND reduction is not supported`);
  const k = indices.shape[indices.shape.length - 1] as number;
  const index = Array.from({ length: k }, (_, j) => indices.select(-1, j).to("int64"));
  // ONNX types data and updates alike; under autocast (IRIs may run in bf16) the updates may come
  // out of a lower-precision op, and index_put takes only data's dtype.
  return call("index_put", data, index, updates.dtype === data.dtype ? updates : updates.to(data.dtype), false);
}

function clip(c: OpCall): Tensor {
  const x = need(c, 0);
  const bound = (i: number, attr: string): number | null => {
    const t = c.inputs[i];
    if (t) return scalarOf(t);
    return typeof c.attrs[attr] === "number" ? (c.attrs[attr] as number) : null;
  };
  const [lo, hi] = [bound(1, "min"), bound(2, "max")];
  return lo === null && hi === null ? x : call("clamp", x, lo, hi);
}

function cast(c: OpCall): Tensor {
  return need(c, 0).to(dtypeOf(attrInt(c, "to", 1), `${c.where}: Cast`));
}

function range(c: OpCall): Tensor {
  const scalar = (i: number) => scalarOf(need(c, i));
  return torch.arange(scalar(0), scalar(1), scalar(2), { dtype: need(c, 0).dtype, device: need(c, 0).device });
}

/** Div: integer inputs divide with truncation (ONNX), floats as usual. */
function div(c: OpCall): Tensor {
  const a = need(c, 0);
  const b = need(c, 1);
  if (!isFloat(a) && !isFloat(b)) return call("div.Tensor_mode", a, b, "trunc");
  return call("div.Tensor", a, b);
}

/** Variadic elementwise Sum, Mean, Max, Min. */
function variadic(kind: "sum" | "mean" | "max" | "min"): OpFn {
  return (c) => {
    const xs = c.inputs.filter((t): t is Tensor => t !== null);
    let y = xs[0] as Tensor;
    for (const t of xs.slice(1))
      y = kind === "max" ? call("maximum", y, t) : kind === "min" ? call("minimum", y, t) : y.add(t);
    return kind === "mean" ? y.div(xs.length) : y;
  };
}

export const OPS: Record<string, OpFn> = {
  Abs: unary("abs"),
  Add: binary("add.Tensor"),
  And: binary("logical_and"),
  AveragePool: pool("avg"),
  Cast: cast,
  Ceil: unary("ceil"),
  Clip: clip,
  Concat: concat,
  ConstantOfShape: constantOfShape,
  Conv: conv,
  Cos: unary("cos"),
  Div: div,
  Dropout: (c) => [need(c, 0), null],
  Equal: binary("eq.Tensor"),
  Erf: unary("erf"),
  Exp: unary("exp"),
  Expand: expand,
  Flatten: flatten,
  Floor: unary("floor"),
  Gather: gather,
  Gelu: (c) => call("gelu", need(c, 0), attrString(c, "approximate", "none")),
  Gemm: gemm,
  GlobalAveragePool: (c) => {
    const x = need(c, 0);
    return call(
      "mean.dim",
      x,
      x.shape.slice(2).map((_, i) => i + 2),
      true,
      null,
    );
  },
  GlobalMaxPool: (c) => {
    const x = need(c, 0);
    return call(
      "amax",
      x,
      x.shape.slice(2).map((_, i) => i + 2),
      true,
    );
  },
  Greater: binary("gt.Tensor"),
  GreaterOrEqual: binary("ge.Tensor"),
  HardSigmoid: (c) =>
    need(c, 0)
      .mul(attrFloat(c, "alpha", 0.2))
      .add(attrFloat(c, "beta", 0.5))
      .clamp(0, 1),
  HardSwish: unary("hardswish"),
  Identity: (c) => need(c, 0),
  LayerNormalization: layerNorm,
  LeakyRelu: (c) => call("leaky_relu", need(c, 0), attrFloat(c, "alpha", 0.01)),
  Less: binary("lt.Tensor"),
  LessOrEqual: binary("le.Tensor"),
  Log: unary("log"),
  LogSoftmax: softmax("log_softmax.int"),
  // A third input is fuse.ts's fusion of MatMul by a 2-D weight and Add of its bias: ATen's linear.
  MatMul: (c) =>
    c.inputs[2] ? call("linear", need(c, 0), need(c, 1).t(), c.inputs[2]) : call("matmul", need(c, 0), need(c, 1)),
  Max: variadic("max"),
  MaxPool: pool("max"),
  Mean: variadic("mean"),
  Min: variadic("min"),
  Mod: (c) => call(attrInt(c, "fmod", 0) ? "fmod.Tensor" : "remainder.Tensor", need(c, 0), need(c, 1)),
  Mul: binary("mul.Tensor"),
  Neg: unary("neg"),
  Not: unary("logical_not"),
  Or: binary("logical_or"),
  Pad: pad,
  Pow: binary("pow.Tensor_Tensor"),
  Range: range,
  Reciprocal: unary("reciprocal"),
  ReduceMax: reduce("amax", () => 1),
  ReduceMean: reduce("mean", () => 1),
  ReduceMin: reduce("amin", () => 1),
  ReduceSum: reduce("sum", () => 1),
  Relu: unary("relu"),
  Reshape: reshape,
  ScatterND: scatterND,
  Shape: (c) => {
    const x = need(c, 0);
    const dims = x.shape as number[];
    const start = norm(attrInt(c, "start", 0), dims.length);
    const end = typeof c.attrs.end === "number" ? norm(c.attrs.end, dims.length) : dims.length;
    return torch.tensor(dims.slice(Math.max(0, start), Math.min(end, dims.length)), {
      dtype: "int64",
      device: x.device,
    });
  },
  Sigmoid: unary("sigmoid"),
  Sign: unary("sign"),
  Sin: unary("sin"),
  Slice: slice,
  Softmax: softmax("softmax.int"),
  Split: split,
  Sqrt: unary("sqrt"),
  Squeeze: squeeze,
  Sub: binary("sub.Tensor"),
  Sum: variadic("sum"),
  Tanh: unary("tanh"),
  Tile: (c) => call("repeat", need(c, 0), ints(need(c, 1))),
  Transpose: transpose,
  Unsqueeze: unsqueeze,
  Where: (c) => call("where.self", need(c, 0), need(c, 1), need(c, 2)),
  Xor: binary("logical_xor"),
};

/** Operators the model runs itself (models/onnx/model.ts): with modules, or from attributes alone. */
export const MODEL_OPS = new Set(["BatchNormalization", "Constant"]);

export const isSupported = (opType: string, domain: string): boolean =>
  (domain === "" || domain === "ai.onnx") && (opType in OPS || MODEL_OPS.has(opType));
