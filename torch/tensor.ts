// The Tensor class: a typed, PyTorch-named surface over one libtorch tensor. Every operator
// goes through `call`, which resolves the ATen schema once and then calls it boxed.
import { type Device, isDevice } from "./device.js";
import { type DType, dtypeCode, dtypeName, type TypedArray, typedArrayOf } from "./dtype.js";
import { type Disposable, track, untrack } from "./memory.js";
import { type Handle, native } from "./native.js";

export type Scalar = number | boolean;

/** A dense tensor's memory layout (PyTorch's torch.contiguous_format and torch.channels_last). */
export type MemoryFormat = "contiguous" | "channels-last";
/** c10::MemoryFormat's values, as the operators' MemoryFormat arguments take them. */
const MEMORY_FORMAT_CODES: Record<MemoryFormat, number> = { contiguous: 0, "channels-last": 2 };

const opIds = new Map<string, number>();

/** The cached dispatcher id of an ATen operator, "name" or "name.overload". */
function opId(name: string): number {
  let id = opIds.get(name);
  if (id === undefined) {
    const dot = name.indexOf(".");
    id = native.findOp(`aten::${dot < 0 ? name : name.slice(0, dot)}`, dot < 0 ? "" : name.slice(dot + 1));
    opIds.set(name, id);
  }
  return id;
}

function toNative(a: unknown): unknown {
  if (a instanceof Tensor) return a.handle;
  if (Array.isArray(a) && a.length > 0 && (a[0] instanceof Tensor || a.some((x) => x instanceof Tensor)))
    return a.map((x) => (x instanceof Tensor ? x.handle : x));
  return a;
}

/** An operator's result: a number is a tensor's handle, {number} a plain number (convert.cc). */
function fromNative(r: unknown): unknown {
  if (typeof r === "number") return new Tensor(r as Handle);
  if (r === null || typeof r !== "object") return r;
  if (Array.isArray(r)) return r.map(fromNative);
  return (r as { number: number }).number;
}

/**
 * Calls an ATen operator by schema name with positional arguments (undefined takes the
 * schema's default). Tensors map to tensors, numbers to int/float/Scalar as the schema asks.
 * Operators with several outputs return an array.
 */
// biome-ignore lint/suspicious/noExplicitAny: results are typed by the wrappers that call this
export function call(name: string, ...args: unknown[]): any {
  return callById(opId(name), args);
}

/** call() with the operator's id resolved already (the hot paths keep their ids). */
// biome-ignore lint/suspicious/noExplicitAny: results are typed by the wrappers that call this
function callById(id: number, args: unknown[]): any {
  for (let i = 0; i < args.length; i++) args[i] = toNative(args[i]);
  return fromNative(native.callOp(id, args));
}

/** The schema of an ATen operator, e.g. schema("conv2d"). */
export function schema(name: string): string {
  return native.opSchema(opId(name));
}

/**
 * Typed calls (native/src/fast.cc): an operator whose schema has one of a few common signatures
 * is bound once to libtorch's typed handle and called with its arguments directly, with no
 * argument array and no boxing. For small tensors this host work is most of a call's cost. The
 * results are callOp's (tested against it); everything else goes through call().
 */
type TypedKind =
  | "unary"
  | "binary"
  | "alpha"
  | "scalar"
  | "scalarAlpha"
  | "inplaceAlpha"
  | "inplace"
  | "inplaceScalar"
  | "reduce";
/**
 * One operator bound for typed calls, resolved on its first call. Callers keep theirs in a
 * constant or a map keyed by the bare name, so no string is built per call.
 */
class Typed {
  #i = -1;
  constructor(
    readonly name: string,
    readonly kind: TypedKind,
  ) {}
  get i(): number {
    if (this.#i < 0) this.#i = native.bindTyped(opId(this.name), this.kind);
    return this.#i;
  }
}

/** The Typed of each name, made on first use. */
function byName(kind: TypedKind, overload = ""): (name: string) => Typed {
  const m = new Map<string, Typed>();
  return (name) => {
    let t = m.get(name);
    if (!t) {
      t = new Typed(overload ? `${name}.${overload}` : name, kind);
      m.set(name, t);
    }
    return t;
  };
}
const unaryTyped = byName("unary");
const matmulTyped = byName("binary");
const tensorTyped = byName("binary", "Tensor");
const scalarTyped = byName("scalar", "Scalar");
const ADD = { tensor: new Typed("add.Tensor", "alpha"), scalar: new Typed("add.Scalar", "scalarAlpha") };
const SUB = { tensor: new Typed("sub.Tensor", "alpha"), scalar: new Typed("sub.Scalar", "scalarAlpha") };
const ADD_ = new Typed("add_.Tensor", "inplaceAlpha");
const SUB_ = new Typed("sub_.Tensor", "inplaceAlpha");
const MUL_ = { tensor: new Typed("mul_.Tensor", "inplace"), scalar: new Typed("mul_.Scalar", "inplaceScalar") };
const DIV_ = { tensor: new Typed("div_.Tensor", "inplace"), scalar: new Typed("div_.Scalar", "inplaceScalar") };
const REDUCE = { sum: new Typed("sum", "reduce"), mean: new Typed("mean", "reduce") };

const wrap = (h: Handle): Tensor => new Tensor(h);

function unaryOp(name: string, self: Tensor): Tensor {
  return wrap(native.unaryOp(unaryTyped(name).i, self.handle));
}

/** An operator (self, other) -> Tensor: matmul, mm, bmm. */
function binaryOp(name: string, self: Tensor, other: Tensor): Tensor {
  return wrap(native.binaryOp(matmulTyped(name).i, self.handle, other.handle));
}

/** sum or mean over every element (dtype None). */
function reduceOp(name: "sum" | "mean", self: Tensor): Tensor {
  return wrap(native.reduceOp(REDUCE[name].i, self.handle));
}

/** `name.Tensor` or `name.Scalar` by the kind of `other`, as PyTorch's Python binding does. */
function binary(name: string, self: Tensor, other: Tensor | Scalar): Tensor {
  return other instanceof Tensor
    ? wrap(native.binaryOp(tensorTyped(name).i, self.handle, other.handle))
    : wrap(native.scalarOp(scalarTyped(name).i, self.handle, other));
}

/** add and sub, which take alpha (other * alpha is added or subtracted). */
function withAlpha(op: typeof ADD, self: Tensor, other: Tensor | Scalar, alpha: Scalar): Tensor {
  return other instanceof Tensor
    ? wrap(native.alphaOp(op.tensor.i, self.handle, other.handle, alpha))
    : wrap(native.scalarAlphaOp(op.scalar.i, self.handle, other, alpha));
}

function dims(d: number | number[] | undefined): number[] | undefined {
  return d === undefined ? undefined : Array.isArray(d) ? d : [d];
}

export class Tensor implements Disposable {
  #h: Handle | null;
  _scope: Disposable[] | null = null;

  /** Wraps a native handle; use the creation functions (tensor, zeros, ...) instead. */
  constructor(h: Handle) {
    this.#h = h;
    track(this);
  }

  get handle(): Handle {
    if (this.#h === null) throw new Error("this Tensor has been disposed");
    return this.#h;
  }

  /**
   * Gives up the native handle without freeing it (null when already disposed): tidy frees a
   * scope's handles together (native.freeBuffered). Internal to torch/.
   */
  _release(): Handle | null {
    const h = this.#h;
    this.#h = null;
    return h;
  }

  /** Lets the garbage collector free this from now on (it is in no scope). Internal to torch/. */
  _escape(): void {
    if (this.#h !== null) native.finalizeWhenCollected(this, this.#h);
  }

  /** Frees the native tensor now. Idempotent. */
  dispose(): void {
    if (this.#h === null) return;
    native.free(this.#h);
    this.#h = null;
    untrack(this);
  }

  get isDisposed(): boolean {
    return this.#h === null;
  }

  // ---- metadata ----
  get shape(): number[] {
    return native.shape(this.handle);
  }
  size(dim?: number): number | number[] {
    const s = this.shape;
    if (dim === undefined) return s;
    return s[dim < 0 ? s.length + dim : dim];
  }
  get ndim(): number {
    return this.shape.length;
  }
  dim(): number {
    return this.shape.length;
  }
  numel(): number {
    return this.shape.reduce((a, b) => a * b, 1);
  }
  get dtype(): DType {
    return dtypeName(native.dtype(this.handle));
  }
  get device(): Device {
    return native.device(this.handle) as Device;
  }
  toString(): string {
    return `Tensor(shape=[${this.shape.join(", ")}], dtype=${this.dtype}, device=${this.device})`;
  }

  // ---- data out ----
  /** The single element as a number (or boolean for bool tensors). */
  item(): number {
    return native.item(this.handle) as number;
  }
  /** A copy of the elements, row-major, in the typed array of the dtype (half types as float32). */
  toTypedArray(): TypedArray {
    const d = this.dtype;
    if (d === "float16" || d === "bfloat16") {
      const f = this.to("float32");
      try {
        return f.toTypedArray();
      } finally {
        f.dispose();
      }
    }
    return typedArrayOf(d, native.toBuffer(this.handle));
  }
  /** The elements' raw little-endian bytes, row-major, copied to the CPU (torch.fromBytes's inverse). */
  toBytes(): Uint8Array {
    return new Uint8Array(native.toBuffer(this.handle));
  }
  /** The elements as nested arrays of numbers (int64 converted to number; booleans for bool). */
  tolist(): unknown {
    const flat: (number | boolean)[] = Array.from(this.toTypedArray() as ArrayLike<number | bigint>, Number);
    if (this.dtype === "bool") for (let i = 0; i < flat.length; i++) flat[i] = flat[i] !== 0;
    const shape = this.shape;
    if (shape.length === 0) return flat[0];
    const build = (d: number, off: number): unknown => {
      const n = shape[d];
      const stride = shape.slice(d + 1).reduce((a, b) => a * b, 1);
      const out: unknown[] = [];
      for (let i = 0; i < n; i++) out.push(d === shape.length - 1 ? flat[off + i] : build(d + 1, off + i * stride));
      return out;
    };
    return build(0, 0);
  }

  // ---- autograd ----
  get requiresGrad(): boolean {
    return native.requiresGrad(this.handle);
  }
  requiresGrad_(flag = true): this {
    native.setRequiresGrad(this.handle, flag);
    return this;
  }
  get isLeaf(): boolean {
    return native.isLeaf(this.handle);
  }
  /** The accumulated gradient (a new Tensor handle on each read), or null. */
  get grad(): Tensor | null {
    const g = native.getGrad(this.handle);
    return g === null ? null : new Tensor(g);
  }
  set grad(g: Tensor | null) {
    native.setGrad(this.handle, g === null ? null : g.handle);
  }
  backward(gradient?: Tensor, opts: { retainGraph?: boolean; createGraph?: boolean } = {}): void {
    const create = opts.createGraph ?? false;
    native.backward(this.handle, gradient ? gradient.handle : null, opts.retainGraph ?? create, create);
  }
  detach(): Tensor {
    return unaryOp("detach", this);
  }
  detach_(): this {
    call("detach_", this).dispose();
    return this;
  }

  // ---- conversion ----
  /** Converts to a dtype or moves to a device ("cpu", "cuda", "cuda:1"); returns self when nothing changes. */
  to(target: DType | Device, opts: { copy?: boolean; dtype?: DType } = {}): Tensor {
    if (isDevice(target)) {
      return call("to.device", this, target, dtypeCode(opts.dtype ?? this.dtype), false, opts.copy ?? false);
    }
    return call("to.dtype", this, dtypeCode(target as DType), false, opts.copy ?? false);
  }
  cpu(): Tensor {
    return this.to("cpu");
  }
  cuda(index = 0): Tensor {
    return this.to(`cuda:${index}`);
  }
  float(): Tensor {
    return this.to("float32");
  }
  double(): Tensor {
    return this.to("float64");
  }
  long(): Tensor {
    return this.to("int64");
  }
  clone(): Tensor {
    return call("clone", this);
  }
  /**
   * The elements laid out without gaps in `memoryFormat` (PyTorch's `memory_format`): row-major
   * by default, or channels-last (NHWC strides, for 4-d tensors); the same tensor when it already is.
   */
  contiguous(memoryFormat: MemoryFormat = "contiguous"): Tensor {
    return call("contiguous", this, MEMORY_FORMAT_CODES[memoryFormat]);
  }
  /** Whether the elements are laid out row-major without gaps. */
  isContiguous(): boolean {
    return native.isContiguous(this.handle);
  }
  /** The in-place version counter (tensor._version): changes with every in-place write. */
  version(): number {
    return native.tensorVersion(this.handle);
  }
  /** Whether the tensor is in oneDNN's opaque blocked layout (tensor.is_mkldnn; models/onnx/blocked.ts). */
  isMkldnn(): boolean {
    return native.isMkldnn(this.handle);
  }
  /** Element strides per dimension (tensor.stride()). */
  stride(): number[] {
    return native.strides(this.handle);
  }

  // ---- shape ----
  reshape(...shape: number[] | [number[]]): Tensor {
    return call("reshape", this, Array.isArray(shape[0]) ? shape[0] : shape);
  }
  view(...shape: number[] | [number[]]): Tensor {
    return call("view", this, Array.isArray(shape[0]) ? shape[0] : shape);
  }
  permute(...order: number[] | [number[]]): Tensor {
    return call("permute", this, Array.isArray(order[0]) ? order[0] : order);
  }
  transpose(dim0: number, dim1: number): Tensor {
    return call("transpose.int", this, dim0, dim1);
  }
  /** Matrix transpose of the last two dimensions. */
  get mT(): Tensor {
    return this.transpose(-2, -1);
  }
  t(): Tensor {
    return unaryOp("t", this);
  }
  flatten(startDim = 0, endDim = -1): Tensor {
    return call("flatten.using_ints", this, startDim, endDim);
  }
  squeeze(dim?: number): Tensor {
    return dim === undefined ? call("squeeze", this) : call("squeeze.dim", this, dim);
  }
  unsqueeze(dim: number): Tensor {
    return call("unsqueeze", this, dim);
  }
  expand(...shape: number[] | [number[]]): Tensor {
    return call("expand", this, Array.isArray(shape[0]) ? shape[0] : shape);
  }
  expandAs(other: Tensor): Tensor {
    return call("expand_as", this, other);
  }
  repeat(...times: number[] | [number[]]): Tensor {
    return call("repeat", this, Array.isArray(times[0]) ? times[0] : times);
  }
  narrow(dim: number, start: number, length: number): Tensor {
    return call("narrow", this, dim, start, length);
  }
  /** Python's x[..., start:end:step] along one dimension. */
  slice(dim: number, start?: number, end?: number, step = 1): Tensor {
    return call("slice.Tensor", this, dim, start ?? null, end ?? null, step);
  }
  select(dim: number, index: number): Tensor {
    return call("select.int", this, dim, index);
  }
  indexSelect(dim: number, index: Tensor): Tensor {
    return call("index_select", this, dim, index);
  }
  /** Advanced indexing, x[i0, i1, ...] with index tensors (null for a full dimension). */
  index(indices: (Tensor | null)[]): Tensor {
    return call("index.Tensor", this, indices);
  }
  gather(dim: number, index: Tensor): Tensor {
    return call("gather", this, dim, index);
  }
  chunk(chunks: number, dim = 0): Tensor[] {
    return call("chunk", this, chunks, dim);
  }
  /** Pieces of `size` along dim (the last may be smaller), or of the given sizes. */
  split(size: number | number[], dim = 0): Tensor[] {
    return Array.isArray(size) ? call("split_with_sizes", this, size, dim) : call("split.Tensor", this, size, dim);
  }
  unbind(dim = 0): Tensor[] {
    return call("unbind.int", this, dim);
  }
  /** Pads the last dimensions: [left, right, top, bottom, ...] as torch.nn.functional.pad. */
  pad(pad: number[], mode: "constant" | "reflect" | "replicate" | "circular" = "constant", value?: number): Tensor {
    return call("pad", this, pad, mode, value ?? null);
  }
  maskedFill(mask: Tensor, value: Scalar): Tensor {
    return call("masked_fill.Scalar", this, mask, value);
  }

  // ---- elementwise ----
  add(other: Tensor | Scalar, alpha: Scalar = 1): Tensor {
    return withAlpha(ADD, this, other, alpha);
  }
  sub(other: Tensor | Scalar, alpha: Scalar = 1): Tensor {
    return withAlpha(SUB, this, other, alpha);
  }
  mul(other: Tensor | Scalar): Tensor {
    return binary("mul", this, other);
  }
  div(other: Tensor | Scalar): Tensor {
    return binary("div", this, other);
  }
  pow(exponent: Tensor | Scalar): Tensor {
    return exponent instanceof Tensor
      ? call("pow.Tensor_Tensor", this, exponent)
      : call("pow.Tensor_Scalar", this, exponent);
  }
  neg(): Tensor {
    return unaryOp("neg", this);
  }
  abs(): Tensor {
    return unaryOp("abs", this);
  }
  exp(): Tensor {
    return unaryOp("exp", this);
  }
  log(): Tensor {
    return unaryOp("log", this);
  }
  sqrt(): Tensor {
    return unaryOp("sqrt", this);
  }
  rsqrt(): Tensor {
    return unaryOp("rsqrt", this);
  }
  square(): Tensor {
    return unaryOp("square", this);
  }
  reciprocal(): Tensor {
    return unaryOp("reciprocal", this);
  }
  sin(): Tensor {
    return call("sin", this);
  }
  cos(): Tensor {
    return call("cos", this);
  }
  tanh(): Tensor {
    return unaryOp("tanh", this);
  }
  sigmoid(): Tensor {
    return unaryOp("sigmoid", this);
  }
  sign(): Tensor {
    return unaryOp("sign", this);
  }
  floor(): Tensor {
    return unaryOp("floor", this);
  }
  /** Python's modulo (the result has the divisor's sign), as torch.remainder. */
  remainder(other: Tensor | Scalar): Tensor {
    return binary("remainder", this, other);
  }
  ceil(): Tensor {
    return unaryOp("ceil", this);
  }
  round(): Tensor {
    return unaryOp("round", this);
  }
  relu(): Tensor {
    return unaryOp("relu", this);
  }
  /** clamp with number or tensor bounds (null for no bound). */
  clamp(min: Tensor | number | null, max: Tensor | number | null = null): Tensor {
    if (min instanceof Tensor || max instanceof Tensor) return call("clamp.Tensor", this, min, max);
    return call("clamp", this, min, max);
  }
  maximum(other: Tensor): Tensor {
    return call("maximum", this, other);
  }
  minimum(other: Tensor): Tensor {
    return call("minimum", this, other);
  }
  eq(other: Tensor | Scalar): Tensor {
    return binary("eq", this, other);
  }
  ne(other: Tensor | Scalar): Tensor {
    return binary("ne", this, other);
  }
  lt(other: Tensor | Scalar): Tensor {
    return binary("lt", this, other);
  }
  le(other: Tensor | Scalar): Tensor {
    return binary("le", this, other);
  }
  gt(other: Tensor | Scalar): Tensor {
    return binary("gt", this, other);
  }
  ge(other: Tensor | Scalar): Tensor {
    return binary("ge", this, other);
  }
  logicalAnd(other: Tensor): Tensor {
    return call("logical_and", this, other);
  }
  logicalOr(other: Tensor): Tensor {
    return call("logical_or", this, other);
  }
  logicalNot(): Tensor {
    return call("logical_not", this);
  }

  // ---- in place (for optimisers and buffers; no autograd history on leaves that need grad) ----
  add_(other: Tensor | Scalar, alpha: Scalar = 1): this {
    if (other instanceof Tensor) native.inplaceAlphaOp(ADD_.i, this.handle, other.handle, alpha);
    else call("add_.Scalar", this, other, alpha).dispose();
    return this;
  }
  sub_(other: Tensor | Scalar, alpha: Scalar = 1): this {
    if (other instanceof Tensor) native.inplaceAlphaOp(SUB_.i, this.handle, other.handle, alpha);
    else call("sub_.Scalar", this, other, alpha).dispose();
    return this;
  }
  mul_(other: Tensor | Scalar): this {
    if (other instanceof Tensor) native.inplaceOp(MUL_.tensor.i, this.handle, other.handle);
    else native.inplaceScalarOp(MUL_.scalar.i, this.handle, other);
    return this;
  }
  div_(other: Tensor | Scalar): this {
    if (other instanceof Tensor) native.inplaceOp(DIV_.tensor.i, this.handle, other.handle);
    else native.inplaceScalarOp(DIV_.scalar.i, this.handle, other);
    return this;
  }
  /** self += value * t1 * t2 */
  addcmul_(t1: Tensor, t2: Tensor, value: Scalar = 1): this {
    call("addcmul_", this, t1, t2, value).dispose();
    return this;
  }
  /** self += value * t1 / t2 */
  addcdiv_(t1: Tensor, t2: Tensor, value: Scalar = 1): this {
    call("addcdiv_", this, t1, t2, value).dispose();
    return this;
  }
  clamp_(min: Tensor | number | null, max: Tensor | number | null = null): this {
    if (min instanceof Tensor || max instanceof Tensor) call("clamp_.Tensor", this, min, max).dispose();
    else call("clamp_", this, min, max).dispose();
    return this;
  }
  copy_(src: Tensor): this {
    call("copy_", this, src).dispose();
    return this;
  }
  zero_(): this {
    call("zero_", this).dispose();
    return this;
  }
  fill_(value: Scalar): this {
    call("fill_.Scalar", this, value).dispose();
    return this;
  }
  uniform_(from = 0, to = 1): this {
    call("uniform_", this, from, to).dispose();
    return this;
  }
  normal_(mean = 0, std = 1): this {
    call("normal_", this, mean, std).dispose();
    return this;
  }

  // ---- reductions ----
  sum(dim?: number | number[], keepdim = false): Tensor {
    return dim === undefined ? reduceOp("sum", this) : call("sum.dim_IntList", this, dims(dim), keepdim);
  }
  mean(dim?: number | number[], keepdim = false): Tensor {
    return dim === undefined ? reduceOp("mean", this) : call("mean.dim", this, dims(dim), keepdim);
  }
  prod(): Tensor {
    return call("prod", this);
  }
  /** The maximum of all elements, or [values, indices] along dim. */
  max(): Tensor;
  max(dim: number, keepdim?: boolean): [Tensor, Tensor];
  max(dim?: number, keepdim = false): Tensor | [Tensor, Tensor] {
    return dim === undefined ? call("max", this) : call("max.dim", this, dim, keepdim);
  }
  min(): Tensor;
  min(dim: number, keepdim?: boolean): [Tensor, Tensor];
  min(dim?: number, keepdim = false): Tensor | [Tensor, Tensor] {
    return dim === undefined ? call("min", this) : call("min.dim", this, dim, keepdim);
  }
  argmax(dim?: number, keepdim = false): Tensor {
    return call("argmax", this, dim ?? null, keepdim);
  }
  argmin(dim?: number, keepdim = false): Tensor {
    return call("argmin", this, dim ?? null, keepdim);
  }
  /** Variance with Bessel's correction by default (unbiased, as torch.var). */
  var(dim?: number | number[], opts: { unbiased?: boolean; keepdim?: boolean } = {}): Tensor {
    return call("var.dim", this, dims(dim) ?? null, opts.unbiased ?? true, opts.keepdim ?? false);
  }
  std(dim?: number | number[], opts: { unbiased?: boolean; keepdim?: boolean } = {}): Tensor {
    return call("std.dim", this, dims(dim) ?? null, opts.unbiased ?? true, opts.keepdim ?? false);
  }
  /** Vector p-norm over dim (all elements by default): the Frobenius norm for p=2. */
  norm(p: number = 2, dim?: number | number[], keepdim = false): Tensor {
    return call("linalg_vector_norm", this, p, dims(dim) ?? null, keepdim);
  }
  logsumexp(dim: number | number[], keepdim = false): Tensor {
    return call("logsumexp", this, dims(dim), keepdim);
  }
  all(): Tensor {
    return call("all", this);
  }
  any(): Tensor {
    return call("any", this);
  }

  // ---- linear algebra and nn conveniences ----
  matmul(other: Tensor): Tensor {
    return binaryOp("matmul", this, other);
  }
  mm(other: Tensor): Tensor {
    return binaryOp("mm", this, other);
  }
  bmm(other: Tensor): Tensor {
    return binaryOp("bmm", this, other);
  }
  softmax(dim: number): Tensor {
    return call("softmax.int", this, dim);
  }
  logSoftmax(dim: number): Tensor {
    return call("log_softmax.int", this, dim);
  }
}
